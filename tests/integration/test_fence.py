"""`restore --fence` on the real API server: operators bound to a status in each way RBAC allows are found (and one
that may not write it is not); `--fence auto` scales them to 0 and back, or pauses the objects of one with a known
convention, so a racing operator (tests/operator.py) never wins; `report` writes nothing; RBAC the user cannot
read stops `auto` before any write and is a warning under `best-effort`."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from typing import Any

import pytest

from statusvault.errors import ExitStatus
from statusvault.kube.client import KubeClient
from statusvault.kube.discovery import discover
from statusvault.testing.fixtures import create_with_status, ensure_namespace, install_crds
from statusvault.vocabulary.kinds import NAMESPACES
from tests.builders import cr, crd, unique
from tests.integration.crs.servers import wait_gone
from tests.integration.test_pause import Operator, assert_raced_and_named

pytestmark = pytest.mark.version_sensitive(
    "status writers are read from RBAC and managedFields, whose `subresource` field exists from 1.22"
)
RBAC = "rbac.authorization.k8s.io"
N = 12


class Cluster:
    """Creates RBAC objects and workloads, and deletes the cluster-scoped ones and the namespaces afterwards."""

    def __init__(self, kube: KubeClient):
        self.kube, self.d = kube, discover(kube)
        self.cluster_scoped: list[tuple[str, str]] = []
        self.namespaces: list[str] = []

    def namespace(self, prefix: str) -> str:
        ns = unique(prefix)
        ensure_namespace(self.kube, ns)
        self.namespaces.append(ns)
        return ns

    def cluster_role(self, name: str, rules: list[dict[str, Any]], labels=None, aggregate=None) -> None:
        body: dict[str, Any] = {"apiVersion": f"{RBAC}/v1", "kind": "ClusterRole", "rules": rules}
        body["metadata"] = {"name": name, "labels": labels or {}}
        if aggregate:
            body["aggregationRule"] = {"clusterRoleSelectors": [{"matchLabels": aggregate}]}
        self.kube.create(self.d.resolve(f"clusterroles.{RBAC}"), None, body)
        self.cluster_scoped.append((f"clusterroles.{RBAC}", name))

    def bind(self, name: str, kind: str, role: str, subject: dict[str, str], ns: str | None = None) -> None:
        """A ClusterRoleBinding (ns None) or a RoleBinding in ns, to a Role or ClusterRole."""
        body = {
            "apiVersion": f"{RBAC}/v1",
            "kind": "RoleBinding" if ns else "ClusterRoleBinding",
            "metadata": {"name": name},
            "roleRef": {"apiGroup": RBAC, "kind": kind, "name": role},
            "subjects": [subject],
        }
        resource = f"rolebindings.{RBAC}" if ns else f"clusterrolebindings.{RBAC}"
        self.kube.create(self.d.resolve(resource), ns, body)
        if not ns:
            self.cluster_scoped.append((resource, name))

    def role(self, ns: str, name: str, rules: list[dict[str, Any]]) -> None:
        body = {"apiVersion": f"{RBAC}/v1", "kind": "Role", "metadata": {"name": name}, "rules": rules}
        self.kube.create(self.d.resolve(f"roles.{RBAC}"), ns, body)

    def workload(self, ns: str, name: str, account: str, kind: str = "Deployment", replicas: int = 2) -> None:
        labels = {"app": name}
        pod = {"serviceAccountName": account, "containers": [{"name": "c", "image": "op:1"}]}
        spec: dict[str, Any] = {"selector": {"matchLabels": labels}, "template": {"metadata": {"labels": labels}}}
        spec["template"]["spec"] = pod
        if kind != "DaemonSet":
            spec["replicas"] = replicas
        if kind == "StatefulSet":
            spec["serviceName"] = name
        body = {"apiVersion": "apps/v1", "kind": kind, "metadata": {"name": name}, "spec": spec}
        self.kube.create(self.d.resolve(f"{kind.lower()}s.apps"), ns, body)

    def get(self, ns: str, kind: str, name: str) -> dict[str, Any]:
        return self.kube.get(self.d.resolve(f"{kind.lower()}s.apps"), ns, name)

    def cleanup(self) -> None:
        for resource, name in reversed(self.cluster_scoped):
            self.kube.delete(self.d.resolve(resource), None, name)
        for ns in self.namespaces:
            self.kube.delete(NAMESPACES, None, ns)


@pytest.fixture
def world(kube) -> Iterator[Cluster]:
    c = Cluster(kube)
    yield c
    c.cleanup()


def sa(ns: str, name: str) -> dict[str, str]:
    return {"kind": "ServiceAccount", "name": name, "namespace": ns}


def status_rule(group: str, resources=("widgets/status",), verbs=("update",), groups=None) -> dict[str, Any]:
    return {"apiGroups": list(groups or [group]), "resources": list(resources), "verbs": list(verbs)}


def backed_up_widgets(run, kube, group: str, ns: str, kind: str = "Widget") -> Any:
    """N objects with a saved status, backed up (their resource only), then deleted (the namespace stays)."""
    rt = install_crds(kube, [crd(group, kind)]).by_qualified(f"{kind.lower()}s.{group}")
    d = discover(kube)
    for i in range(N):
        create_with_status(kube, d, cr(f"{group}/v1", kind, f"w-{i:02d}", spec={"size": i}, status=saved(i)), ns)
    assert run("backup", "b", "-n", ns, "--include-resources", rt.qualified, "--no-include-crds").code == 0
    for i in range(N):
        kube.delete(rt, ns, f"w-{i:02d}")
    for i in range(N):
        wait_gone(kube, rt, ns, f"w-{i:02d}")
    return rt


def saved(i: int) -> dict[str, str]:
    return {"externalID": f"ext-{i:04d}"}


def fence_lines(text: str) -> dict[str, str]:
    """Each fenced workload's line of the plan, by NAMESPACE/NAME."""
    out = {}
    for line in text.splitlines():
        if line.startswith("fence ") and " (serviceaccount " in line:
            out[line.split()[2]] = line
    return out


