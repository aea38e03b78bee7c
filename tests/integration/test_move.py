"""`statusvault move` between two real API servers, an operator running on each side."""

from __future__ import annotations

import json

import pytest

from statusvault.errors import ExitStatus
from statusvault.kube.client import KubeClient
from statusvault.kube.discovery import discover
from statusvault.kube.transport import load_transport
from statusvault.restore.pausing import RECORD
from statusvault.testing.cluster import LocalCluster
from statusvault.testing.fixtures import create_with_status, install_crds
from tests.builders import cr, crd
from tests.integration.test_pause import GROUP, QUALIFIED, Operator, saved

N = 12
PAUSED = "crossplane.io/paused"


@pytest.fixture(scope="module")
def target():
    """A second control plane: the cluster the objects move to."""
    with LocalCluster.start() as c:
        yield c


@pytest.fixture
def moving(run, kube, namespace, tmp_path):
    install_crds(kube, [crd(GROUP, "Instance")])
    d = discover(kube)
    for i in range(N):
        body = cr(f"{GROUP}/v1", "Instance", f"db-{i:02d}", spec={"forProvider": {"region": "eu"}}, status=saved(i))
        create_with_status(kube, d, body, namespace)
    return namespace


def test_move_pauses_the_source_restores_paused_verifies_and_unpauses_the_target(
    run, kube, cluster, target, moving, tmp_path
):
    ns = moving
    target_kube = KubeClient(load_transport(str(target.kubeconfig)))
    ops = [Operator(c, ns, tmp_path / f"ops-{i}.log") for i, c in enumerate((cluster, target))]
    try:
        args = ["move", "--from-kubeconfig", str(cluster.kubeconfig), "--to-kubeconfig", str(target.kubeconfig)]
        result = run(*args, "-n", ns, "-o", "json")
        assert result.code == ExitStatus.SUCCESS, result.out + result.err
        report = json.loads(result.out)
        assert report["sourcePaused"] == N and report["verifyProblems"] == []
        assert report["restore"]["unpaused"] == N

        moved = discover(target_kube).by_qualified(QUALIFIED)
        for i in range(N):
            obj = target_kube.get(moved, ns, f"db-{i:02d}")
            assert obj["status"] == saved(i)
            assert PAUSED not in (obj["metadata"].get("annotations") or {}), "unpaused in the target"
            source = kube.get(discover(kube).by_qualified(QUALIFIED), ns, f"db-{i:02d}")
            assert source["metadata"]["annotations"][PAUSED] == "true", "the source stays paused"
        assert [op.provisions() for op in ops] == [[], []], "no operator provisioned anything, on either side"

        again = run(*args, "-n", ns)
        assert again.code == ExitStatus.SUCCESS, "a re-run of a finished move finds it done"

        aborted = run("move", "--abort", "--from-kubeconfig", str(cluster.kubeconfig), "-n", ns)
        assert aborted.code == 0 and f"{N} object(s) unpaused in the source" in aborted.out
        source = kube.get(discover(kube).by_qualified(QUALIFIED), ns, "db-03")
        assert not ({PAUSED, RECORD} & set(source["metadata"].get("annotations") or {}))
    finally:
        for op in ops:
            op.stop()


def test_move_refuses_the_same_cluster_on_both_sides(run, cluster, moving):
    result = run("move", "--from-kubeconfig", str(cluster.kubeconfig), "--to-kubeconfig", str(cluster.kubeconfig))
    assert result.code == ExitStatus.USAGE and "are the same API server" in result.err
