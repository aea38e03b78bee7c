"""Kill at every step of `statusvault move` (and of `move --abort`, and a fenced move): killed (kill -9) at each step,
the same command then ends exact (tests/integration/test_killsteps.py has the rest)."""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from statusvault.errors import ExitStatus
from statusvault.kube.client import KubeClient
from statusvault.kube.discovery import discover
from statusvault.kube.transport import load_transport
from statusvault.restore.quiet.scaledown import ANNOTATION
from statusvault.testing.cluster import ADMIN_TOKEN, kubeconfig_yaml
from statusvault.vocabulary.kinds import NAMESPACES
from tests.builders import unique
from tests.faultproxy import FaultProxy, self_signed
from tests.integration.crs.test_faults import assert_exact, snapshot
from tests.integration.test_fence import Cluster, an_operator_of
from tests.integration.test_fence import N as WIDGETS
from tests.integration.test_fence import saved as widget_status
from tests.integration.test_fence_move import widgets_in
from tests.integration.test_killsteps import (
    FENCE_STEPS,
    INSTANCES,
    QUALIFIED,
    Census,
    N,
    assert_nothing_partial_listed_as_complete,
    census,
    completed,
    env_of,
    post,
    seed_instances,
    settles,
)
from tests.killsteps import Request, Where, kill_at

pytestmark = pytest.mark.version_neutral("kill points are steps of statusvault's own, not of the server")


@pytest.fixture
def instances(kube, namespace):
    return seed_instances(kube, namespace)


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


IDENTITY = Request("GET", "/api/v1/namespaces/kube-system", side="target")  # the move's check of two clusters
BACKUP_STARTS = Request("GET", "/api/v1/namespaces/", after=IDENTITY)  # its check that the namespace exists

LAST_UNPAUSE = to_target("PATCH", INSTANCES, nth=N - 1)

MOVE_STEPS: dict[str, MoveStep] = {
    "mid-pause": MoveStep(Request("PATCH", INSTANCES, nth=5, lands=True), lambda s, t, c: 0 < s.marked < N - 1),
    "source-paused-before-backup": MoveStep(BACKUP_STARTS, lambda s, t, c: s.marked == N - 1 and c == []),
    "mid-backup": MoveStep(Request("GET", "/instances?", after=BACKUP_STARTS), lambda s, t, c: c == []),
    "backup-landed-before-restore": MoveStep(
        to_target("GET", after=IDENTITY), lambda s, t, c: t.created == 0 and len(c) == 1
    ),
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
        assert json.loads(again.out)["verifyProblems"] == [] and json.loads(again.out)["verdict"]["outcome"] == "done"
        moved = discover(target_kube).by_qualified(QUALIFIED)
        assert_exact(before, snapshot(target_kube, [moved], namespace))
        source = census(kube, instances, namespace)
        assert source == ((0, 0, 0) if row.delete_source else (N, N, N - 1)), "the source stays paused by the move"
        assert_nothing_partial_listed_as_complete(run)
        assert len(completed(run)) == 1, "the move's record"
    finally:
        target_kube.delete(NAMESPACES, None, namespace)


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
        assert json.loads(again.out)["verifyProblems"] == [] and json.loads(again.out)["verdict"]["outcome"] == "done"
        assert state() == (2, None), "the original count: never fenced twice (which would remember 0)"
        moved = discover(target_kube).by_qualified(f"widgets.{group}")
        for i in range(WIDGETS):
            assert target_kube.get(moved, namespace, f"w-{i:02d}")["status"] == widget_status(i)
    finally:
        target_world.cleanup()
        target_kube.delete(NAMESPACES, None, namespace)