def test_operators_bound_each_way_are_found_and_the_one_not_allowed_is_not(run, kube, namespace, world):
    group = f"{unique('fence')}.example.com"
    widgets = backed_up_widgets(run, kube, group, namespace)
    ops, grouped = world.namespace("fence-ops"), world.namespace("fence-grp")
    name = unique("fence-r")
    world.role(namespace, name, [status_rule(group)])  # a Role in the restored namespace
    world.bind(name, "Role", name, sa(ops, "role-sa"), ns=namespace)
    world.cluster_role(name, [status_rule(group, verbs=("patch",))])
    world.bind(name, "ClusterRole", name, sa(ops, "cluster-sa"))
    world.cluster_role(f"{name}-agg", [], aggregate={name: "true"})  # aggregates the next one's rules
    world.cluster_role(f"{name}-part", [status_rule(group)], labels={name: "true"})
    world.bind(f"{name}-agg", "ClusterRole", f"{name}-agg", sa(ops, "agg-sa"))
    world.bind(f"{name}-grp", "ClusterRole", name, {"kind": "Group", "name": f"system:serviceaccounts:{grouped}"})
    world.cluster_role(f"{name}-wild", [status_rule(group, resources=("*",), verbs=("*",), groups=("*",))])
    world.bind(f"{name}-wild", "ClusterRole", f"{name}-wild", sa(ops, "wild-sa"))
    world.cluster_role(f"{name}-ns", [status_rule(group, resources=("*/status",))])
    world.bind(f"{name}-ns", "ClusterRole", f"{name}-ns", sa(ops, "ns-sa"), ns=namespace)  # counts in namespace
    world.bind(f"{name}-ns", "ClusterRole", f"{name}-ns", sa(ops, "elsewhere-sa"), ns=ops)  # nothing restored there
    world.bind(f"{name}-user", "ClusterRole", name, {"kind": "User", "apiGroup": RBAC,
                                                     "name": f"system:serviceaccount:{ops}:user-sa"})  # fmt: skip
    world.cluster_role(f"{name}-no", [status_rule(group, resources=("widgets",), verbs=("get", "update", "patch"))])
    world.bind(f"{name}-no", "ClusterRole", f"{name}-no", sa(ops, "denied-sa"))
    for workload, account, kind in [
        ("by-role", "role-sa", "Deployment"),
        ("by-clusterrole", "cluster-sa", "Deployment"),
        ("by-aggregation", "agg-sa", "Deployment"),
        ("by-wildcard", "wild-sa", "StatefulSet"),
        ("agent", "cluster-sa", "DaemonSet"),
        ("kept", "cluster-sa", "Deployment"),
        ("denied", "denied-sa", "Deployment"),
        ("by-clusterrole-in-ns", "ns-sa", "Deployment"),
        ("elsewhere", "elsewhere-sa", "Deployment"),
        ("by-user", "user-sa", "Deployment"),
    ]:
        world.workload(ops, workload, account, kind)
    world.workload(grouped, "by-group", "anyone")

    report = run("restore", "b", "--fence", "report", "--fence-exclude", f"{ops}/kept")

    assert report.code == ExitStatus.SUCCESS, report.err
    assert kube.list_names(widgets, namespace) == set(), "--fence report writes nothing"
    found = fence_lines(report.out)
    assert set(found) == {f"{ops}/{n}" for n in ("by-role", "by-clusterrole", "by-aggregation", "by-wildcard",
                                                  "agent", "kept", "by-clusterrole-in-ns", "by-user")} | {
                                                  f"{grouped}/by-group"}, report.out  # fmt: skip
    for n in ("by-role", "by-clusterrole", "by-aggregation"):
        assert "scale to 0 and back" in found[f"{ops}/{n}"], found
    assert "only reported" in found[f"{ops}/agent"]
    assert "excluded: --fence-exclude" in found[f"{ops}/kept"]
    assert f"via RoleBinding {namespace}/{name}" in report.out
    assert f"ClusterRole {name}-agg (aggregating {name}-part)" in report.out
    assert f"subject group system:serviceaccounts:{grouped}" in report.out
    assert f"resources */status; verbs update] via RoleBinding {namespace}/{name}-ns" in report.out
    assert f"subject user system:serviceaccount:{ops}:user-sa" in report.out
    as_data = json.loads(run("restore", "b", "--fence", "report", "-o", "json").out)
    assert {f"{c['namespace']}/{c['name']}" for c in as_data["controllers"]} == set(found)

    before = {
        n: world.get(ops, k, n)["metadata"]["generation"] for n, k in [("kept", "Deployment"), ("denied", "Deployment")]
    }
    result = run("restore", "b", "--fence", "auto", "--fence-exclude", f"{ops}/kept")

    assert result.code == ExitStatus.SUCCESS, result.err
    assert "Fencing:" in result.out and f"fence Deployment {ops}/by-role " in result.out
    for i in range(N):
        assert kube.get(widgets, namespace, f"w-{i:02d}")["status"] == saved(i)
    for ns, n, kind in [
        (ops, "by-role", "Deployment"),
        (ops, "by-wildcard", "StatefulSet"),
        (grouped, "by-group", "Deployment"),
    ]:
        live = world.get(ns, kind, n)
        assert live["spec"]["replicas"] == 2 and live["metadata"]["generation"] >= 3, (n, "scaled to 0 and back")
        assert "statusvault.io/replicas-before-restore" not in (live["metadata"].get("annotations") or {})
    after = {
        n: world.get(ops, k, n)["metadata"]["generation"] for n, k in [("kept", "Deployment"), ("denied", "Deployment")]
    }
    assert after == before, "neither the excluded one nor the one not allowed was touched"


