"""Restore across worker processes on the real API server: exact through faults, a worker killed mid-wave is
replaced (its objects resent and recognised by the restore's field manager), a killed parent leaves no
worker behind and the plain re-run ends exact, and the per-object report is complete."""

from __future__ import annotations

import json
import multiprocessing
import os
import signal
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from statusvault.errors import ExitStatus
from statusvault.vocabulary.kinds import CRD_QUALIFIED, NAMESPACES
from tests.builders import unique
from tests.integration.crs.test_faults import FAULT_RESOURCES, assert_exact, populate, snapshot

pytestmark = pytest.mark.version_neutral("worker processes are the client's; the writes are crs/'s")

N = 300


@pytest.fixture(scope="module")
def source(kube, crds) -> Iterator[tuple[str, dict[str, Any]]]:
    ns = unique("procs")
    from statusvault.testing.fixtures import ensure_namespace

    ensure_namespace(kube, ns)
    populate(kube, crds, ns, N)
    yield ns, snapshot(kube, [crds.resolve(r) for r in FAULT_RESOURCES], ns)
    kube.delete(NAMESPACES, None, ns)


def restore_args(source_ns: str, target: str, *extra: str) -> list[str]:
    return ["restore", "p", "--namespace-mapping", f"{source_ns}:{target}", "--processes", "2", "--parallel", "4",
            *extra]  # fmt: skip


def test_a_restore_across_processes_through_faults_ends_exact(run, kube, crds, proxied, source):
    ns, before = source
    assert run("backup", "p", "-n", ns).code == 0
    target = unique("to")
    proxy, kubeconfig = proxied(0.1, seed=7, retry_after="0.1")

    result = run(*restore_args(ns, target, "-o", "json"), kubeconfig=kubeconfig)

    assert result.code == ExitStatus.SUCCESS, result.err
    report = json.loads(result.out)
    assert report["processes"] == 2
    assert report["withoutSavedStatus"] == 0
    restored = [i for i in report["items"] if i["resource"] != CRD_QUALIFIED]  # the CRDs exist: skipped
    assert len(restored) == N + 1, "one result per object (and the namespace), none lost or doubled"
    assert len({(i["resource"], i["name"]) for i in restored}) == N + 1
    assert sum(proxy.counts.values()) > 0, "faults were injected"
    assert_exact(before, snapshot(kube, [crds.resolve(r) for r in FAULT_RESOURCES], target))
    kube.delete(NAMESPACES, None, target)


def test_a_worker_killed_mid_wave_is_replaced_and_the_run_ends_exact(run, kube, crds, proxied, source):
    ns, before = source
    assert run("backup", "p", "-n", ns).code == 0
    target = unique("to")
    killed: list[int] = []

    def kill_a_worker(method: str, path: str, body: bytes | None) -> None:
        if killed or method != "PUT" or not path.split("?")[0].endswith("/status") or f"/{target}/" not in path:
            return
        workers = [p for p in multiprocessing.active_children() if p.name == "statusvault-restore-worker"]
        if len(workers) == 2:  # the restore runs in this process: its workers are our children
            os.kill(workers[0].pid or 0, signal.SIGKILL)
            killed.append(workers[0].pid or 0)

    _, kubeconfig = proxied(0.0, before=kill_a_worker)
    result = run(*restore_args(ns, target, "-o", "json"), kubeconfig=kubeconfig)

    assert killed, "a worker was killed"
    assert result.code == ExitStatus.SUCCESS, result.err
    assert "died" in result.err, "the death is logged"
    report = json.loads(result.out)
    assert report["withoutSavedStatus"] == 0 and "failed" not in report["summary"]["results"]
    assert_exact(before, snapshot(kube, [crds.resolve(r) for r in FAULT_RESOURCES], target))
    kube.delete(NAMESPACES, None, target)


def _children(pid: int) -> list[int]:
    kids: list[int] = []
    for task in Path(f"/proc/{pid}/task").iterdir():
        kids += [int(p) for p in (task / "children").read_text().split()]
    return kids


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


