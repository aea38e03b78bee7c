"""The restore controller's decisions against the in-memory API server (tests/fake/): an intent restored once,
a Lease another replica holds or takes mid-run, an intent edited mid-run, the circuit breaker."""

from __future__ import annotations

import datetime as dt
import threading

import pytest

from statusvault import rfc3339
from statusvault.backup import BackupEngine, BackupRequest
from statusvault.controller import loop
from statusvault.controller.intent import INTENT_LABEL, digest_of
from statusvault.controller.lease import Lease
from statusvault.controller.loop import Controller, ControllerConfig
from statusvault.errors import ConfigError, StorageError
from statusvault.storage.local import LocalStore
from statusvault.vocabulary.kinds import CONFIGMAPS, CRDS, EVENTS, LEASES, NAMESPACES
from tests.builders import cr, crd, resource_type
from tests.fake import FakeKube

KC = resource_type("xyz.example.com", "KubernetesCluster")
HOME = "sv"  # the controller's namespace: intents, their status, Leases, Events
NS = "team-a"


@pytest.fixture(scope="module")
def backed_up(tmp_path_factory) -> LocalStore:
    """Backup `b`: a CRD and four KubernetesClusters with their status."""
    source = FakeKube()
    source.put(CRDS, crd("xyz.example.com", "KubernetesCluster"))
    for i in range(4):
        obj = cr("xyz.example.com/v1", "KubernetesCluster", f"kc-{i}", spec={"n": i}, status={"id": i})
        source.put(KC, {**obj, "metadata": {**obj["metadata"], "namespace": NS}})
        source.replace(KC, NS, f"kc-{i}", {**source.get(KC, NS, f"kc-{i}"), "status": {"id": i}}, sub="status")
    store = LocalStore(tmp_path_factory.mktemp("store"))
    BackupEngine(source, source.discovery(NAMESPACES), BackupRequest(store=store, name="b")).run()
    return store


@pytest.fixture
def target() -> FakeKube:
    kube = FakeKube()
    for ns in (HOME, NS):
        kube.put(NAMESPACES, {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}})
    return kube


@pytest.fixture
def leases(monkeypatch) -> list[Lease]:
    """Every Lease the controller takes (the real class, seen from the test)."""
    seen: list[Lease] = []

    class Seen(Lease):
        def __init__(self, *args, **kwargs):
            super().__init__(*args, **kwargs)
            seen.append(self)

    monkeypatch.setattr(loop, "Lease", Seen)
    return seen


def controller(target: FakeKube, store, tmp_path, lease_seconds: int = 60) -> Controller:
    config = ControllerConfig(namespace=HOME, holder="me", state_dir=tmp_path / "state", lease_seconds=lease_seconds)
    stores = store if callable(store) else (lambda name: store)
    return Controller(target, lambda refresh: target.discovery(NAMESPACES), stores, config)


def intent(target: FakeKube, name: str = "restore-b", **data: str) -> None:
    meta = {"name": name, "namespace": HOME, "labels": {INTENT_LABEL: "true"}}
    target.put(CONFIGMAPS, {"apiVersion": "v1", "kind": "ConfigMap", "metadata": meta, "data": {"backup": "b", **data}})


def status_of(target: FakeKube, name: str = "restore-b") -> dict[str, str]:
    return (target.get(CONFIGMAPS, HOME, name + "-status") or {}).get("data") or {}


def restored(target: FakeKube) -> dict[str, object]:
    return {m["name"]: (target.get(KC, NS, m["name"]) or {}).get("status") for m in target.list_metadata(KC, NS)}


def reasons(target: FakeKube) -> list[str]:
    return [e["reason"] for page in target.list_pages(EVENTS, HOME) for e in page]


