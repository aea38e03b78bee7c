"""Kill at every step: each command is killed (kill -9) at each step it goes through, then the same command runs
again: it must end exact (every object with its saved status, nothing left paused or marked that should not be),
and `list`/`describe` never show a partial backup as complete. A new step is one row (tests/killsteps.py)."""

from __future__ import annotations

import dataclasses
import datetime as dt
import itertools
import json
import signal
import time
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any, NamedTuple

import pytest

from statusvault.errors import ExitStatus
from statusvault.kinds import NAMESPACES
from statusvault.kube.client import KubeClient
from statusvault.kube.discovery import discover
from statusvault.kube.transport import load_transport
from statusvault.restore.pausemarkers import RECORD
from statusvault.restore.runner import open_backup
from statusvault.restore.scaledown import ANNOTATION
from statusvault.storage.local import LocalStore
from statusvault.testing.cluster import ADMIN_TOKEN, kubeconfig_yaml
from statusvault.testing.fixtures import create_with_status, install_crds
from statusvault.watch.chains import chains, read_head
from statusvault.watch.segments import parse_record_time
from tests.builders import cr, crd, unique
from tests.faultproxy import FaultProxy, self_signed
from tests.integration.crs.test_faults import assert_exact, snapshot
from tests.integration.test_fence import Cluster, an_operator_of, backed_up_widgets
from tests.integration.test_fence import N as WIDGETS
from tests.integration.test_fence import saved as widget_status
from tests.integration.test_fence_move import widgets_in
from tests.killsteps import Pause, Request, Where, kill_at, spawn

GROUP = "rds.aws.upbound.io"  # a Crossplane provider's group: --pause auto uses crossplane.io/paused
QUALIFIED = f"instances.{GROUP}"
PAUSED = "crossplane.io/paused"
N = 12


def saved(i: int) -> dict[str, Any]:
    return {"externalID": f"db-{i:04d}", "endpoint": f"db{i}.rds.example.net"}


@pytest.fixture
def instances(kube, namespace):
    """N managed resources with their saved status; db-00 paused by its owner (it must stay paused)."""
    install_crds(kube, [crd(GROUP, "Instance")])
    d = discover(kube)
    for i in range(N):
        body = cr(f"{GROUP}/v1", "Instance", f"db-{i:02d}", spec={"forProvider": {"size": i}}, status=saved(i))
        if i == 0:
            body["metadata"]["annotations"] = {PAUSED: "true"}
        create_with_status(kube, d, body, namespace)
    return d.by_qualified(QUALIFIED)


def env_of(run) -> dict[str, str]:
    return {"STATUSVAULT_STORAGE": str(run.storage), "STATUSVAULT_STATE_DIR": str(run.state)}


def assert_nothing_partial_listed_as_complete(run) -> None:
    """Every backup `list` calls Completed describes and verifies; every other one does not describe."""
    listed = run("list", "-o", "json")
    assert listed.code == ExitStatus.SUCCESS, listed.err
    for backup in json.loads(listed.out):
        described = run("describe", backup["name"]).code
        if backup["phase"] == "Completed":
            assert (described, run("verify", backup["name"]).code) == (0, 0), backup
        else:
            assert described != ExitStatus.SUCCESS, f"{backup['name']} is {backup['phase']} but describes"


def completed(run) -> list[str]:
    return [b["name"] for b in json.loads(run("list", "-o", "json").out) if b["phase"] == "Completed"]


class Census(NamedTuple):
    """What a killed run left in a namespace: objects, those with their saved status, those it still marks."""

    created: int
    with_status: int
    marked: int


def census(kube, rt, ns: str) -> Census:
    found = [o for page in kube.list_pages(rt, ns) for o in page]
    marked = sum(RECORD in (o["metadata"].get("annotations") or {}) for o in found)
    return Census(len(found), sum(bool(o.get("status")) for o in found), marked)


Step = tuple[Where, Callable[[Census], bool]]  # where to kill, and what the killed run must have left


def post(name: str, **kw: Any) -> Request:
    return Request("POST", body=f'"name":"{name}"'.encode(), **kw)


INSTANCES = f"/apis/{GROUP}/v1/namespaces/"

BACKUP_STEPS: dict[str, Where] = {  # (after its archive landed, before its manifest: the writer lease's tests)
    "archive-opened": Request("GET", "?limit="),  # its first LIST (the CRDs): the archive is open, empty
    "mid-list": Request("GET", "&continue=", nth=2),  # pages of 5: the CRD and some instances archived
    "mid-write": Pause("backup.type-archived"),  # the CRD archived, the instances not yet
}


