"""Cluster API, the real controllers, after a disaster: does it find its Machines and redo nothing?

A Machine's provider ID and node reference, and its infrastructure machine's state, are what tell Cluster API that a
machine exists. The scenario: a workload cluster on the in-memory backend (a control plane of 1, a MachineDeployment
of 3) reaches a steady state on a control plane of its own, and its namespace is backed up with the documented
command (encrypted: it holds the cluster's CA and kubeconfig Secrets). That control plane is lost. A fresh one is
bootstrapped with Cluster API running, the restore runs paused with `--order cluster-api`, and the test counts what
Cluster API did with the Machines once it had them back: recreated, deleted, or left alone.

- statusvault: every Machine kept (same names and provider IDs), none recreated or deleted, nothing left paused,
  exit 0.
- The comparison, the same restore without status: its counts are recorded, not held to a number.

The move: the same workload cluster, steady in one management cluster, moved to another with Cluster API running
in both, by `statusvault move --delete-source` and, for comparison, by `clusterctl move` of the same release. The
infrastructure provider is handed over once the move is done (capi.py: one in-memory provider per machine). Each
move is counted the same way: Machines recreated or deleted, objects left paused in the target or left in the
source, and the time it took.

docs/operators.md has the tables; `make operators-report` prints the counts.
"""

from __future__ import annotations

import base64
import json
import os
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from statusvault.errors import ExitStatus
from statusvault.kube.client import KubeClient
from statusvault.kube.discovery import discover
from statusvault.kube.transport import load_transport
from statusvault.testing.capi import ClusterAPI
from statusvault.testing.cluster import LocalCluster
from statusvault.testing.fixtures import FIXTURES, read_docs
from statusvault.testing.operators import apply_docs, condition, wait_for

pytestmark = pytest.mark.current_only("Cluster API v1.13 is built against the current Kubernetes (client-go 1.35+)")

NS = "capi-test"
WORKLOAD = FIXTURES / "operators" / "capi-inmemory.yaml"
CONTROL_PLANE, WORKERS = 1, 3
CAPI_TYPES = (
    "clusters.cluster.x-k8s.io", "machinedeployments.cluster.x-k8s.io", "machinesets.cluster.x-k8s.io",
    "machines.cluster.x-k8s.io", "kubeadmcontrolplanes.controlplane.cluster.x-k8s.io",
    "kubeadmconfigs.bootstrap.cluster.x-k8s.io", "kubeadmconfigtemplates.bootstrap.cluster.x-k8s.io",
    "devclusters.infrastructure.cluster.x-k8s.io", "devmachines.infrastructure.cluster.x-k8s.io",
    "devmachinetemplates.infrastructure.cluster.x-k8s.io",
)  # fmt: skip
PAUSED = "cluster.x-k8s.io/paused"
OBSERVED = 15  # seconds the workload cluster must stay steady, Cluster API running on, before the count
SETTLE = 480  # seconds it may take to get there: about 40 on an idle machine, more than 300 once under a loaded CI


def listed(kube: KubeClient, qualified: str) -> list[dict[str, Any]]:
    rt = discover(kube).by_qualified(qualified)
    assert rt is not None, qualified
    return [o for page in kube.list_pages(rt, NS) for o in page]


def steady(kube: KubeClient) -> bool:
    """Every Machine Running with a provider ID and a node, the control plane and the workers ready."""
    return not unsteady(kube)


def unsteady(kube: KubeClient) -> list[str]:
    """What keeps the workload cluster from being steady, one line each (none when it is steady): for `steady`
    and for a failure's message."""
    out = []
    machines = listed(kube, "machines.cluster.x-k8s.io")
    for m in machines:
        status, spec, meta = m.get("status") or {}, m.get("spec") or {}, m["metadata"]
        if (
            status.get("phase") != "Running"
            or not (spec.get("providerID") and status.get("nodeRef"))
            or (meta.get("deletionTimestamp"))
        ):
            node, deleting = bool(status.get("nodeRef")), bool(meta.get("deletionTimestamp"))
            out.append(f"Machine {meta['name']}: phase {status.get('phase')}, providerID {spec.get('providerID')!r}, "
                       f"nodeRef {node}, deleting {deleting}")  # fmt: skip
    if len(machines) != CONTROL_PLANE + WORKERS:
        out.append(f"{len(machines)} Machines, not {CONTROL_PLANE + WORKERS}")
    kcps = listed(kube, "kubeadmcontrolplanes.controlplane.cluster.x-k8s.io")
    mds = listed(kube, "machinedeployments.cluster.x-k8s.io")
    if not (kcps and mds):
        out.append(f"{len(kcps)} KubeadmControlPlanes, {len(mds)} MachineDeployments")
    for k in kcps:
        ready, available = (k.get("status") or {}).get("readyReplicas"), condition(k, "Available") or {}
        if ready != CONTROL_PLANE or available.get("status") != "True":
            why = f"{available.get('status')} ({available.get('reason')}: {available.get('message')})"
            out.append(f"KubeadmControlPlane {k['metadata']['name']}: readyReplicas {ready}, Available {why}")
            out += _control_plane_health(kube, machines)
    for d in mds:
        if (ready := (d.get("status") or {}).get("readyReplicas")) != WORKERS:
            out.append(f"MachineDeployment {d['metadata']['name']}: readyReplicas {ready}")
    return out


