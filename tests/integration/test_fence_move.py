"""`move --fence` on two real API servers: the operators that race a move are the target's, found from the target's
RBAC; `report` prints the plan and writes nothing on either side; `auto` scales the target's operator to 0 for the
move's restore and back, so it provisions nothing, where an unfenced move lets it win races (status writes made
slow by a proxy in front of the target)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest

from statusvault.errors import ExitStatus
from statusvault.kube.client import KubeClient
from statusvault.kube.discovery import discover
from statusvault.kube.transport import load_transport
from statusvault.restore.quiet.scaledown import ANNOTATION
from statusvault.testing.cluster import ADMIN_TOKEN, kubeconfig_yaml
from statusvault.testing.fixtures import create_with_status, install_crds
from statusvault.vocabulary.kinds import NAMESPACES
from tests.builders import cr, crd, unique
from tests.faultproxy import FaultProxy, self_signed
from tests.integration.test_fence import Cluster, N, an_operator_of, fence_lines, saved, slow_status
from tests.integration.test_pause import GROUP, QUALIFIED, Operator
from tests.integration.test_pause import saved as instance_status

pytestmark = pytest.mark.version_neutral(
    "move's use of fencing; the fence's reading of each server is guarded by test_fence on every version"
)


@pytest.fixture
def target_kube(target) -> KubeClient:
    return KubeClient(load_transport(str(target.kubeconfig)))


@pytest.fixture
def target_world(target_kube) -> Iterator[Cluster]:
    """RBAC objects and workloads in the target (tests/integration/test_fence.py), deleted afterwards."""
    c = Cluster(target_kube)
    yield c
    c.cleanup()


@pytest.fixture
def slow_target(target, tmp_path) -> Iterator[str]:
    """A kubeconfig for the target through a proxy that makes each status write 0.3 s late: the race, made certain."""
    proxy = FaultProxy(target.server, 0.0, certs=self_signed(tmp_path), before=slow_status).start()
    path = tmp_path / "kubeconfig-slow-target"
    path.write_text(kubeconfig_yaml(proxy.url, "admin", ADMIN_TOKEN))
    yield str(path)
    proxy.stop()


def widgets_in(kube: KubeClient, group: str, ns: str) -> Any:
    """N widgets (no pause convention: the move cannot create them paused) with their saved status."""
    rt = install_crds(kube, [crd(group, "Widget")]).by_qualified(f"widgets.{group}")
    d = discover(kube)
    for i in range(N):
        create_with_status(kube, d, cr(f"{group}/v1", "Widget", f"w-{i:02d}", spec={"size": i}, status=saved(i)), ns)
    return rt


def test_move_fences_the_targets_operator_which_otherwise_wins_races(
    run, kube, cluster, namespace, target, target_kube, target_world, slow_target, tmp_path
):
    group = f"{unique('mvfence')}.example.com"
    widgets_in(kube, group, namespace)
    deployment = an_operator_of(target_world, group)
    ops, op_name = deployment.split("/")
    moved_ns = unique("mvfence-b")
    move = ["move", "--from-kubeconfig", str(cluster.kubeconfig), "--to-kubeconfig", slow_target, "-n", namespace]
    operators = [Operator(target, ns, tmp_path / f"op-{ns}.log", deployment, qualified=f"widgets.{group}")
                 for ns in (namespace, moved_ns)]  # fmt: skip
    try:
        report = run(*move, "--fence", "report")

        assert report.code == ExitStatus.SUCCESS, report.err
        line = fence_lines(report.out)[deployment]
        assert "scale to 0 and back" in line and "(serviceaccount operator)" in line, report.out
        assert run("list", "-o", "json").out.strip() in ("[]", ""), "--fence report records no move"
        assert discover(target_kube).by_qualified(f"widgets.{group}") is None, "nor writes to the target"

        fenced = run(*move, "--fence", "auto", "--parallel", "4", "-o", "json")

        assert fenced.code == ExitStatus.SUCCESS, fenced.out + fenced.err
        data = json.loads(fenced.out)
        assert data["verifyProblems"] == [] and data["restore"]["fence"][0].startswith(f"fence Deployment {deployment}")
        assert operators[0].provisions() == [], "scaled to 0 while the objects had no status"
        live = target_world.get(ops, "Deployment", op_name)
        assert live["spec"]["replicas"] == 1 and ANNOTATION not in (live["metadata"].get("annotations") or {})
        moved = discover(target_kube).by_qualified(f"widgets.{group}")
        for i in range(N):
            assert target_kube.get(moved, namespace, f"w-{i:02d}")["status"] == saved(i)

        unfenced = run(*move, "--backup-name", unique("m2"), "--namespace-mapping", f"{namespace}:{moved_ns}",
                       "--parallel", "4", "-o", "json")  # fmt: skip
        assert unfenced.code == ExitStatus.SUCCESS, unfenced.out + unfenced.err
        assert operators[1].provisions(), "unfenced, the operator saw objects without their status"
    finally:
        for op in operators:
            op.stop()
        for ns in (namespace, moved_ns):
            target_kube.delete(NAMESPACES, None, ns)


def test_a_move_whose_target_rbac_cannot_be_read_stops_before_the_source_is_paused(
    run, kube, cluster, namespace, target, target_kube
):
    install_crds(kube, [crd(GROUP, "Instance")])  # a Crossplane kind: the move would pause it in the source
    d = discover(kube)
    create_with_status(kube, d, cr(f"{GROUP}/v1", "Instance", "db", spec={}, status=instance_status(0)), namespace)
    nobody = target.kubeconfig_for("sv-user-5")  # may read nothing in the target
    move = ["move", "--from-kubeconfig", str(cluster.kubeconfig), "--to-kubeconfig", str(nobody), "-n", namespace]

    refused = run(*move, "--fence", "auto")

    assert refused.code == ExitStatus.ERROR, refused.err
    errors = [line for line in refused.err.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and "cannot read the cluster's RBAC" in errors[0], refused.err
    source = kube.get(d.by_qualified(QUALIFIED), namespace, "db")
    assert not (source["metadata"].get("annotations") or {}), "the source is not paused"
    assert run("list", "-o", "json").out.strip() in ("[]", ""), "no move recorded"