def essentials(objects: Iterable[dict[str, Any]]) -> dict[str, Any]:
    """Per Instance, what a restore gives back: spec, status, annotations."""
    return {
        o["metadata"]["name"]: (o.get("spec"), o.get("status"), o["metadata"].get("annotations"))
        for o in objects
        if o["kind"] == "Instance"
    }


def archived(run, name: str) -> dict[str, Any]:
    with open_backup(LocalStore(run.storage), name) as reader:
        return essentials(json.loads(data) for _, data in reader.objects())


@pytest.mark.parametrize("step", list(BACKUP_STEPS))
def test_backup_killed_at_each_step_then_the_same_command_ends_exact(
    run, kube, namespace, instances, proxied, tmp_path, step
):
    live = essentials(o for page in kube.list_pages(instances, namespace) for o in page)
    proxy, kubeconfig = proxied(0.0)
    args = ["--kubeconfig", str(kubeconfig), "backup", "b", "-n", namespace, "--page-size", "5"]
    args += ["--include-resources", instances.qualified]  # this test's type (and its CRD), whatever else is served

    kill_at(BACKUP_STEPS[step], args, env_of(run), {"source": proxy}, tmp_path)
    assert list(run.storage.glob("backups/b/.archive.tar.gz.*.partial")), "killed while writing its archive"
    assert completed(run) == []
    assert_nothing_partial_listed_as_complete(run)

    again = run(*args[2:], "-o", "json", kubeconfig=kubeconfig)

    assert again.code == ExitStatus.SUCCESS, again.out + again.err
    assert json.loads(again.out)["totals"]["objects"] == N + 1, "the instances and their CRD"
    assert completed(run) == ["b"]
    assert_nothing_partial_listed_as_complete(run)
    assert archived(run, "b") == live


RESTORE_STEPS: dict[str, Step] = {
    "journal-opened": (Request("POST"), lambda c: c.created == 0),  # the target namespace's create
    "namespace-created-not-journaled": (Request("POST", lands=True), lambda c: c.created == 0),
    "mid-wave": (post("db-06"), lambda c: 0 < c.created < N),
    # --stream: writes as the archive is read, in pages of what --parallel 2 holds in flight (8 objects)
    "streamed-journal-opened": (Request("POST"), lambda c: c.created == 0),
    # the walk stops at the page's end while the writers still hold it: how much of it landed before the kill is
    # the machine's timing (streamed-mid-wave is the step that kills with part of the objects surely written)
    "streamed-page-boundary": (Pause("restore.stream-page"), lambda c: c.created < N),
    "streamed-mid-page": (Pause("restore.stream-mid-page"), lambda c: c.created < N),
    "streamed-mid-wave": (post("db-06"), lambda c: 0 < c.created < N),
    "streamed-status-written-not-journaled": (
        Request("PUT", "/status", nth=4, lands=True),
        lambda c: c.with_status >= 3 and c.marked == c.created - 1,
    ),
    "streamed-before-unpause": (Request("PATCH", INSTANCES), lambda c: c == (N, N, N - 1)),
    # --stream -n: the CRD that comes along is held until the selection's first match, then handed on
    "streamed-selection-held": (Pause("restore.stream-held"), lambda c: c.created == 0),
    "streamed-selection-mid-wave": (post("db-06"), lambda c: 0 < c.created < N),
    "between-create-and-status": (Request("PUT", "/status"), lambda c: c.created > c.with_status),
    "status-written-not-journaled": (
        Request("PUT", "/status", nth=4, lands=True),
        lambda c: c.with_status >= 3 and c.marked == c.created - 1,  # the 4th lands as the run dies
    ),
    "before-unpause": (Request("PATCH", INSTANCES), lambda c: c == (N, N, N - 1)),  # db-00 was paused by its owner
    "mid-unpause": (Request("PATCH", INSTANCES, nth=5, lands=True), lambda c: c[:2] == (N, N) and c.marked < N - 1),
}