def test_parent_killed_mid_wave_leaves_no_worker_and_the_rerun_ends_exact(run, kube, crds, proxied, source):
    ns, before = source
    assert run("backup", "p", "-n", ns).code == 0
    target = unique("to")
    victim: dict[str, Any] = {}
    seen = {"writes": 0}

    def kill_parent(method: str, path: str, body: bytes | None) -> None:
        proc = victim.get("proc")
        if proc is None or proc.poll() is not None or method != "POST" or f"/{target}/" not in path:
            return
        seen["writes"] += 1
        if seen["writes"] == 60:
            victim["workers"] = _children(proc.pid)
            os.kill(proc.pid, signal.SIGKILL)
            proc.wait()

    proxy, kubeconfig = proxied(0.0, before=kill_parent)
    args = restore_args(ns, target)
    victim["proc"] = run.spawn(*args, kubeconfig=kubeconfig)
    _, err = victim["proc"].communicate(timeout=300)
    assert victim["proc"].returncode == -signal.SIGKILL, err.decode()
    workers = victim["workers"]
    assert len(workers) >= 2, f"the parent had its worker processes: {workers}"
    deadline = time.monotonic() + 60
    while any(_alive(p) for p in workers):
        assert time.monotonic() < deadline, "worker processes outlived their parent"
        time.sleep(0.2)
    proxy.before = lambda method, path, body: None

    again = run(*args, kubeconfig=kubeconfig)

    assert again.code == ExitStatus.SUCCESS, again.out + again.err
    assert_exact(before, snapshot(kube, [crds.resolve(r) for r in FAULT_RESOURCES], target))
    kube.delete(NAMESPACES, None, target)


def test_ctrl_c_mid_wave_starts_no_new_object_and_the_rerun_ends_exact(run, kube, crds, proxied, source):
    ns, before = source
    assert run("backup", "p", "-n", ns).code == 0
    target = unique("to")
    victim: dict[str, Any] = {}
    posts = {"before": 0, "after": 0}

    def interrupt(method: str, path: str, body: bytes | None) -> None:
        proc = victim.get("proc")
        if proc is None or method != "POST" or f"/{target}/" not in path:
            return
        if "signalled" in victim:
            posts["after"] += 1
            return
        posts["before"] += 1
        if posts["before"] == 60:
            os.kill(proc.pid, signal.SIGINT)
            victim["signalled"] = True

    proxy, kubeconfig = proxied(0.0, before=interrupt)
    args = restore_args(ns, target)
    victim["proc"] = run.spawn(*args, kubeconfig=kubeconfig)
    _, err = victim["proc"].communicate(timeout=300)

    assert victim["proc"].returncode == ExitStatus.INTERRUPTED, (posts, err.decode()[-3000:])
    in_flight = 2 * 4 * 4  # --processes 2 x --parallel 4 x 4 slots per thread
    assert posts["after"] <= in_flight, f"{posts['after']} objects started after Ctrl-C"
    proxy.before = lambda method, path, body: None

    again = run(*args, kubeconfig=kubeconfig)

    assert again.code == ExitStatus.SUCCESS, again.out + again.err
    assert_exact(before, snapshot(kube, [crds.resolve(r) for r in FAULT_RESOURCES], target))
    kube.delete(NAMESPACES, None, target)


@pytest.mark.parametrize(("cpu_bound", "processes"), [(True, 2), (False, 0)], ids=["cpu-bound", "server-bound"])
def test_by_default_a_wave_moves_to_worker_processes_only_once_this_process_is_cpu_bound(
    run, kube, crds, source, monkeypatch, cpu_bound, processes
):
    """The default (no --processes) starts each large wave in this process's threads and hands the rest
    to worker processes only when this process is CPU-bound; when the server is the limit it never starts them.
    Both end exact. (The machine's CPU use is made certain by the threshold: 0 always, 2 cores never.)"""
    from statusvault.cli import restore as cli_restore
    from statusvault.restore.running import waves

    monkeypatch.setattr(cli_restore, "MIN_WAVE", 8)
    monkeypatch.setattr(cli_restore, "default_processes", lambda: 2)
    monkeypatch.setattr(waves, "PROBE", 16)
    monkeypatch.setattr(waves, "CPU_BOUND", 0.0 if cpu_bound else 2.0)
    ns, before = source
    assert run("backup", "p", "-n", ns).code == 0
    target = unique("to")

    result = run("restore", "p", "--namespace-mapping", f"{ns}:{target}", "--parallel", "4", "-o", "json")

    assert result.code == ExitStatus.SUCCESS, result.err
    report = json.loads(result.out)
    assert report["processes"] == processes, "worker processes only when they would raise the rate"
    assert report["withoutSavedStatus"] == 0
    assert_exact(before, snapshot(kube, [crds.resolve(r) for r in FAULT_RESOURCES], target))
    kube.delete(NAMESPACES, None, target)