def _control_plane_health(kube: KubeClient, machines: list[dict[str, Any]]) -> list[str]:
    """Why the control plane is not available, as its own objects say it: each control-plane Machine's health
    conditions that are not True (what the KubeadmControlPlane found when it asked the workload cluster), and each
    DevMachine's provisioning conditions that are not True (what the infrastructure provider rebuilt)."""
    out = []
    for m in machines:
        if "cluster.x-k8s.io/control-plane" not in (m["metadata"].get("labels") or {}):
            continue
        for c in (m.get("status") or {}).get("conditions") or []:
            if c.get("type", "").endswith("Healthy") and c.get("status") != "True":
                out.append(f"Machine {m['metadata']['name']}: {c['type']} {c.get('status')} ({c.get('reason')}: "
                           f"{c.get('message')})")  # fmt: skip
    for d in listed(kube, "devmachines.infrastructure.cluster.x-k8s.io"):
        for c in (d.get("status") or {}).get("conditions") or []:
            if c.get("type", "").endswith("Provisioned") and c.get("status") != "True":
                out.append(f"DevMachine {d['metadata']['name']}: {c['type']} {c.get('status')} ({c.get('reason')})")
    return out


def reconciled(kube: KubeClient) -> bool:
    """Cluster API has reconciled every object of the restore since it got it back: each status that records an
    observedGeneration records the object's own (a restored status carries the old object's, a higher one)."""
    return not unreconciled(kube)


def unreconciled(kube: KubeClient) -> list[str]:
    """Each object whose status records another generation than its own, one line each."""
    out = []
    for qualified in CAPI_TYPES:
        for o in listed(kube, qualified):
            seen = (o.get("status") or {}).get("observedGeneration")
            if seen is not None and seen != o["metadata"].get("generation"):
                out.append(f"{qualified} {o['metadata']['name']}: observedGeneration {seen}, generation "
                           f"{o['metadata'].get('generation')}")  # fmt: skip
    return out


def machines(kube: KubeClient) -> dict[str, str]:
    """Each Machine and infrastructure machine: kind/name -> provider ID (infrastructure: its own name)."""
    out = {f"Machine/{m['metadata']['name']}": str((m.get("spec") or {}).get("providerID") or "")
           for m in listed(kube, "machines.cluster.x-k8s.io")}  # fmt: skip
    out |= {
        f"DevMachine/{m['metadata']['name']}": "" for m in listed(kube, "devmachines.infrastructure.cluster.x-k8s.io")
    }
    return out


def paused(kube: KubeClient) -> int:
    count = sum(1 for c in listed(kube, "clusters.cluster.x-k8s.io") if (c.get("spec") or {}).get("paused"))
    for qualified in CAPI_TYPES:
        count += sum(1 for o in listed(kube, qualified) if PAUSED in (o["metadata"].get("annotations") or {}))
    return count


@pytest.fixture(scope="module")
def capi_backup(tmp_path_factory) -> Iterator[dict[str, Any]]:
    """The workload cluster steady on a control plane of its own, backed up encrypted; then that control plane is
    gone."""
    from statusvault.cli import main

    work = tmp_path_factory.mktemp("capi")
    key = work / "backup.key"
    key.write_text(base64.b64encode(os.urandom(32)).decode())
    store = work / "store"
    with LocalCluster.start(version="1.36") as plane:
        kube = KubeClient(load_transport(str(plane.kubeconfig)))
        with ClusterAPI.start(kube, plane.kubeconfig) as capi:
            apply_docs(kube, discover(kube), read_docs(WORKLOAD))
            wait_for(lambda: steady(kube), 300, "the workload cluster steady", capi.log_tail, every=2)
            before = machines(kube)
            code = main(["--kubeconfig", str(plane.kubeconfig), "backup", "capi", "--storage", str(store),
                         "--namespace", NS, "--encryption-key-file", str(key)])  # fmt: skip
            assert code == ExitStatus.SUCCESS
    yield {"store": store, "key": key, "before": before}