@pytest.mark.parametrize("step", list(RESTORE_STEPS))
def test_restore_killed_at_each_step_then_the_same_command_ends_exact(
    run, kube, namespace, instances, proxied, tmp_path, step
):
    before = snapshot(kube, [instances], namespace)
    assert run("backup", "b", "-n", namespace).code == 0
    target = unique("dst")
    proxy, kubeconfig = proxied(0.0)
    args = ["--kubeconfig", str(kubeconfig), "restore", "b", "--namespace-mapping", f"{namespace}:{target}"]
    args += ["--pause", "auto", "--parallel", "2", *(["--stream"] if step.startswith("streamed-") else [])]
    args += ["-n", namespace] if step.startswith("streamed-selection-") else []
    try:
        where, left = RESTORE_STEPS[step]
        kill_at(where, args, env_of(run), {"source": proxy}, tmp_path)
        assert left(census(kube, instances, target)), census(kube, instances, target)
        assert list((run.state / "restores").glob("*.journal.sqlite")), "the killed run's journal is there"

        again = run(*args[2:], "-o", "json", kubeconfig=kubeconfig)

        assert again.code == ExitStatus.SUCCESS, again.out + again.err
        report = json.loads(again.out)
        assert report["leftPaused"] == 0
        assert_exact(before, snapshot(kube, [instances], target))
        assert census(kube, instances, target).marked == 0
    finally:
        kube.delete(NAMESPACES, None, target)


ORDER_STEPS: dict[str, tuple[Pause, str]] = {  # where, and what the re-run's report says of the gate
    "waiting-on-a-gate": (Pause("restore.gate-waiting"), "passed"),  # the group restored, its gate not passed
    "between-groups": (Pause("restore.gate-passed"), "passed-earlier"),  # the gate journalled as passed
}


@pytest.mark.parametrize("step", list(ORDER_STEPS))
def test_restore_with_order_killed_at_each_gate_step_then_the_same_command_ends_exact(
    run, cluster, kube, namespace, instances, tmp_path, step
):
    """--order with --pause auto: the group is unpaused before its gate; a re-run waits again only on a gate the
    journal has not seen passed."""
    before = snapshot(kube, [instances], namespace)
    assert run("backup", "b", "-n", namespace).code == 0
    target = unique("dst")
    order = tmp_path / "order.yaml"
    order.write_text(
        f"version: v1\ngroups:\n  - name: instances\n    resources: [{QUALIFIED}]\n"
        "    gate: {expression: .status.externalID, timeout: 30s}\n"
    )
    args = ["--kubeconfig", str(cluster.kubeconfig), "restore", "b"]
    args += ["--namespace-mapping", f"{namespace}:{target}", "--pause", "auto", "--order", str(order)]
    try:
        where, outcome = ORDER_STEPS[step]
        kill_at(where, args, env_of(run), {}, tmp_path)
        assert census(kube, instances, target).created == N, "the group was restored before its gate"

        again = run(*args[2:], "-o", "json")

        assert again.code == ExitStatus.SUCCESS, again.out + again.err
        report = json.loads(again.out)
        assert [(g["group"], g["outcome"]) for g in report["gates"]] == [("instances", outcome)]
        assert report["leftPaused"] == 0
        assert_exact(before, snapshot(kube, [instances], target))
        assert census(kube, instances, target).marked == 0
    finally:
        kube.delete(NAMESPACES, None, target)


KEPT_STEPS: dict[str, tuple[str, Where]] = {  # (the command killed, where)
    "restore-mid-wave": ("restore", post("db-06")),
    "restore-as-its-last-status-lands": ("restore", Request("PUT", "/status", nth=N, lands=True)),
    "unpause-before-its-first-patch": ("unpause", Request("PATCH", INSTANCES)),
    "unpause-mid-way": ("unpause", Request("PATCH", INSTANCES, nth=5, lands=True)),
}


@pytest.mark.parametrize("step", list(KEPT_STEPS))
def test_keep_paused_then_unpause_killed_at_each_step(run, kube, namespace, instances, proxied, tmp_path, step):
    """--keep-paused leaves the objects paused as asked; `unpause` with the same options releases them."""
    before = snapshot(kube, [instances], namespace)
    assert run("backup", "b", "-n", namespace).code == 0
    target = unique("dst")
    proxy, kubeconfig = proxied(0.0)
    options = ["b", "--namespace-mapping", f"{namespace}:{target}", "--pause", "auto", "--parallel", "2"]
    restore = ["restore", *options, "--keep-paused", QUALIFIED]
    command, where = KEPT_STEPS[step]
    try:
        if command == "unpause":
            assert run(*restore, kubeconfig=kubeconfig).code == ExitStatus.SUCCESS
        killed = restore if command == "restore" else ["unpause", *options]
        kill_at(where, ["--kubeconfig", str(kubeconfig), *killed], env_of(run), {"source": proxy}, tmp_path)
        if command == "restore":
            kept = run(*restore, kubeconfig=kubeconfig)
            assert kept.code == ExitStatus.SUCCESS, kept.out + kept.err
            assert f"{N - 1} object(s) stay paused as asked" in kept.out
            assert census(kube, instances, target) == (N, N, N - 1)

        released = run("unpause", *options, kubeconfig=kubeconfig)

        assert released.code == ExitStatus.SUCCESS, released.out + released.err
        assert_exact(before, snapshot(kube, [instances], target))
        assert census(kube, instances, target).marked == 0
        assert not list((run.state / "restores").glob("*.journal.sqlite")), "the restore is finished"
    finally:
        kube.delete(NAMESPACES, None, target)


