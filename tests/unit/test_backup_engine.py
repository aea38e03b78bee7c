"""The backup engine's decisions against the in-memory API server (tests/fake/): an expired continue token, a CRD
deleted between discovery and its LIST (or during it), a LIST the server refuses."""

from __future__ import annotations

import logging

import orjson
import pytest

from statusvault.backup import BackupEngine, BackupRequest
from statusvault.errors import KubeApiError
from statusvault.model import Selection
from statusvault.restore.runner import open_backup
from statusvault.storage.base import backup_prefix
from statusvault.storage.local import LocalStore
from statusvault.vocabulary.kinds import CRDS, NAMESPACES
from tests.builders import cr, crd, resource_type
from tests.fake import FakeKube

KC = resource_type("xyz.example.com", "KubernetesCluster")
WIDGETS = resource_type("example.com", "Widget")
NAMESPACES_USED = ("team-a", "team-b")


@pytest.fixture
def fake() -> FakeKube:
    """Two CRDs, two namespaces, five KubernetesClusters and two Widgets."""
    kube = FakeKube()
    for ns in NAMESPACES_USED:
        kube.put(NAMESPACES, {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}})
    kube.put(CRDS, crd("xyz.example.com", "KubernetesCluster"))
    kube.put(CRDS, crd("example.com", "Widget"))
    for i in range(5):
        obj = cr("xyz.example.com/v1", "KubernetesCluster", f"kc-{i}", spec={"n": i}, status={"phase": "Ready"})
        kube.put(KC, {**obj, "metadata": {**obj["metadata"], "namespace": NAMESPACES_USED[i % 2]}})
    for i in range(2):
        obj = cr("example.com/v1", "Widget", f"w-{i}", spec={"n": i})
        kube.put(WIDGETS, {**obj, "metadata": {**obj["metadata"], "namespace": "team-a"}})
    return kube


@pytest.fixture
def store(tmp_path) -> LocalStore:
    return LocalStore(tmp_path / "store")


def backup(fake: FakeKube, store: LocalStore, concurrency: int = 1, **selection):
    request = BackupRequest(store=store, name="b", selection=Selection(**selection), page_size=2,
                            list_concurrency=concurrency)  # fmt: skip
    return BackupEngine(fake, fake.discovery(NAMESPACES), request).run()


def archived(store: LocalStore, name: str = "b") -> list[str]:
    """`resource ns/name` of every object in the backup, in archive order."""
    with open_backup(store, name) as reader:
        objs = [orjson.loads(data) for _, data in reader.objects()]
    return [f"{o['kind']} {o['metadata'].get('namespace', '')}/{o['metadata']['name']}" for o in objs]


@pytest.mark.parametrize("concurrency", [1, 3])
def test_an_expired_continue_token_restarts_the_list_and_each_object_is_archived_once(fake, store, concurrency):
    pages: list[int] = []

    def compact_once(page: int) -> None:
        if page == 1 and 1 not in pages:  # etcd compacts between the first and the second page
            fake.compact()
        pages.append(page)

    fake.on_list(KC, compact_once)
    result = backup(fake, store, concurrency)
    assert pages[-5:] == [0, 1, 0, 1, 2], "410 on the second page: listed again from the start"
    kcs = [o for o in archived(store) if o.startswith("KubernetesCluster ")]
    assert kcs == sorted(set(kcs)) and len(kcs) == 5, "each once, in the server's order"
    assert result.manifest["resources"][KC.qualified]["count"] == 5
    assert result.objects == 5 + 2 + 2, "the clusters, the widgets and their CRDs"


def test_a_crd_deleted_between_discovery_and_its_list_leaves_its_resource_out_with_a_warning(fake, store, caplog):
    """The operator was uninstalled after discovery: its objects are gone with their CRD. The backup is the
    cluster as it is (nothing of the type), not a failed night; the log says why."""
    discovery = fake.discovery(NAMESPACES)
    fake.delete(CRDS, None, WIDGETS.qualified)
    with caplog.at_level(logging.WARNING):
        result = BackupEngine(fake, discovery, BackupRequest(store=store, name="b", page_size=2)).run()
    assert [o for o in archived(store) if o.startswith("Widget")] == []
    assert result.manifest["resources"][WIDGETS.qualified]["count"] == 0
    assert result.objects == 5 + 1, "the clusters and their CRD"
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1 and "widgets.example.com is no longer served" in warnings[0], warnings


def test_a_crd_deleted_while_its_objects_are_listed_keeps_what_was_listed_and_says_so(fake, store, caplog):
    def uninstall(page: int) -> None:
        if page == 1:
            fake.delete(CRDS, None, KC.qualified)

    fake.on_list(KC, uninstall)
    with caplog.at_level(logging.WARNING):
        result = backup(fake, store)
    assert result.manifest["resources"][KC.qualified]["count"] == 2, "the first page, listed before the deletion"
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1 and "holds the 2 object(s) listed before" in warnings[0], warnings


@pytest.mark.parametrize("concurrency", [1, 3])
def test_a_list_the_server_refuses_fails_the_backup_with_one_line_naming_the_resource_and_the_verb(
    fake, store, concurrency
):
    fake.fail("list", WIDGETS, 403, times=None)  # RBAC refuses every LIST, not one
    with pytest.raises(KubeApiError) as refused:
        backup(fake, store, concurrency, namespaces=("team-a",))
    message = str(refused.value)
    assert refused.value.code == 403 and "\n" not in message
    assert "widgets.example.com in namespace team-a" in message and "list" in message, message
    assert "--exclude-resources widgets.example.com" in message, "says what to do"
    assert list(store.list(backup_prefix("b"))) == [], "all or nothing: no partial backup left"