def settle(kube: KubeClient, origin: float, timeout: float, capi: ClusterAPI) -> tuple[float | None, list[str]]:
    """Seconds from `origin` until Cluster API has reconciled every object and the workload cluster is steady, and
    stays so for OBSERVED seconds: a dip (the infrastructure provider rebuilding its machines after it starts)
    starts the wait again. When that does not happen within `timeout`: None, and what is not steady (the managers'
    last lines printed)."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            wait_for(lambda: reconciled(kube) and steady(kube), deadline - time.monotonic(), "steady", capi.log_tail, 2)
        except TimeoutError as e:
            print(f"not steady: {e}")
            return None, [*unreconciled(kube), *unsteady(kube)]
        since = time.monotonic()
        while time.monotonic() - since < OBSERVED and steady(kube):
            time.sleep(2)
        if time.monotonic() - since >= OBSERVED:
            return since - origin, []


def disaster_restore(capi_backup: dict[str, Any], options: list[str]) -> dict[str, Any]:
    """A fresh control plane with Cluster API running (a bootstrap-first rebuild), the paused restore with
    `options`, then up to SETTLE seconds for Cluster API to have reconciled every object and the workload cluster to be
    steady again and stay so for 15 seconds (settle): what Cluster API did."""
    from statusvault.cli import main

    with LocalCluster.start(version="1.36") as plane:
        kube = KubeClient(load_transport(str(plane.kubeconfig)))
        with ClusterAPI.start(kube, plane.kubeconfig) as capi:
            started = time.monotonic()
            code = main(["--kubeconfig", str(plane.kubeconfig), "restore", "capi",
                         "--storage", str(capi_backup["store"]), "--encryption-key-file", str(capi_backup["key"]),
                         "--order", "cluster-api", "--pause", "auto",
                         "--include-resources", ",".join([*CAPI_TYPES, "secrets"]),
                         "--allow-privileged-resources", "secrets", "-o", "json", *options])  # fmt: skip
            restored = time.monotonic() - started
            settled, unsettled = settle(kube, started, SETTLE, capi)
            after = machines(kube)
            left_paused = paused(kube)
    before = capi_backup["before"]
    return {
        "exitCode": int(code),
        "machines": len(before),
        "recreated": len(set(after) - set(before)),
        "deleted": len(set(before) - set(after)),
        "providerIDsChanged": sum(1 for k in before if k in after and after[k] != before[k]),
        "leftPaused": left_paused,
        "restoreSeconds": round(restored, 1),
        "steadyAfterSeconds": round(settled, 1) if settled is not None else None,
        **({"notSteady": unsettled} if unsettled else {}),
    }


def moved(mover: Callable[[Path, Path, ClusterAPI, Path], int], work: Path) -> dict[str, Any]:
    """The workload cluster steady in a source management cluster, a target with Cluster API running (its
    infrastructure provider lent by the source's), `mover(source kubeconfig, target kubeconfig, target, work)`
    timed, the Machines that have their node in the target when it returns (their status moved with them), the
    infrastructure provider handed over, then up to SETTLE seconds for the target to have reconciled everything and the
    cluster to be steady there and stay so for 15 seconds (settle): what Cluster API did in the target."""
    with LocalCluster.start(version="1.36") as source_plane, LocalCluster.start(version="1.36") as target_plane:
        source_kube = KubeClient(load_transport(str(source_plane.kubeconfig)))
        target_kube = KubeClient(load_transport(str(target_plane.kubeconfig)))
        with ClusterAPI.start(source_kube, source_plane.kubeconfig) as source:
            apply_docs(source_kube, discover(source_kube), read_docs(WORKLOAD))
            wait_for(lambda: steady(source_kube), 300, "the workload cluster steady", source.log_tail, every=2)
            before = machines(source_kube)
            with ClusterAPI.start(target_kube, target_plane.kubeconfig, infrastructure_from=source) as target:
                started = time.monotonic()
                code = mover(source_plane.kubeconfig, target_plane.kubeconfig, target, work)
                took = time.monotonic() - started
                with_nodes = sum(
                    1 for m in listed(target_kube, "machines.cluster.x-k8s.io") if m.get("status", {}).get("nodeRef")
                )
                target.take_infrastructure()
                settled, unsettled = settle(target_kube, started + took, SETTLE, target)
                after = machines(target_kube)
                left_paused = paused(target_kube)
                left_in_source = sum(len(listed(source_kube, qualified)) for qualified in CAPI_TYPES)
    return {
        "exitCode": code,
        "machines": len(before),
        "recreated": len(set(after) - set(before)),
        "deleted": len(set(before) - set(after)),
        "providerIDsChanged": sum(1 for k in before if k in after and after[k] != before[k]),
        "leftPaused": left_paused,
        "leftInSource": left_in_source,
        "machinesWithTheirNodeAtOnce": with_nodes,
        "moveSeconds": round(took, 1),
        "steadyAfterSeconds": round(settled, 1) if settled is not None else None,
        **({"notSteady": unsettled} if unsettled else {}),
    }


def statusvault_move(source: Path, target: Path, capi: ClusterAPI, work: Path) -> int:
    from statusvault.cli import main

    argv = ["move", "--from-kubeconfig", str(source), "--to-kubeconfig", str(target), "--namespace", NS,
            "--storage", str(work / "store"), "--state-dir", str(work / "state"), "--with-dependencies",
            "--allow-privileged-resources", "secrets", "--delete-source", "--yes"]  # fmt: skip
    return int(main(argv))


def clusterctl_move(source: Path, target: Path, capi: ClusterAPI, work: Path) -> int:
    run = capi.clusterctl("move", "--kubeconfig", str(source), "--to-kubeconfig", str(target), "--namespace", NS)
    print(run.stdout[-2000:], run.stderr[-2000:])
    return run.returncode


def record(request: pytest.FixtureRequest, variant: str, counts: dict[str, Any]) -> None:
    """The counts of one run, for docs/operators.md (`make operators-report` prints them)."""
    with request.getfixturevalue("capsys").disabled():
        print(f"cluster-api {variant}: {json.dumps(counts)}")


@pytest.mark.timeout(900)  # a control plane, four managers and a workload cluster, on a loaded machine
def test_a_paused_restore_gives_cluster_api_its_machines_and_it_recreates_none(capi_backup, request):
    counts = disaster_restore(capi_backup, [])
    record(request, "statusvault-paused", counts)
    assert counts["exitCode"] == ExitStatus.SUCCESS
    assert counts["steadyAfterSeconds"] is not None, f"the workload cluster is steady again: {counts.get('notSteady')}"
    assert (counts["recreated"], counts["deleted"], counts["providerIDsChanged"], counts["leftPaused"]) == (0, 0, 0, 0)


@pytest.mark.comparison("a restore without status, Velero's default")
@pytest.mark.timeout(900)
def test_without_status_cluster_api_is_counted(capi_backup, request):
    """The comparison, Velero's default: recorded, not held to a number."""
    counts = disaster_restore(capi_backup, ["--no-status"])
    record(request, "no-status", counts)
    assert counts["machines"] == 2 * (CONTROL_PLANE + WORKERS), "each Machine with its infrastructure machine"
    assert counts["exitCode"] in (ExitStatus.SUCCESS, ExitStatus.PARTIAL_FAILURE)


@pytest.mark.timeout(900)
def test_statusvault_move_hands_cluster_api_its_machines_and_it_recreates_none(request, tmp_path):
    counts = moved(statusvault_move, tmp_path)
    record(request, "statusvault-move", counts)
    assert counts["exitCode"] == ExitStatus.SUCCESS
    assert counts["steadyAfterSeconds"] is not None, (
        f"the workload cluster is steady in the target: {counts.get('notSteady')}"
    )
    assert (counts["recreated"], counts["deleted"], counts["providerIDsChanged"]) == (0, 0, 0)
    assert (counts["leftPaused"], counts["leftInSource"]) == (0, 0)
    assert counts["machinesWithTheirNodeAtOnce"] == CONTROL_PLANE + WORKERS, "each Machine arrives with its status"


@pytest.mark.comparison("Cluster API's own move")
@pytest.mark.timeout(900)
def test_clusterctl_move_is_counted(request, tmp_path):
    """The comparison, Cluster API's own move: recorded, not held to a number."""
    counts = moved(clusterctl_move, tmp_path)
    record(request, "clusterctl-move", counts)
    assert counts["machines"] == 2 * (CONTROL_PLANE + WORKERS), "each Machine with its infrastructure machine"