@pytest.fixture
def target_proxied(target, tmp_path):
    """(a proxy in front of the target, a kubeconfig through it, a client straight to it)."""
    proxy = FaultProxy(target.server, 0.0, certs=self_signed(tmp_path)).start()
    path = tmp_path / "kubeconfig-target"
    path.write_text(kubeconfig_yaml(proxy.url, "admin", ADMIN_TOKEN))
    yield proxy, path, KubeClient(load_transport(str(target.kubeconfig)))
    proxy.stop()


@dataclasses.dataclass(frozen=True)
class MoveStep:
    where: Where
    left: Callable[[Census, Census, list[str]], bool]  # (source, target, backups listed Completed) after the kill
    delete_source: bool = False


def to_target(method: str, path: str = "", **kw: Any) -> Request:
    return Request(method, path, side="target", **kw)


BACKUP_STARTS = Request("GET", "/api/v1/namespaces/")  # its check that the namespace exists
LAST_UNPAUSE = to_target("PATCH", INSTANCES, nth=N - 1)
MOVE_STEPS: dict[str, MoveStep] = {
    "mid-pause": MoveStep(Request("PATCH", INSTANCES, nth=5, lands=True), lambda s, t, c: 0 < s.marked < N - 1),
    "source-paused-before-backup": MoveStep(BACKUP_STARTS, lambda s, t, c: s.marked == N - 1 and c == []),
    "mid-backup": MoveStep(Request("GET", "/instances?", after=BACKUP_STARTS), lambda s, t, c: c == []),
    "backup-landed-before-restore": MoveStep(to_target("GET"), lambda s, t, c: t.created == 0 and len(c) == 1),
    "mid-restore": MoveStep(post("db-06", side="target"), lambda s, t, c: 0 < t.created < N),
    "between-create-and-status": MoveStep(to_target("PUT", "/status"), lambda s, t, c: t.created > t.with_status),
    "before-target-unpause": MoveStep(to_target("PATCH", INSTANCES), lambda s, t, c: t == (N, N, N - 1)),
    "mid-target-unpause": MoveStep(
        to_target("PATCH", INSTANCES, nth=5, lands=True), lambda s, t, c: t[:2] == (N, N) and t.marked < N - 1
    ),
    "before-verify": MoveStep(to_target("GET", "/api", after=LAST_UNPAUSE), lambda s, t, c: t == (N, N, 0)),
    "before-delete-source": MoveStep(
        Request("DELETE", INSTANCES), lambda s, t, c: s.created == N and t == (N, N, 0), delete_source=True
    ),
    "mid-delete-source": MoveStep(
        Request("DELETE", INSTANCES, nth=5, lands=True), lambda s, t, c: 0 < s.created < N, delete_source=True
    ),
}


def move_args(kubeconfig: Path, tkubeconfig: Path, namespace: str) -> list[str]:
    """`statusvault move` of the namespace, each side through its proxy (a test drops the first two for `run`)."""
    args = ["--kubeconfig", str(kubeconfig), "move", "--from-kubeconfig", str(kubeconfig), "--to-kubeconfig"]
    return [*args, str(tkubeconfig), "-n", namespace, "--parallel", "2"]


