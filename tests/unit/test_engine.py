"""The restore engine against an in-memory API server (tests/fake/): the hard branches, cheaply.

The real-server integration tests stay; these pin what the engine does when the server changes what it is
sent, an answer is lost, another writer wins a race, or the Lease is lost mid-run."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from statusvault.archive import ArchiveReader
from statusvault.kube.discovery import Discovery
from statusvault.restore.core.journal import Journal
from statusvault.restore.core.servedtypes import ServedTypes
from statusvault.restore.options import RestoreOptions
from statusvault.restore.planning.build import build_plan
from statusvault.restore.planning.existence import ExistenceIndex
from statusvault.restore.running.engine import EngineSettings, RestoreEngine
from tests.builders import cr, owner_ref, resource_type, with_meta, write_archive
from tests.fake import FakeKube

KC = resource_type("xyz.example.com", "KubernetesCluster")
LEGACY = resource_type("legacy.example.com", "LegacyApp", status=False)
NS = "team-a"


def kc(name: str, status: dict | None = None, spec: dict | None = None, **kw) -> dict:
    return with_meta(cr("xyz.example.com/v1", "KubernetesCluster", name, spec=spec, status=status, **kw), NS)


@pytest.fixture
def fake() -> FakeKube:
    kube = FakeKube()
    kube.put(_namespaces(), {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NS}})
    return kube


def _namespaces():
    from statusvault.vocabulary.kinds import NAMESPACES

    return NAMESPACES


def restore(fake: FakeKube, archive: Path, cancel: threading.Event | None = None, **opts):
    """Plan and run a restore of `archive` into `fake`; returns (report, journal) with the journal kept open."""
    options = RestoreOptions(**opts)
    discovery = Discovery([KC, LEGACY, _namespaces()], [KC, LEGACY, _namespaces()])
    journal = Journal.create(None)
    reader = ArchiveReader(archive)
    exists = ExistenceIndex(fake, journal.manager)
    with build_plan(reader, options=options, live=discovery, exists=exists, backup="b") as plan:
        engine = RestoreEngine(fake, ServedTypes(discovery, lambda: discovery), EngineSettings(4, cancel=cancel))
        report = engine.run(reader, plan, journal, options)
        pending = plan.pending(journal.path, wanted_status=True)
    return report, journal, pending


@pytest.fixture
def backup(tmp_path) -> Iterator:
    def _backup(*objs):
        return write_archive(tmp_path / "a.tar.gz", [(LEGACY if o["kind"] == "LegacyApp" else KC, o) for o in objs])

    yield _backup


def live_status(fake: FakeKube, name: str, rt=KC):
    return (fake.get(rt, NS, name) or {}).get("status")


def test_two_passes_status_dropped_on_create_then_written(fake, backup):
    legacy = with_meta(cr("legacy.example.com/v1", "LegacyApp", "l", spec={"n": 1}, status={"ref": 1}), NS)
    report, journal, _ = restore(fake, backup(kc("a", {"id": "a"}, {"n": 1}), legacy))
    assert report.work_complete and report.lacking_status_count == 0
    assert live_status(fake, "a") == {"id": "a"}
    assert live_status(fake, "l", LEGACY) == {"ref": 1}, "no /status subresource: it travels in the body"
    assert ("replace/status", "a") in fake.calls and ("replace/status", "l") not in fake.calls
    report.close()
    journal.close()


def test_a_resent_create_is_recognised_although_the_server_changed_the_object(backup):
    """The issue's story: the answer to a create is lost after the server acted, and the server filled a
    default; the resent POST meets 409, the object is the restore's own by its field manager."""
    fake = FakeKube(defaults=lambda obj: obj.setdefault("spec", {}).setdefault("tier", "gold"))
    fake.lose_create_answer = {"a"}
    report, journal, _ = restore(fake, backup(kc("a", {"id": "a"}, {"n": 1}), kc("b", {"id": "b"}, {"n": 2})))
    assert report.work_complete, [r.to_dict() for r in report.attention]
    assert live_status(fake, "a") == {"id": "a"}
    assert report.counts()["results"] == {"created": 3}, "the namespace and both objects"
    report.close()
    journal.close()


def test_a_resent_create_of_a_body_with_nothing_but_a_name_is_recognised(fake, backup):
    bare = kc("bare", {"id": "x"})
    del bare["spec"]
    fake.lose_create_answer = {"bare"}
    report, journal, _ = restore(fake, backup(bare))
    assert report.work_complete and live_status(fake, "bare") == {"id": "x"}
    report.close()
    journal.close()


