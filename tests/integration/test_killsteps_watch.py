"""Kill at every step of `statusvault watch` and of `restore --at`: killed (kill -9) at each step, the same command then
loses nothing and ends exact (tests/integration/test_killsteps.py has the rest)."""

from __future__ import annotations

import dataclasses
import datetime as dt
import itertools
import json
import signal
import time

import orjson
import pytest

from statusvault.errors import ExitStatus
from statusvault.restore.runner import open_backup
from statusvault.storage.local import LocalStore
from statusvault.vocabulary.kinds import NAMESPACES
from statusvault.watch.chains import chains, read_head
from statusvault.watch.pointintime import point_in_time
from statusvault.watch.segments import parse_record_time
from tests.builders import unique
from tests.integration.crs.test_faults import assert_exact, snapshot
from tests.integration.test_killsteps import (
    QUALIFIED,
    N,
    assert_nothing_partial_listed_as_complete,
    census,
    completed,
    env_of,
    post,
    saved,
    seed_instances,
)
from tests.killsteps import Pause, Request, Where, kill_at, spawn

pytestmark = pytest.mark.version_neutral(
    "kill points are steps of statusvault's own; WATCH per version is test_watch's"
)


@pytest.fixture
def instances(kube, namespace):
    return seed_instances(kube, namespace)


NEW_BASE, CONTINUES = "starting a new base", "continuing chain"


@dataclasses.dataclass(frozen=True)
class WatchStep:
    where: Pause
    says: str  # what the next writer says it does
    changes_after_head: bool = False  # changes only once a head is stored (else from the start)
    args: tuple[str, ...] = ()


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
    """Status changes to db-03, one per call, as its operator would make them; `last` is the latest status."""

    def __init__(self, kube, rt, ns: str):
        self.kube, self.rt, self.ns, self.n = kube, rt, ns, itertools.count(1)
        self.last = saved(3)

    def __call__(self) -> None:
        live = self.kube.get(self.rt, self.ns, "db-03")
        live["status"] = self.last = {**saved(3), "generation": next(self.n)}
        self.kube.replace(self.rt, self.ns, "db-03", live, sub="status")


def flushed_past(run, moment: dt.datetime, proc, timeout: float = 60, holds: Changes | None = None) -> None:
    """Wait until the watcher's record reaches past `moment` (its head says so) and, given `holds`, its latest
    state has db-03's latest status: a change is recorded when the watch delivers it, which a loaded server may
    do after a flush stamped later than the change (docs/continuous.md)."""
    deadline = time.monotonic() + timeout
    while not (
        (head := read_head(LocalStore(run.storage), "w1"))
        and parse_record_time(head["until"]) > moment
        and (holds is None or latest_status(run, "db-03") == holds.last)
    ):
        if proc.poll() is not None or time.monotonic() > deadline:
            proc.kill()
            raise AssertionError(f"not flushed past {moment}: {proc.communicate()[1].decode()[-3000:]}")
        time.sleep(0.2)


def latest_status(run, name: str) -> object:
    """The status of `name` in the watch's latest state, as `restore --at latest` would restore it."""
    with (
        point_in_time(LocalStore(run.storage), "w1", None, None) as (store, backup, _),
        open_backup(store, backup) as reader,
    ):
        found = [orjson.loads(data) for path, data in reader.objects() if path.endswith(f"/{name}.json")]
    return found[0].get("status") if len(found) == 1 else found


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
        flushed_past(run, dt.datetime.now(dt.UTC), again, holds=change)
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
        change = Changes(kube, instances, namespace)
        change()
        flushed_past(run, dt.datetime.now(dt.UTC), watcher, holds=change)
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
        flushed_past(run, dt.datetime.now(dt.UTC), watcher, holds=change)
        kill_at(AT_STEPS["between-create-and-status"], args, env_of(run), {"source": proxy}, tmp_path)
        change()
        flushed_past(run, dt.datetime.now(dt.UTC), watcher, holds=change)

        again = run(*args[2:], "-o", "json", kubeconfig=kubeconfig)

        assert again.code == ExitStatus.SUCCESS, again.out + again.err
        assert_exact(snapshot(kube, [instances], namespace), snapshot(kube, [instances], target))
        assert census(kube, instances, target).marked == 0
    finally:
        watcher.send_signal(signal.SIGTERM)
        watcher.communicate(timeout=60)
        kube.delete(NAMESPACES, None, target)