@pytest.mark.parametrize("step", list(MOVE_STEPS))
def test_move_killed_at_each_step_then_the_same_command_ends_exact(
    run, kube, namespace, instances, proxied, target_proxied, tmp_path, step
):
    before = snapshot(kube, [instances], namespace)
    proxy, kubeconfig = proxied(0.0)
    tproxy, tkubeconfig, target_kube = target_proxied
    row = MOVE_STEPS[step]
    args = move_args(kubeconfig, tkubeconfig, namespace)
    args += ["--delete-source", "--yes"] if row.delete_source else []
    try:
        kill_at(row.where, args, env_of(run), {"source": proxy, "target": tproxy}, tmp_path)
        moved = discover(target_kube).by_qualified(QUALIFIED)
        left = (census(kube, instances, namespace), census(target_kube, moved, namespace) if moved else Census(0, 0, 0))
        assert row.left(*left, completed(run)), left
        assert_nothing_partial_listed_as_complete(run)

        again = run(*args[2:], "-o", "json", kubeconfig=kubeconfig)

        assert again.code == ExitStatus.SUCCESS, again.out + again.err
        assert json.loads(again.out)["verifyProblems"] == []
        moved = discover(target_kube).by_qualified(QUALIFIED)
        assert_exact(before, snapshot(target_kube, [moved], namespace))
        source = census(kube, instances, namespace)
        assert source == ((0, 0, 0) if row.delete_source else (N, N, N - 1)), "the source stays paused by the move"
        assert_nothing_partial_listed_as_complete(run)
        assert len(completed(run)) == 1, "the move's record"
    finally:
        target_kube.delete(NAMESPACES, None, namespace)


@dataclasses.dataclass(frozen=True)
class WatchStep:
    where: Pause
    says: str  # what the next writer says it does
    changes_after_head: bool = False  # changes only once a head is stored (else from the start)
    args: tuple[str, ...] = ()


NEW_BASE, CONTINUES = "starting a new base", "continuing chain"
WATCH_STEPS: dict[str, WatchStep] = {
    "mid-base": WatchStep(Pause("backup.type-archived"), NEW_BASE),  # the CRD archived, the instances not yet
    "base-landed-before-its-chain": WatchStep(Pause("watch.base-landed"), NEW_BASE),
    "segment-stored-before-its-manifest": WatchStep(Pause("watch.segment-stored"), CONTINUES, True),
    "segment-recorded-before-the-head-moved": WatchStep(Pause("watch.segment-recorded"), CONTINUES, True),
    "next-chain-opened-before-the-head-moved": WatchStep(
        Pause("watch.next-chain-opened"), CONTINUES, True, ("--base-interval", "6s")
    ),
}


def watch_args(cluster, ns: str) -> list[str]:
    """`watch run w1` of the instances in ns; a killed writer's Lease expires after 3 s."""
    return ["--kubeconfig", str(cluster.kubeconfig), "watch", "run", "w1", "-n", ns, "--include-resources", QUALIFIED,
            "--lease-namespace", ns, "--lease-seconds", "3", "--flush-interval", "0.5"]  # fmt: skip


class Changes:
    """Status changes to db-03, one per call, as its operator would make them."""

    def __init__(self, kube, rt, ns: str):
        self.kube, self.rt, self.ns, self.n = kube, rt, ns, itertools.count(1)

    def __call__(self) -> None:
        live = self.kube.get(self.rt, self.ns, "db-03")
        live["status"] = {**saved(3), "generation": next(self.n)}
        self.kube.replace(self.rt, self.ns, "db-03", live, sub="status")


def flushed_past(run, moment: dt.datetime, proc, timeout: float = 60) -> None:
    """Wait until the watcher's record reaches past `moment` (its head says so)."""
    deadline = time.monotonic() + timeout
    while not ((head := read_head(LocalStore(run.storage), "w1")) and parse_record_time(head["until"]) > moment):
        if proc.poll() is not None or time.monotonic() > deadline:
            proc.kill()
            raise AssertionError(f"not flushed past {moment}: {proc.communicate()[1].decode()[-3000:]}")
        time.sleep(0.2)


def assert_chains_verify(run) -> None:
    """Every chain `list --timeline` shows walks whole (`verify`)."""
    timeline = json.loads(run("list", "--timeline", "-o", "json").out)
    if any(w["chains"] for w in timeline):
        verified = run("verify", "w1")
        assert verified.code == ExitStatus.SUCCESS, verified.out + verified.err