def test_an_object_another_writer_creates_during_the_run_is_counted_and_not_done(fake, backup):
    def gitops(name: str) -> None:
        if name == "a":
            fake.before("create", None)
            fake.put(KC, kc("a", spec={"from": "git"}), manager="argocd")

    fake.before("create", gitops)
    report, journal, pending = restore(fake, backup(kc("a", {"id": "a"}, {"n": 1}), kc("b", {"id": "b"})))
    assert not report.work_complete and report.lacking_status_count == 1 and not report.failures
    assert [r.name for r in report.lacking_status] == ["a"]
    assert "created by another writer" in report.lacking_status[0].message
    assert live_status(fake, "a") is None and fake.get(KC, NS, "a")["spec"] == {"from": "git"}
    assert pending == 1, "not marked done: the re-run tries it again"
    report.close()
    journal.close()


def test_a_status_write_that_loses_a_race_is_retried_on_the_fresh_object(fake, backup):
    fake.race_status_write = {"a"}
    report, journal, _ = restore(fake, backup(kc("a", {"id": "a"})))
    assert report.work_complete and live_status(fake, "a") == {"id": "a"}
    assert [c for c in fake.calls if c == ("replace/status", "a")] == [("replace/status", "a")] * 2
    report.close()
    journal.close()


def test_an_update_that_loses_a_race_is_retried(fake, backup):
    fake.put(KC, kc("a", spec={"n": "drifted"}))
    fake.race_patch = {"a"}
    report, journal, _ = restore(fake, backup(kc("a", {"id": "a"}, {"n": 1})), existing_policy="update")
    assert report.work_complete, [r.to_dict() for r in report.attention]
    live = fake.get(KC, NS, "a")
    assert live["spec"] == {"n": 1} and live["status"] == {"id": "a"}
    assert "touched" not in (live["metadata"].get("annotations") or {}), "the backup's content wins"
    assert fake.calls.count(("patch", "a")) == 2
    report.close()
    journal.close()


def schema_lost_zone_and_secret(obj: dict) -> None:
    """A CRD whose schema no longer has spec.zone and status.secret (the server prunes them), and defaults tier."""
    (obj.get("spec") or {}).pop("zone", None)
    (obj.get("status") or {}).pop("secret", None)
    obj.setdefault("spec", {}).setdefault("tier", "gold")


def by_name(report) -> dict[str, dict]:
    return {i["name"]: i for i in report.results()}


def test_fields_the_server_prunes_are_reported_by_path_and_a_status_not_kept_is_a_failure(backup):
    """Every pruned field is named; a saved status the server did not keep whole is the object's failure
    (a mismatch), a spec field it pruned is not (--strict makes it one)."""
    fake = FakeKube(defaults=schema_lost_zone_and_secret)
    fake.put(_namespaces(), {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NS}})
    objs = kc("both", {"id": "a", "secret": 1}, {"n": 1, "zone": "eu"}), kc("status", {"id": "b", "secret": 2})
    report, journal, pending = restore(fake, backup(*objs, kc("untouched", {"id": "c"}, {"n": 3})))
    assert not report.work_complete and {r.name for r in report.failures} == {"both", "status"}
    items = by_name(report)
    assert items["both"]["serverChanges"] == [
        {"path": "spec.zone", "change": "pruned"},
        {"path": "status.secret", "change": "pruned"},
    ]
    assert items["both"]["status"] == "mismatch" and live_status(fake, "both") == {"id": "a"}
    assert "status.secret pruned" in items["both"]["message"]
    assert items["untouched"]["status"] == "written"
    assert items["status"]["serverChanges"] == [{"path": "status.secret", "change": "pruned"}]
    assert "serverChanges" not in items["untouched"], "a defaulted field (spec.tier) is not a change"
    assert (report.server_changed, report.server_warned) == (2, 0)
    assert report.counts()["server"] == {"changed": 2}
    assert report.header()["serverChanges"] == [
        {"resource": KC.qualified, "path": "status.secret", "change": "pruned", "objects": 2},
        {"resource": KC.qualified, "path": "spec.zone", "change": "pruned", "objects": 1},
    ]
    report.close()
    journal.close()


def test_warning_headers_are_reported_once_per_object(fake, backup):
    deprecated = "xyz.example.com/v1 KubernetesCluster is deprecated; use v2"
    fake.warn = {"a": deprecated}
    report, journal, _ = restore(fake, backup(kc("a", {"id": "a"}, {"n": 1}), kc("b", {"id": "b"})))
    items = by_name(report)
    assert items["a"]["serverWarnings"] == [deprecated], "the create's and the status write's, once"
    assert "serverWarnings" not in items["b"]
    assert report.work_complete and (report.server_changed, report.server_warned) == (0, 1)
    assert report.header()["serverWarnings"] == [{"resource": KC.qualified, "warning": deprecated, "objects": 1}]
    report.close()
    journal.close()


