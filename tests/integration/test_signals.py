"""SIGINT and SIGTERM stop a restore the way an incident needs (runtime/stopping.py): no new write is started, the
writes in flight finish, and only then is the operator scaled back and the report written, which agrees with the
cluster; the exit status is 130 or 143, with no traceback; the same command then resumes to an exact end."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time

import pytest

from statusvault.errors import ExitStatus
from tests.builders import unique
from tests.integration.test_fence import Cluster, an_operator_of, backed_up_widgets
from tests.integration.test_fence import N as WIDGETS
from tests.integration.test_fence import saved as widget_status

pytestmark = pytest.mark.version_neutral("signal handling is the CLI's own")


@pytest.fixture
def world(kube):
    c = Cluster(kube)
    yield c
    c.cleanup()


def env_of(run) -> dict[str, str]:
    return {"STATUSVAULT_STORAGE": str(run.storage), "STATUSVAULT_STATE_DIR": str(run.state)}


def signalled_mid_status_write(proxy, run, argv: list[str], sig: int) -> tuple[subprocess.Popen[str], str, str]:
    """`statusvault ARGV` in its own process, its status writes slowed through `proxy` (each takes 0.4 s), sent `sig`
    while one is in flight; the finished process and what it printed."""
    writing = threading.Event()

    def slow_status(method: str, path: str, body: bytes | None) -> None:
        if method == "PUT" and path.split("?")[0].endswith("/status"):
            writing.set()
            time.sleep(0.4)  # a status write in flight when the signal comes

    proxy.before = slow_status
    process = subprocess.Popen(
        [sys.executable, "-m", "statusvault", *argv],
        env={**os.environ, **env_of(run)},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert writing.wait(60), "the run reached its status writes"
    process.send_signal(sig)
    out, err = process.communicate(timeout=120)
    return process, out, err


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM], ids=["SIGINT", "SIGTERM"])
def test_a_signal_stops_new_writes_waits_for_those_in_flight_then_scales_back_and_reports(
    run, kube, namespace, world, proxied, sig
):
    group = f"{unique('sig')}.example.com"
    widgets = backed_up_widgets(run, kube, group, namespace)
    ops, name = an_operator_of(world, group, replicas=2).split("/")
    proxy, kubeconfig = proxied(0.0)
    args = ["--kubeconfig", str(kubeconfig), "restore", "b", "--scale-down", f"{ops}/deployments/{name}"]
    process, out, err = signalled_mid_status_write(proxy, run, [*args, "--parallel", "2", "-o", "json"], sig)

    assert process.returncode == (ExitStatus.INTERRUPTED if sig == signal.SIGINT else ExitStatus.TERMINATED), err
    for broken in ("Traceback", "closed file", "ProgrammingError"):
        assert broken not in err
    assert err.strip().splitlines()[-1] == "error: restore of b interrupted: run the same command again to resume"
    report = json.loads(out)
    assert report["interrupted"] and report["verdict"] == {"outcome": "interrupted", "reasons": []}
    written = report["summary"]["status"].get("written", 0)
    on_cluster = sum(
        1
        for i in range(WIDGETS)
        if (kube.get(widgets, namespace, f"w-{i:02d}") or {}).get("status") == widget_status(i)
    )
    assert 0 < written < WIDGETS, report["summary"]
    assert written == on_cluster, "the report says what the cluster holds: every write in flight finished first"
    assert written + report["unreached"] == WIDGETS
    assert world.get(ops, "Deployment", name)["spec"]["replicas"] == 2, "scaled back before the exit"

    proxy.before = lambda method, path, body: None
    again = run("restore", "b", "--parallel", "2", "-o", "json", kubeconfig=kubeconfig)

    assert again.code == ExitStatus.SUCCESS, again.out + again.err
    assert json.loads(again.out)["resumed"] == written
    for i in range(WIDGETS):
        assert kube.get(widgets, namespace, f"w-{i:02d}")["status"] == widget_status(i)


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM], ids=["SIGINT", "SIGTERM"])
def test_a_signal_stops_a_move_as_it_stops_a_restore_and_the_same_command_resumes_it(
    run, kube, namespace, cluster, proxied, sig
):
    """`move` is judged by the restore's one verdict: a signal mid-restore into the target exits 130/143 (not 3)
    with `-o json`'s verdict interrupted and nothing deleted in the source; the same command finishes the move."""
    from statusvault.testing.fixtures import create_with_status, install_crds
    from tests.builders import cr, crd

    group = f"{unique('mvsig')}.example.com"
    rt = install_crds(kube, [crd(group, "Widget")]).by_qualified(f"widgets.{group}")
    d = discover_of(kube)
    for i in range(WIDGETS):
        create_with_status(kube, d, cr(f"{group}/v1", "Widget", f"w-{i:02d}", status=widget_status(i)), namespace)
    target = unique("mvsig-to")
    proxy, to_kubeconfig = proxied(0.0)
    args = ["move", "-n", namespace, "--include-resources", rt.qualified, "--namespace-mapping",
            f"{namespace}:{target}", "--to-kubeconfig", str(to_kubeconfig), "--delete-source", "--yes",
            "--parallel", "2", "-o", "json"]  # fmt: skip
    process, out, err = signalled_mid_status_write(proxy, run, ["--kubeconfig", str(cluster.kubeconfig), *args], sig)

    assert process.returncode == (ExitStatus.INTERRUPTED if sig == signal.SIGINT else ExitStatus.TERMINATED), err
    assert "Traceback" not in err and "interrupted" in err.strip().splitlines()[-1]
    report = json.loads(out)
    assert report["verdict"] == {"outcome": "interrupted", "reasons": []} and report["sourceDeleted"] == 0
    assert kube.list_names(rt, namespace) == {f"w-{i:02d}" for i in range(WIDGETS)}, "the source is kept"

    proxy.before = lambda method, path, body: None
    again = run(*args)
    assert again.code == ExitStatus.SUCCESS, again.out + again.err
    assert json.loads(again.out)["verdict"]["outcome"] == "done"
    assert [kube.get(rt, target, f"w-{i:02d}")["status"] for i in range(WIDGETS)] == [
        widget_status(i) for i in range(WIDGETS)
    ]


def discover_of(kube):
    from statusvault.kube.discovery import discover

    return discover(kube)