@pytest.mark.parametrize("step", list(WATCH_STEPS))
def test_watch_killed_at_each_step_then_the_same_command_loses_nothing(
    run, kube, cluster, namespace, instances, tmp_path, step
):
    row = WATCH_STEPS[step]
    args = [*watch_args(cluster, namespace), *row.args]
    change = Changes(kube, instances, namespace)

    def meanwhile() -> None:
        if not row.changes_after_head or read_head(LocalStore(run.storage), "w1") is not None:
            change()

    kill_at(row.where, args, env_of(run), {}, tmp_path, meanwhile=meanwhile)
    assert_nothing_partial_listed_as_complete(run)
    assert_chains_verify(run)

    again = spawn(args, env_of(run))
    try:
        change()
        flushed_past(run, dt.datetime.now(dt.UTC), again)
    finally:
        again.send_signal(signal.SIGTERM)
        _, err = again.communicate(timeout=60)
    assert again.returncode == 0, err.decode()[-3000:]
    assert row.says in err.decode(), err.decode()[-3000:]

    target = unique("at")
    try:
        restored = run("restore", "w1", "--at", "latest", "--namespace-mapping", f"{namespace}:{target}")
        assert restored.code == ExitStatus.SUCCESS, restored.out + restored.err
        assert_exact(snapshot(kube, [instances], namespace), snapshot(kube, [instances], target))
        assert_nothing_partial_listed_as_complete(run)
        assert_chains_verify(run)
    finally:
        kube.delete(NAMESPACES, None, target)


AT_STEPS: dict[str, Where] = {
    "mid-wave": post("db-06"),
    "between-create-and-status": Request("PUT", "/status"),
    "before-it-ends": Request("PUT", "/status", nth=N, lands=True),
}


@pytest.mark.parametrize("step", list(AT_STEPS))
def test_restore_at_a_moment_killed_at_each_step_then_the_same_command_ends_exact(
    run, kube, cluster, namespace, instances, proxied, tmp_path, step
):
    """A point-in-time restore writes a temporary backup each run: the re-run must find the killed run's journal."""
    watcher = spawn(watch_args(cluster, namespace), env_of(run))
    try:
        Changes(kube, instances, namespace)()
        flushed_past(run, dt.datetime.now(dt.UTC), watcher)
    finally:
        watcher.send_signal(signal.SIGTERM)
        watcher.communicate(timeout=60)
    before = snapshot(kube, [instances], namespace)
    target = unique("at")
    proxy, kubeconfig = proxied(0.0)
    args = ["--kubeconfig", str(kubeconfig), "restore", "w1", "--at", "latest", "--namespace-mapping"]
    args += [f"{namespace}:{target}", "--parallel", "2"]
    try:
        kill_at(AT_STEPS[step], args, env_of(run), {"source": proxy}, tmp_path)

        again = run(*args[2:], "-o", "json", kubeconfig=kubeconfig)

        assert again.code == ExitStatus.SUCCESS, again.out + again.err
        assert json.loads(again.out)["resumed"] > 0, "the killed run's journal was found"
        assert_exact(before, snapshot(kube, [instances], target))
    finally:
        kube.delete(NAMESPACES, None, target)


ABORT_STEPS: dict[str, Request] = {
    "mid-target-delete": to_target("DELETE", INSTANCES, nth=3, lands=True),
    "record-dropped-before-source-unpause": Request("PATCH", INSTANCES),
    "mid-source-unpause": Request("PATCH", INSTANCES, nth=5, lands=True),
}


@pytest.mark.parametrize("step", list(ABORT_STEPS))
def test_move_abort_killed_at_each_step_then_the_same_command_gives_the_source_back(
    run, kube, namespace, instances, proxied, target_proxied, tmp_path, step
):
    before = snapshot(kube, [instances], namespace)
    proxy, kubeconfig = proxied(0.0)
    tproxy, tkubeconfig, target_kube = target_proxied
    proxies = {"source": proxy, "target": tproxy}
    args = move_args(kubeconfig, tkubeconfig, namespace)
    try:
        kill_at(MOVE_STEPS["mid-restore"].where, args, env_of(run), proxies, tmp_path)
        kill_at(ABORT_STEPS[step], [*args, "--abort"], env_of(run), proxies, tmp_path)
        assert_nothing_partial_listed_as_complete(run)

        again = run(*args[2:], "--abort", kubeconfig=kubeconfig)

        assert again.code == ExitStatus.SUCCESS, again.out + again.err
        assert_exact(before, snapshot(kube, [instances], namespace))
        moved = discover(target_kube).by_qualified(QUALIFIED)
        assert census(target_kube, moved, namespace).created == 0, "every copy the move made is gone"
        assert completed(run) == [], "the move's record is dropped"
    finally:
        target_kube.delete(NAMESPACES, None, namespace)