def test_an_intent_is_restored_once_its_status_says_so_and_its_lease_is_released(target, backed_up, tmp_path):
    intent(target, parallel="1")
    ctl = controller(target, backed_up, tmp_path)
    assert ctl.reconcile_all() == 1
    assert restored(target) == {f"kc-{i}": {"id": i} for i in range(4)}
    status = status_of(target)
    assert status["phase"] == "Complete" and status["appliedDigest"] == digest_of({"backup": "b", "parallel": "1"})
    assert reasons(target) == ["RestoreStarted", "RestoreCompleted"]
    lease = target.get(LEASES, HOME, "statusvault-restore-restore-b")
    assert "holderIdentity" not in lease["spec"], "released: another replica need not wait for it to expire"
    assert ctl.reconcile_all() == 0, "already restored"


def held_by_other(target: FakeKube, name: str = "statusvault-restore-restore-b") -> None:
    """Another replica takes (or holds) the Lease, renewed just now."""
    now = rfc3339.format_micro(dt.datetime.now(dt.UTC))
    spec = {"holderIdentity": "other", "leaseDurationSeconds": 60, "acquireTime": now, "renewTime": now}
    live = target.get(LEASES, HOME, name)
    if live is None:
        body = {"apiVersion": "coordination.k8s.io/v1", "kind": "Lease", "metadata": {"name": name, "namespace": HOME}}
        target.put(LEASES, {**body, "spec": spec})
    else:
        target.replace(LEASES, HOME, name, {**live, "spec": spec}, manager="other")


def test_an_intent_whose_lease_another_replica_holds_is_left_to_it(target, backed_up, tmp_path):
    intent(target)
    held_by_other(target)
    assert controller(target, backed_up, tmp_path).reconcile_all() == 0
    assert restored(target) == {} and status_of(target) == {}, "nothing written: the holder reports"
    assert target.get(LEASES, HOME, "statusvault-restore-restore-b")["spec"]["holderIdentity"] == "other"


def test_a_lease_lost_mid_run_stops_the_restore_before_its_next_object(target, backed_up, tmp_path, leases):
    """The renewal (every third of the Lease's 1 s) finds another holder: the restore starts no new object and
    the run is recorded as failed, to be resumed by whoever holds the Lease."""

    def taken_over(name: str) -> None:
        if name == "kc-1":
            held_by_other(target)
            assert leases[-1].lost.wait(5), "the renewal noticed"

    intent(target, parallel="1")
    target.before("create", taken_over)
    assert controller(target, backed_up, tmp_path, lease_seconds=1).reconcile_all() == 1
    assert sorted(restored(target)) == ["kc-0", "kc-1"], "nothing started after the loss"
    status = status_of(target)
    assert status["phase"] == "Failed" and "Lease was lost" in status["message"], status
    assert target.get(LEASES, HOME, "statusvault-restore-restore-b")["spec"]["holderIdentity"] == "other"


def test_an_intent_edited_mid_run_is_restored_again_for_its_new_state(target, backed_up, tmp_path):
    """The run finishes what it started and records the digest it restored; the edit is a new desired state
    the next pass acts on."""

    def edited(name: str) -> None:
        if name == "kc-1":
            live = target.get(CONFIGMAPS, HOME, "restore-b")
            target.replace(CONFIGMAPS, HOME, "restore-b", {**live, "data": {**live["data"], "request": "again"}})

    intent(target, parallel="1")
    target.before("create", edited)
    ctl = controller(target, backed_up, tmp_path)
    assert ctl.reconcile_all() == 1
    first = status_of(target)
    assert first["appliedDigest"] == digest_of({"backup": "b", "parallel": "1"}), "the state it restored"
    target.before("create", None)
    assert ctl.reconcile_all() == 1, "the edit is acted on"
    assert status_of(target)["appliedDigest"] == digest_of({"backup": "b", "parallel": "1", "request": "again"})
    assert ctl.reconcile_all() == 0


class Unreachable(LocalStore):
    """The bucket is down."""

    def list(self, prefix: str):
        raise StorageError("cannot list s3://bucket/backups: connection refused (injected)")


def test_the_breaker_opens_after_three_run_wide_failures_and_holds_every_other_intent(target, tmp_path):
    for name in ("a", "b", "c", "d"):
        intent(target, name)
    ctl = controller(target, Unreachable(tmp_path / "down"), tmp_path)
    assert ctl.reconcile_all() == 3, "three attempts, then the breaker holds the fourth"
    assert [status_of(target, n).get("phase") for n in "abcd"] == ["Failed", "Failed", "Failed", None]
    assert "connection refused" in status_of(target, "a")["message"]
    assert not ctl.breaker.allows(loop.time.monotonic())