def test_an_update_is_compared_with_the_patch_answer(backup):
    fake = FakeKube(defaults=schema_lost_zone_and_secret)
    fake.put(_namespaces(), {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NS}})
    fake.put(KC, kc("a", spec={"n": "drifted"}))
    report, journal, _ = restore(fake, backup(kc("a", {"id": "a"}, {"n": 1, "zone": "eu"})), existing_policy="update")
    assert by_name(report)["a"]["result"] == "updated"
    assert by_name(report)["a"]["serverChanges"] == [{"path": "spec.zone", "change": "pruned"}]
    report.close()
    journal.close()


def test_an_update_of_a_type_without_the_status_subresource_compares_what_each_write_sent(fake, backup):
    """The patch never carries the status (the PUT of the whole object that follows does): the live object's
    old status in the patch's answer is not a change."""
    fake.put(LEGACY, with_meta(cr("legacy.example.com/v1", "LegacyApp", "l", spec={"n": 0}, status={"ref": 0}), NS))
    saved = with_meta(cr("legacy.example.com/v1", "LegacyApp", "l", spec={"n": 1}, status={"ref": 1}), NS)
    report, journal, _ = restore(fake, backup(saved), existing_policy="update")
    item = by_name(report)["l"]
    assert (item["result"], item["status"]) == ("updated", "written") and live_status(fake, "l", LEGACY) == {"ref": 1}
    assert "serverChanges" not in item
    report.close()
    journal.close()


def test_a_dry_run_claims_no_server_change(backup):
    fake = FakeKube(defaults=schema_lost_zone_and_secret)
    fake.put(_namespaces(), {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NS}})
    fake.warn = {"a": "deprecated"}
    for dry_run in ("server", "client"):
        report, journal, _ = restore(fake, backup(kc("a", {"id": "a", "secret": 1}, {"zone": "eu"})), dry_run=dry_run)
        assert (report.server_changed, report.server_warned) == (0, 0), dry_run
        assert not any("serverChanges" in i or "serverWarnings" in i for i in report.results())
        report.close()
        journal.close()


def test_an_object_found_at_already_exists_is_not_compared(backup):
    """Its create's answer was lost: what the GET finds may have been changed since by other writers."""
    fake = FakeKube(defaults=schema_lost_zone_and_secret)
    fake.put(_namespaces(), {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NS}})
    fake.lose_create_answer = {"a"}
    report, journal, _ = restore(fake, backup(kc("a", {"id": "a"}, {"zone": "eu"})))
    assert report.work_complete and "serverChanges" not in by_name(report)["a"]
    report.close()
    journal.close()


def test_losing_the_lease_mid_run_starts_no_new_object_and_counts_the_rest(fake, backup):
    cancel = threading.Event()
    objs = [kc(f"k{i:02d}", {"id": i}, {"n": i}) for i in range(40)]

    def lose_lease(name: str) -> None:
        if name == "k05":
            cancel.set()

    fake.before("create", lose_lease)
    report, journal, pending = restore(fake, backup(*objs), cancel=cancel)
    created = [n for verb, n in fake.calls if verb == "create"]
    assert report.aborted.startswith("cancelled")
    assert len(created) <= 6 + 4, "after k05 only objects already started by a worker (4), none merely queued"
    assert (
        report.lacking_status_count
        == pending
        == sum(1 for o in objs if live_status(fake, o["metadata"]["name"]) is None)
    )
    assert report.lacking_status_count >= 40 - len(created)
    assert not report.work_complete
    report.close()
    journal.close()


def test_owners_first_and_their_new_uids_in_dependents(fake, backup):
    owner = kc("owner", {"id": "o"}, {"n": 0})
    dependent = kc("dep", {"id": "d"}, {"n": 1}, owners=[owner_ref(owner)])
    report, journal, _ = restore(fake, backup(dependent, owner))
    assert report.work_complete
    new_owner = fake.get(KC, NS, "owner")
    assert fake.get(KC, NS, "dep")["metadata"]["ownerReferences"][0]["uid"] == new_owner["metadata"]["uid"]
    assert [n for verb, n in fake.calls if verb == "create" and n != NS] == ["owner", "dep"]
    report.close()
    journal.close()
