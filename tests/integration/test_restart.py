"""An API server restarted in the middle of a restore or a backup (an upgrade, a failover) is waited out: the run goes
on once it answers again, ends exact, and its report says how long the server was away. On a control plane of the
module's own, restarted for real (its etcd and objects stay)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
import yaml

from statusvault.errors import ExitStatus
from statusvault.kube.client import KubeClient
from statusvault.kube.transport import load_transport
from statusvault.runtime.throttle import SERVER_WAIT_SECONDS
from statusvault.testing.cluster import LocalCluster
from statusvault.testing.fixtures import ensure_namespace, install_crds
from tests.builders import cr, crd, unique
from tests.faultproxy import FaultProxy, self_signed

pytestmark = pytest.mark.version_neutral("a restarted server refuses connections, then answers 503, on every version")

N = 1500
DOWN = 10.0  # seconds the API server stays stopped


@pytest.fixture(scope="module")
def own(kube_version: str) -> Iterator[LocalCluster]:
    """A control plane this module alone uses: restarting it disturbs no other test."""
    with LocalCluster.start(version=kube_version) as c:
        yield c


@pytest.fixture(scope="module")
def gadgets(own: LocalCluster):
    """N objects with a saved status in one namespace of the module's control plane."""
    kube = KubeClient(load_transport(str(own.kubeconfig), pool_size=16))
    group = f"{unique('restart')}.example.com"
    rt = install_crds(kube, [crd(group, "Gadget")]).by_qualified(f"gadgets.{group}")
    ns = unique("restart")
    ensure_namespace(kube, ns)

    def make(i: int) -> None:
        created = kube.create(rt, ns, cr(f"{group}/v1", "Gadget", f"g-{i:04d}", spec={"n": i}))
        created["status"] = {"id": f"ext-{i:04d}"}
        kube.replace(rt, ns, created["metadata"]["name"], created, sub="status")

    with ThreadPoolExecutor(16) as pool:
        list(pool.map(make, range(N)))
    return kube, rt, ns


def through_proxy(own: LocalCluster, tmp_path: Path, on_request) -> tuple[FaultProxy, Path]:
    proxy = FaultProxy(own.server, 0.0, certs=self_signed(tmp_path), before=on_request).start()
    config = yaml.safe_load(own.kubeconfig.read_text())
    config["clusters"][0]["cluster"]["server"] = proxy.url
    path = tmp_path / "kubeconfig-proxy"
    path.write_text(yaml.safe_dump(config))
    return proxy, path


def restart_on(own: LocalCluster, method: str, fragment: str, nth: int):
    """A proxy hook that restarts the API server (in the background) at the nth request matching."""
    seen, started = [0], threading.Event()
    lock = threading.Lock()

    def hook(m: str, path: str, body: bytes | None) -> None:
        with lock:
            if m != method or fragment not in path or started.is_set():
                return
            seen[0] += 1
            if seen[0] == nth:
                started.set()
                threading.Thread(target=own.restart_apiserver, args=(DOWN,), daemon=True).start()

    return hook, started


def cli(kubeconfig: Path, tmp_path: Path, *args: str) -> tuple[int, str, str]:
    env = {**os.environ, "STATUSVAULT_STORAGE": str(tmp_path / "store"), "STATUSVAULT_STATE_DIR": str(tmp_path / "st")}
    env["STATUSVAULT_SERVER_WAIT_SECONDS"] = str(SERVER_WAIT_SECONDS)  # the default (the suite's is 0: conftest.py)
    done = subprocess.run(
        [sys.executable, "-m", "statusvault", "--kubeconfig", str(kubeconfig), *args],
        env=env, capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    return done.returncode, done.stdout, done.stderr


def test_a_restore_rides_through_an_api_server_restart_and_ends_exact(own, gadgets, tmp_path):
    kube, rt, ns = gadgets
    code, _, err = cli(own.kubeconfig, tmp_path, "backup", "b", "-n", ns, "--include-resources", rt.qualified,
                       "--no-include-crds")  # fmt: skip
    assert code == 0, err
    target = unique("back")
    hook, restarted = restart_on(own, "POST", f"/namespaces/{target}/", 300)
    proxy, kubeconfig = through_proxy(own, tmp_path, hook)
    try:
        code, out, err = cli(kubeconfig, tmp_path, "restore", "b", "--namespace-mapping", f"{ns}:{target}",
                             "--parallel", "8", "-o", "json")  # fmt: skip
    finally:
        proxy.stop()

    assert restarted.is_set(), "the API server was restarted mid-restore"
    assert code == ExitStatus.SUCCESS, err[-3000:]
    report = json.loads(out)
    assert report["verdict"]["outcome"] == "done"
    assert report["serverUnavailableSeconds"] >= DOWN / 2, report["serverUnavailableSeconds"]
    assert "is unavailable" in err and "answers again" in err
    restored = {o["metadata"]["name"]: o.get("status") for page in kube.list_pages(rt, target) for o in page}
    assert restored == {f"g-{i:04d}": {"id": f"ext-{i:04d}"} for i in range(N)}, "an independent read: all exact"


def test_a_backup_rides_through_an_api_server_restart_and_holds_every_object(own, gadgets, tmp_path):
    kube, rt, ns = gadgets
    slow, restarted = restart_on(own, "GET", f"/namespaces/{ns}/gadgets", 1)

    def hook(method: str, path: str, body: bytes | None) -> None:
        slow(method, path, body)
        if restarted.is_set() and method == "GET":
            time.sleep(0.05)  # the backup still reading when the server goes

    proxy, kubeconfig = through_proxy(own, tmp_path, hook)
    try:
        code, _, err = cli(kubeconfig, tmp_path, "backup", "during", "-n", ns, "--include-resources", rt.qualified,
                           "--no-include-crds", "--page-size", "100")  # fmt: skip
    finally:
        proxy.stop()

    assert restarted.is_set(), "the API server was restarted mid-backup"
    assert code == ExitStatus.SUCCESS, err[-3000:]
    assert "is unavailable" in err and "answers again" in err
    code, out, described = cli(own.kubeconfig, tmp_path, "describe", "during", "-o", "json")
    assert code == 0, described
    assert json.loads(out)["totals"]["objects"] == N, "every object, none lost to the outage"