def test_prune_removes_a_base_whose_chain_a_killed_writer_never_recorded(
    run, kube, cluster, namespace, instances, tmp_path
):
    args = watch_args(cluster, namespace)
    kill_at(WATCH_STEPS["base-landed-before-its-chain"].where, args, env_of(run), {}, tmp_path)
    (orphan,) = completed(run)
    again = spawn(args, env_of(run))
    try:
        flushed_past(run, dt.datetime.now(dt.UTC), again)
    finally:
        again.send_signal(signal.SIGTERM)
        again.communicate(timeout=60)
    (chain,) = chains(LocalStore(run.storage), "w1")
    assert sorted(completed(run)) == sorted([orphan, chain.base])

    kept = run("prune", "--watch", "w1", "--keep-last", "1", "--dry-run", "-o", "json")
    assert {d["name"]: d["delete"] for d in json.loads(kept.out)["decisions"]} == {chain.base: False, orphan: False}
    pruned = run("prune", "--watch", "w1", "--keep-last", "1", "--incomplete-grace", "0s")

    assert pruned.code == ExitStatus.SUCCESS, pruned.out + pruned.err
    assert completed(run) == [chain.base], "the base no chain names is gone; the chain's base stays"
    assert_chains_verify(run)


def test_restore_at_latest_killed_while_the_watch_goes_on_then_the_same_command_ends_exact(
    run, kube, cluster, namespace, instances, proxied, tmp_path
):
    """`--at latest` names a later moment on the re-run when the watcher flushed meanwhile: what the killed run
    created is still this restore's own, and gets the latest status."""
    change = Changes(kube, instances, namespace)
    watcher = spawn(watch_args(cluster, namespace), env_of(run))
    target = unique("at")
    proxy, kubeconfig = proxied(0.0)
    args = ["--kubeconfig", str(kubeconfig), "restore", "w1", "--at", "latest", "--namespace-mapping"]
    args += [f"{namespace}:{target}", "--parallel", "2", "--pause", "auto"]
    try:
        flushed_past(run, dt.datetime.now(dt.UTC), watcher)
        kill_at(AT_STEPS["between-create-and-status"], args, env_of(run), {"source": proxy}, tmp_path)
        change()
        flushed_past(run, dt.datetime.now(dt.UTC), watcher)

        again = run(*args[2:], "-o", "json", kubeconfig=kubeconfig)

        assert again.code == ExitStatus.SUCCESS, again.out + again.err
        assert_exact(snapshot(kube, [instances], namespace), snapshot(kube, [instances], target))
        assert census(kube, instances, target).marked == 0
    finally:
        watcher.send_signal(signal.SIGTERM)
        watcher.communicate(timeout=60)
        kube.delete(NAMESPACES, None, target)


def test_a_move_killed_then_aborted_leaves_no_copy_of_its_own_and_the_next_move_completes(
    run, kube, namespace, instances, proxied, target_proxied, tmp_path
):
    """db-00, paused by its owner, carries no pause record of the move: the abort knows its copy by the move's
    field manager (else it stayed without its status and no later move could complete)."""
    before = snapshot(kube, [instances], namespace)
    proxy, kubeconfig = proxied(0.0)
    tproxy, tkubeconfig, target_kube = target_proxied
    args = move_args(kubeconfig, tkubeconfig, namespace)
    try:
        kill_at(to_target("PUT", "/db-00/status"), args, env_of(run), {"source": proxy, "target": tproxy}, tmp_path)
        aborted = run(*args[2:], "--abort", kubeconfig=kubeconfig)
        assert aborted.code == ExitStatus.SUCCESS, aborted.out + aborted.err
        moved = discover(target_kube).by_qualified(QUALIFIED)
        assert census(target_kube, moved, namespace).created == 0, "every copy the move made is gone"
        assert_exact(before, snapshot(kube, [instances], namespace))

        again = run(*args[2:], "-o", "json", kubeconfig=kubeconfig)

        assert again.code == ExitStatus.SUCCESS, again.out[-2000:] + again.err
        assert_exact(before, snapshot(target_kube, [moved], namespace))
    finally:
        target_kube.delete(NAMESPACES, None, namespace)