@pytest.fixture
def operator(cluster, tmp_path):
    started: list[Operator] = []

    def _start(qualified: str, namespace: str, deployment: str = "") -> Operator:
        log = tmp_path / f"provisions-{len(started)}.log"
        started.append(Operator(cluster, namespace, log, deployment, qualified=qualified))
        return started[-1]

    yield _start
    for op in started:
        op.stop()


def slow_status(method: str, path: str, body: bytes | None) -> None:
    """Each status write 0.3 s late: the race users hit, made certain."""
    if path.split("?")[0].endswith("/status"):
        time.sleep(0.3)


def an_operator_of(world: Cluster, group: str, resources=("widgets/status",), replicas: int = 1) -> str:
    """A Deployment (one replica) whose ServiceAccount may write the status: NAMESPACE/NAME."""
    ops, name = world.namespace("fence-op"), unique("fence-op")
    world.cluster_role(name, [status_rule(group, resources=resources)])
    world.bind(name, "ClusterRole", name, sa(ops, "operator"))
    world.workload(ops, "op", "operator", replicas=replicas)
    settled(world, ops, "op")
    return f"{ops}/op"


def settled(world: Cluster, ns: str, name: str) -> None:
    """Until its controller stops writing its status (a kill at the count's PATCH must meet no 409)."""
    seen, same, deadline = "", 0, time.monotonic() + 30
    while same < 4 and time.monotonic() < deadline:
        rv = world.get(ns, "Deployment", name)["metadata"]["resourceVersion"]
        same, seen = (same + 1 if rv == seen else 0), rv
        time.sleep(0.3)