def test_intents_naming_missing_backups_are_not_an_outage(target, backed_up, tmp_path):
    """A backup that is not there is the intent's problem, retried on its own backoff: it does not open the
    breaker for the intents that are fine."""
    for name in ("a", "b", "c"):
        intent(target, name, backup=f"typo-{name}")
    intent(target, "d")
    assert controller(target, backed_up, tmp_path).reconcile_all() == 4
    assert [status_of(target, n)["phase"] for n in "abcd"] == ["Failed", "Failed", "Failed", "Complete"]
    assert "backup 'typo-a' not found" in status_of(target, "a")["message"]


def test_the_status_written_by_another_replica_mid_run_wins(target, backed_up, tmp_path):
    """The status ConfigMap is resourceVersion-guarded: a replica that changed it meanwhile is not overwritten."""

    def other_replica_writes(name: str) -> None:
        if name == "kc-1":
            live = target.get(CONFIGMAPS, HOME, "restore-b-status")
            target.replace(CONFIGMAPS, HOME, "restore-b-status", {**live, "data": {**live["data"], "holder": "other"}})

    intent(target, parallel="1")
    target.before("create", other_replica_writes)
    assert controller(target, backed_up, tmp_path).reconcile_all() == 1
    assert status_of(target)["holder"] == "other" and status_of(target)["phase"] == "InProgress"
    assert sorted(restored(target)) == [f"kc-{i}" for i in range(4)]


def test_stop_between_intents_starts_no_further_restore(target, backed_up, tmp_path):
    for name in ("a", "b"):
        intent(target, name)
    ctl = controller(target, backed_up, tmp_path)
    stopping = threading.Event()

    def sigterm(name: str) -> None:
        if not stopping.is_set():
            stopping.set()
            ctl.stop.set()

    target.before("create", sigterm)
    assert ctl.reconcile_all() == 1
    assert status_of(target, "b") == {}


@pytest.mark.parametrize("code", [403, 404])
def test_intents_are_reconciled_where_restores_may_not_be_listed(target, backed_up, tmp_path, monkeypatch, code):
    """A controller installed before the Restore CRD (404), or with its older Role (403), still restores intents."""
    from statusvault.controller.restores import BACKUPS, RESTORES
    from statusvault.errors import KubeApiError

    listed = target.list_pages

    def list_pages(rt, *args, **kwargs):
        if rt in (RESTORES, BACKUPS):
            raise KubeApiError.of(f"{rt.resource} answered {code}", code)
        return listed(rt, *args, **kwargs)

    monkeypatch.setattr(target, "list_pages", list_pages)
    intent(target, namespaces=NS)
    assert controller(target, backed_up, tmp_path).reconcile_all() == 1
    assert status_of(target)["phase"] == "Complete"


@pytest.mark.parametrize(
    ("config", "named", "says"),
    [
        ({"require_service_account": True}, "", "names no spec.serviceAccountName"),
        ({}, "statusvault-backup", "is the controller's own"),
        ({}, "statusvault-controller", "is the controller's own"),
        ({"default_service_account": "restorer"}, "", "cannot act as system:serviceaccount:sv:restorer"),
    ],
    ids=["required", "backup-account", "controller-account", "default"],
)
def test_whom_a_run_acts_as_is_decided_before_anything_is_read(target, tmp_path, config, named, says):
    """The in-memory server cannot impersonate: a run that must act as a ServiceAccount fails on it, which shows
    the default is taken; the real-server tests (test_restore_resource.py) show the rest."""
    cfg = ControllerConfig(namespace=HOME, holder="me", state_dir=tmp_path / "state", **config)
    ctl = Controller(target, lambda refresh: target.discovery(NAMESPACES), lambda name: None, cfg)
    with pytest.raises(ConfigError, match=says):
        ctl._acting_as(named)