FENCE_STEPS: dict[str, tuple[Where, tuple[int, str | None]]] = {  # where to kill, the (replicas, annotation) left
    "fence-planned": (Pause("restore.fence-planned"), (2, None)),
    "count-kept-not-scaled": (Request("PATCH", "/deployments/", body=ANNOTATION.encode(), lands=True), (2, "2")),
    "scaled-down": (Request("PATCH", "/scale", lands=True), (0, "2")),
    "mid-restore": (Request("POST", body=b'"name":"w-06"'), (0, "2")),
    "scaled-back-count-kept": (Request("PATCH", "/scale", nth=2, lands=True), (2, "2")),
}


@pytest.fixture
def world(kube) -> Iterable[Cluster]:
    """RBAC objects and workloads (tests/integration/test_fence.py), deleted afterwards."""
    c = Cluster(kube)
    yield c
    c.cleanup()


@pytest.mark.parametrize("step", list(FENCE_STEPS))
def test_a_restore_killed_at_each_step_of_fencing_then_run_again_ends_with_the_original_replicas(
    run, kube, namespace, world, proxied, tmp_path, step
):
    """--fence auto finds the operator by its ClusterRole and scales it to 0 and back."""
    group = f"{unique('kill')}.example.com"
    widgets = backed_up_widgets(run, kube, group, namespace)
    ops, name = an_operator_of(world, group, replicas=2).split("/")
    proxy, kubeconfig = proxied(0.0)
    args = ["--kubeconfig", str(kubeconfig), "restore", "b", "--fence", "auto", "--parallel", "2"]
    where, left = FENCE_STEPS[step]

    kill_at(where, args, env_of(run), {"source": proxy}, tmp_path)

    def state() -> tuple[int, str | None]:
        live = world.get(ops, "Deployment", name)
        return live["spec"]["replicas"], (live["metadata"].get("annotations") or {}).get(ANNOTATION)

    assert settles(state, left)

    again = run(*args[2:], "-o", "json", kubeconfig=kubeconfig)

    assert again.code == ExitStatus.SUCCESS, again.out + again.err
    live = world.get(ops, "Deployment", name)
    assert live["spec"]["replicas"] == 2, "the original count: never fenced twice (which would remember 0)"
    assert ANNOTATION not in (live["metadata"].get("annotations") or {})
    for i in range(WIDGETS):
        assert kube.get(widgets, namespace, f"w-{i:02d}")["status"] == widget_status(i)


def settles(state: Callable[[], Any], expected: Any, seconds: float = 5.0) -> bool:
    """Whether state() comes to `expected` within `seconds`: a request that landed goes on through the proxy after
    the kill, so the operator's fencing may still be moving."""
    deadline = time.monotonic() + seconds
    while state() != expected and time.monotonic() < deadline:
        time.sleep(0.1)
    return bool(state() == expected)


def on_target(where: Where) -> Where:
    return dataclasses.replace(where, side="target") if isinstance(where, Request) else where


@pytest.mark.parametrize("step", list(FENCE_STEPS))
def test_a_fenced_move_killed_at_each_step_of_fencing_then_run_again_ends_with_the_original_replicas(
    run, kube, namespace, proxied, target_proxied, tmp_path, step
):
    """move --fence auto fences the target's operator (found by its ClusterRole there) for the move's restore."""
    group = f"{unique('mvkill')}.example.com"
    tproxy, tkubeconfig, target_kube = target_proxied
    widgets_in(kube, group, namespace)
    target_world = Cluster(target_kube)
    ops, name = an_operator_of(target_world, group, replicas=2).split("/")
    proxy, kubeconfig = proxied(0.0)
    args = [*move_args(kubeconfig, tkubeconfig, namespace), "--fence", "auto"]
    where, left = FENCE_STEPS[step]

    def state() -> tuple[int, str | None]:
        live = target_world.get(ops, "Deployment", name)
        return live["spec"]["replicas"], (live["metadata"].get("annotations") or {}).get(ANNOTATION)

    try:
        kill_at(on_target(where), args, env_of(run), {"source": proxy, "target": tproxy}, tmp_path)
        assert settles(state, left)

        again = run(*args[2:], "-o", "json", kubeconfig=kubeconfig)

        assert again.code == ExitStatus.SUCCESS, again.out + again.err
        assert json.loads(again.out)["verifyProblems"] == []
        assert state() == (2, None), "the original count: never fenced twice (which would remember 0)"
        moved = discover(target_kube).by_qualified(f"widgets.{group}")
        for i in range(WIDGETS):
            assert target_kube.get(moved, namespace, f"w-{i:02d}")["status"] == widget_status(i)
    finally:
        target_world.cleanup()
        target_kube.delete(NAMESPACES, None, namespace)