def test_a_racing_operator_wins_without_fencing_and_loses_every_race_with_it(
    run, kube, namespace, world, operator, proxied
):
    group = f"{unique('race')}.example.com"
    widgets = backed_up_widgets(run, kube, group, namespace)
    deployment = an_operator_of(world, group)
    op = operator(widgets.qualified, namespace, deployment)
    _, kubeconfig = proxied(0.0, before=slow_status)

    fenced = run("restore", "b", "--fence", "auto", "--parallel", "4", "-o", "json", kubeconfig=kubeconfig)

    assert fenced.code == ExitStatus.SUCCESS, fenced.err
    assert op.provisions() == [], "stopped while objects had no status; after, every one has its ID"
    (line,) = json.loads(fenced.out)["fence"][:1]
    assert line.startswith(f"fence Deployment {deployment} (serviceaccount operator): scale to 0 and back")
    ns, name = deployment.split("/")
    assert world.get(ns, "Deployment", name)["spec"]["replicas"] == 1
    for i in range(N):
        assert kube.get(widgets, namespace, f"w-{i:02d}")["status"] == saved(i)

    for i in range(N):  # the same restore again without fencing: the operator wins some races
        kube.delete(widgets, namespace, f"w-{i:02d}")
    for i in range(N):
        wait_gone(kube, widgets, namespace, f"w-{i:02d}")
    unfenced = run("restore", "b", "--parallel", "4", "-o", "json", kubeconfig=kubeconfig)
    assert_raced_and_named(unfenced, op)


def test_an_operator_with_a_pause_convention_is_fenced_by_pausing_not_scaling(run, kube, namespace, world, operator):
    group = "rds.aws.upbound.io"  # a Crossplane provider's: its objects are paused with crossplane.io/paused
    instances = backed_up_widgets(run, kube, group, namespace, kind="Instance")
    deployment = an_operator_of(world, group, resources=("instances/status",))
    ns, name = deployment.split("/")
    generation = world.get(ns, "Deployment", name)["metadata"]["generation"]
    op = operator(instances.qualified, namespace, deployment)

    result = run("restore", "b", "--fence", "auto", "-o", "json")

    assert result.code == ExitStatus.SUCCESS, result.err
    lines = json.loads(result.out)["fence"]
    mine = [line for line in lines if line.startswith(f"fence Deployment {deployment} ")]
    assert mine and "pause its objects" in mine[0] and "crossplane.io/paused=true" in mine[0], lines
    assert json.loads(result.out)["unpaused"] == N
    assert op.provisions() == []
    assert world.get(ns, "Deployment", name)["metadata"]["generation"] == generation, "not scaled"
    for i in range(N):
        obj = kube.get(instances, namespace, f"w-{i:02d}")
        assert obj["status"] == saved(i) and "crossplane.io/paused" not in (obj["metadata"].get("annotations") or {})


def test_a_fence_exclude_naming_no_workload_is_refused_before_any_write(run, kube, namespace, world):
    """A typo in --fence-exclude would fence the very operator the user meant to keep running."""
    group = f"{unique('fexcl')}.example.com"
    widgets = backed_up_widgets(run, kube, group, namespace)
    ops = world.namespace("fexcl-ops")
    name = unique("fexcl-r")
    world.cluster_role(name, [status_rule(group)])
    world.bind(name, "ClusterRole", name, sa(ops, "op-sa"))
    world.workload(ops, "operator", "op-sa")

    for fence in ("auto", "report"):
        refused = run("restore", "b", "--fence", fence, "--fence-exclude", f"{ops}/operatr")
        assert refused.code == ExitStatus.ERROR, refused.out + refused.err
        errors = [line for line in refused.err.splitlines() if line.startswith("error:")]
        assert errors == [
            f"error: --fence-exclude: {ops}/operatr names no Deployment, StatefulSet or DaemonSet in the cluster "
            "(nothing was written): give NAMESPACE/NAME of a workload to keep running"
        ]
        assert kube.list_names(widgets, namespace) == set(), "nothing written"
    deployments = discover(kube).resolve("deployments.apps")
    assert kube.get(deployments, ops, "operator")["spec"]["replicas"] == 2, "not fenced"

    kept = run("restore", "b", "--fence", "auto", "--fence-exclude", f"{ops}/operator")
    assert kept.code == ExitStatus.SUCCESS, kept.err
    assert kube.get(deployments, ops, "operator")["spec"]["replicas"] == 2
    assert kube.get(widgets, namespace, "w-00")["status"] == saved(0)


def test_rbac_the_user_cannot_read_stops_auto_before_any_write_and_warns_under_best_effort(
    run, kube, cluster, namespace, grant
):
    group = f"{unique('norbac')}.example.com"
    widgets = backed_up_widgets(run, kube, group, namespace)
    user = "sv-user-5"
    verbs = ["get", "list", "create"]
    grant(namespace, user, [status_rule(group, resources=("widgets",), verbs=verbs), status_rule(group)])
    kubeconfig = cluster.kubeconfig_for(user)

    refused = run("restore", "b", "--fence", "auto", kubeconfig=kubeconfig)

    assert refused.code == ExitStatus.ERROR, refused.err
    errors = [line for line in refused.err.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and "cannot read the cluster's RBAC" in errors[0] and "--fence best-effort" in errors[0]
    assert kube.list_names(widgets, namespace) == set(), "nothing written"

    going_on = run("restore", "b", "--fence", "best-effort", kubeconfig=kubeconfig)
    assert going_on.code == ExitStatus.SUCCESS, going_on.err
    assert "fence: warning: cannot read the cluster's RBAC" in going_on.out and "NOTHING was fenced" in going_on.out
    assert "no controller in the cluster may write" not in going_on.out, "it could not know: it did not read RBAC"
    for i in range(N):
        assert kube.get(widgets, namespace, f"w-{i:02d}")["status"] == saved(i)


def test_the_plan_names_the_status_managers_the_backup_recorded_and_the_restore_never_sends_them(
    run, kube, namespace, world, tmp_path
):
    group = f"{unique('mgr')}.example.com"
    widgets = install_crds(kube, [crd(group, "Widget")]).by_qualified(f"widgets.{group}")
    writers = {"w-00": "status-op-controller", "w-01": "status-op-controller", "w-02": "remote-syncer"}
    for name, manager in writers.items():
        created = kube.create(widgets, namespace, cr(f"{group}/v1", "Widget", name, spec={"size": 1}))
        kube.replace(widgets, namespace, name, {**created, "status": saved(0)}, sub="status", manager=manager)
    assert run("backup", "b", "-n", namespace, "--include-resources", widgets.qualified, "--no-include-crds").code == 0
    for name in writers:  # the cluster's objects gone: only the backup can name the managers
        kube.delete(widgets, namespace, name)
        wait_gone(kube, widgets, namespace, name)
    deployment = an_operator_of(world, group)  # serviceaccount "operator", Deployment "op"

    report = run("restore", "b", "--fence", "report", "-o", "json")

    assert report.code == ExitStatus.SUCCESS, report.err
    plan = json.loads(report.out)
    (mine,) = [c for c in plan["controllers"] if f"{c['namespace']}/{c['name']}" == deployment]
    assert mine["managers"] == ["status-op-controller"] and plan["managersFrom"] == "backup"
    assert plan["unmatchedManagers"] == ["remote-syncer"], "a manager no workload here stands for is reported"
    text = run("restore", "b", "--fence", "report").out
    assert "wrote status of the objects in the backup as field manager 'status-op-controller'" in text
    assert "field manager 'remote-syncer' wrote status of the objects in the backup, but no workload" in text

    restored = run("restore", "b", "--fence", "auto")

    assert restored.code == ExitStatus.SUCCESS, restored.err
    for name in writers:
        managers = {e["manager"] for e in kube.get(widgets, namespace, name)["metadata"]["managedFields"]}
        assert not managers & set(writers.values()), "the backup's managers are never sent: the server names ours"
