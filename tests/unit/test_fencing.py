"""Fencing found from RBAC: each shape of role and binding that lets a ServiceAccount write a status, and some that
do not; the action per workload; the plan as printed."""

from __future__ import annotations

from typing import Any

import pytest

from statusvault.errors import ConfigError
from statusvault.model import ResourceType
from statusvault.restore.core.pausemarkers import PauseOptions
from statusvault.restore.options import RestoreOptions, restore_options
from statusvault.restore.quiet.fencing import FenceAction, FenceTarget, Rbac, allows, plan_fencing, status_managers
from statusvault.restore.running.state import state_key

WIDGETS = ResourceType("example.com", "v1", "widgets", "Widget", True, has_status=True, custom=True)
INSTANCES = ResourceType("rds.aws.upbound.io", "v1", "instances", "Instance", True, has_status=True, custom=True)
NODES = ResourceType("example.com", "v1", "clusterthings", "ClusterThing", False, has_status=True, custom=True)
TARGETS = [FenceTarget(WIDGETS, frozenset({"apps"})), FenceTarget(NODES)]


def rule(groups=("example.com",), resources=("widgets/status",), verbs=("update",)) -> dict[str, Any]:
    return {"apiGroups": list(groups), "resources": list(resources), "verbs": list(verbs)}


def cluster_role(name: str, *rules: dict[str, Any], labels=None, aggregate=None) -> dict[str, Any]:
    role: dict[str, Any] = {"kind": "ClusterRole", "metadata": {"name": name, "labels": labels or {}}}
    role["rules"] = list(rules)
    if aggregate:
        role["aggregationRule"] = {"clusterRoleSelectors": [{"matchLabels": aggregate}]}
    return role


def role(ns: str, name: str, *rules: dict[str, Any]) -> dict[str, Any]:
    return {"kind": "Role", "metadata": {"name": name, "namespace": ns}, "rules": list(rules)}


def sa(ns: str, name: str) -> dict[str, str]:
    return {"kind": "ServiceAccount", "name": name, "namespace": ns}


def group(name: str) -> dict[str, str]:
    return {"kind": "Group", "name": name, "apiGroup": "rbac.authorization.k8s.io"}


def binding(name: str, kind: str, role_name: str, *subjects: dict[str, str], ns: str | None = None) -> dict[str, Any]:
    meta = {"name": name, **({"namespace": ns} if ns else {})}
    ref = {"apiGroup": "rbac.authorization.k8s.io", "kind": kind, "name": role_name}
    return {"metadata": meta, "roleRef": ref, "subjects": list(subjects)}


def deployment(ns: str, name: str, account: str = "", kind: str = "Deployment", labels=None) -> dict[str, Any]:
    pod = {"serviceAccountName": account} if account else {}
    meta = {"name": name, "namespace": ns, "labels": labels or {}}
    return {"kind": kind, "metadata": meta, "spec": {"template": {"spec": pod}}}


OPS = [deployment("ops", "op", "op-sa")]


def found(rbac: Rbac, workloads=OPS, targets=TARGETS, **kw) -> dict[str, Any]:
    return {c.ref: c for c in plan_fencing(rbac, workloads, targets, **kw).controllers}


def crb(role_name: str, *subjects: dict[str, str]) -> dict[str, Any]:
    return binding(f"b-{role_name}", "ClusterRole", role_name, *subjects)


OP_SA = sa("ops", "op-sa")


def bound(rule_: dict[str, Any], subject: dict[str, str] = OP_SA) -> Rbac:
    """A ClusterRole with the rule, bound cluster-wide to the subject."""
    return Rbac(cluster_roles=(cluster_role("w", rule_),), cluster_role_bindings=(crb("w", subject),))


def in_namespace(ns: str, kind: str = "Role") -> Rbac:
    """A Role (or ClusterRole) with the rule, bound to the operator's account by a RoleBinding in ns."""
    roles = {"roles": (role(ns, "w", rule()),)} if kind == "Role" else {"cluster_roles": (cluster_role("w", rule()),)}
    return Rbac(**roles, role_bindings=(binding("b", kind, "w", OP_SA, ns=ns),))  # type: ignore[arg-type]


def aggregating(labels: dict[str, str]) -> Rbac:
    roles = (cluster_role("agg", aggregate={"agg": "true"}), cluster_role("part", rule(), labels=labels))
    return Rbac(cluster_roles=roles, cluster_role_bindings=(crb("agg", OP_SA),))


@pytest.mark.parametrize(
    "rbac",
    [
        pytest.param(bound(rule()), id="clusterrole"),
        pytest.param(in_namespace("apps"), id="role-in-the-restored-namespace"),
        pytest.param(in_namespace("apps", "ClusterRole"), id="clusterrole-by-rolebinding"),
        pytest.param(bound(rule(resources=("*",))), id="resources-wildcard"),
        pytest.param(bound(rule(verbs=("*",))), id="verbs-wildcard"),
        pytest.param(bound(rule(groups=("*",), resources=("*/status",), verbs=("patch",))), id="groups-wildcard"),
        pytest.param(aggregating({"agg": "true"}), id="aggregated"),
        pytest.param(bound(rule(), group("system:serviceaccounts")), id="group-all-serviceaccounts"),
        pytest.param(bound(rule(), group("system:serviceaccounts:ops")), id="group-of-the-namespace"),
        pytest.param(bound(rule(), {"kind": "User", "name": "system:serviceaccount:ops:op-sa"}), id="user-name"),
    ],
)
def test_found(rbac):
    controllers = found(rbac)
    assert list(controllers) == ["ops/deployment/op"]
    c = controllers["ops/deployment/op"]
    assert "widgets.example.com" in c.resources
    assert c.action == FenceAction.SCALE and c.service_account == "op-sa"


@pytest.mark.parametrize(
    "rbac",
    [
        pytest.param(bound(rule(resources=("widgets",))), id="main-resource-only"),
        pytest.param(bound(rule(verbs=("get", "list", "watch"))), id="read-only"),
        pytest.param(bound(rule(groups=("other.io",))), id="other-group"),
        pytest.param(bound(rule(), sa("ops", "another")), id="another-serviceaccount"),
        pytest.param(bound(rule(), group("system:serviceaccounts:elsewhere")), id="group-of-another-namespace"),
        pytest.param(bound(rule(), group("developers")), id="a-user-group"),
        pytest.param(in_namespace("other"), id="role-in-a-namespace-not-restored"),
        pytest.param(aggregating({"agg": "no"}), id="aggregation-selecting-nothing"),
        pytest.param(Rbac(cluster_role_bindings=(crb("missing", OP_SA),)), id="binding-to-a-missing-role"),
    ],
)
def test_not_found(rbac):
    assert found(rbac) == {}


def test_a_rolebinding_does_not_grant_a_cluster_scoped_status():
    rbac = Rbac(
        cluster_roles=(cluster_role("w", rule(resources=("clusterthings/status",))),),
        role_bindings=(binding("b", "ClusterRole", "w", sa("ops", "op-sa"), ns="apps"),),
    )
    assert found(rbac) == {}
    assert found(bound(rule(resources=("clusterthings/status",))))["ops/deployment/op"].resources == (
        "clusterthings.example.com",
    )


@pytest.mark.parametrize(
    ("rule_", "allowed"),
    [
        (rule(), True),
        (rule(verbs=("patch",)), True),
        (rule(verbs=("create",)), False),
        (rule(resources=("widgets/scale",)), False),
        (rule(resources=("*/scale",)), False),
        (rule(groups=("",)), False),
        ({"nonResourceURLs": ["/healthz"], "verbs": ["*"]}, False),
        ({**rule(), "resourceNames": ["one"]}, True),
    ],
)
def test_allows(rule_, allowed):
    assert allows(rule_, WIDGETS) is allowed


EVERY_SA = Rbac(cluster_roles=(cluster_role("w", rule(groups=("*",), resources=("*",))),),
                cluster_role_bindings=(crb("w", group("system:serviceaccounts")),))  # fmt: skip


def test_what_is_never_fenced_and_what_is_only_reported():
    workloads = [
        deployment("kube-system", "kcm", "kcm"),
        deployment("backup", "statusvault", "sv", labels={"app.kubernetes.io/name": "statusvault"}),
        deployment("ops", "kept", "k"),
        deployment("ops", "agent", "a", kind="DaemonSet"),
        deployment("ops", "db", "d", kind="StatefulSet"),
    ]
    plan = plan_fencing(EVERY_SA, workloads, TARGETS, exclude=["ops/kept"])
    actions = {c.ref: (c.action, c.why) for c in plan.controllers}
    assert actions["kube-system/deployment/kcm"][0] == FenceAction.EXCLUDE
    assert actions["backup/deployment/statusvault"] == (FenceAction.EXCLUDE, "statusvault itself: never fenced")
    assert actions["ops/deployment/kept"] == (FenceAction.EXCLUDE, "--fence-exclude")
    assert actions["ops/daemonset/agent"] == (
        FenceAction.REPORT,
        "a DaemonSet cannot be scaled to 0: NOT fenced, only reported",
    )
    assert actions["ops/statefulset/db"][0] == FenceAction.SCALE
    assert plan.scaled == ("ops/statefulset/db",)


def test_a_pause_convention_fences_without_scaling_a_daemonset_too():
    targets = [FenceTarget(INSTANCES, frozenset({"apps"}))]
    workloads = [deployment("ops", "provider", "p"), deployment("ops", "agent", "a", kind="DaemonSet")]
    plan = plan_fencing(EVERY_SA, workloads, targets)
    assert [c.action for c in plan.controllers] == [FenceAction.PAUSE, FenceAction.PAUSE]
    assert plan.pauses and plan.scaled == ()
    assert "crossplane.io/paused=true" in plan.controllers[0].why


def test_a_generic_marker_counts_as_a_convention():
    pause = PauseOptions(annotation=("example.com/paused", "yes"), resources=("widgets.example.com",))
    plan = plan_fencing(EVERY_SA, OPS, [FenceTarget(WIDGETS, frozenset({"apps"}))], pause=pause)
    assert plan.controllers[0].action == FenceAction.PAUSE


def test_managers_are_matched_to_controllers_and_the_rest_reported():
    objects = [
        {
            "metadata": {
                "managedFields": [
                    {"manager": "op-sa-manager", "subresource": "status", "fieldsV1": {"f:status": {}}},
                    {"manager": "kubectl", "operation": "Update", "fieldsV1": {"f:spec": {}}},
                    {"manager": "legacy-writer", "operation": "Update", "fieldsV1": {"f:status": {}}},
                ]
            }
        },
        {"metadata": {"managedFields": [{"manager": "archived-writer", "operation": "Update"}]}},  # kept by a backup
        {"metadata": {"managedFields": [{"manager": "outside-operator", "subresource": "status"}]}},
        {"metadata": {"managedFields": [{"manager": "statusvault-restore-1", "subresource": "status"}]}},
    ]
    managers = status_managers(objects)
    assert managers == {
        "op-sa-manager",
        "legacy-writer",
        "archived-writer",
        "outside-operator",
        "statusvault-restore-1",
    }
    plan = plan_fencing(EVERY_SA, OPS, TARGETS, status_managers={"widgets.example.com": managers})
    assert plan.controllers[0].managers == ("op-sa-manager",)
    assert plan.unmatched == ("archived-writer", "legacy-writer", "outside-operator")


def test_the_plan_says_why_and_what():
    plan = plan_fencing(bound(rule()), OPS, TARGETS, status_managers={"widgets.example.com": ["elsewhere"]})
    assert plan.lines() == [
        "fence Deployment ops/op (serviceaccount op-sa): scale to 0 and back: no pause convention for "
        "widgets.example.com",
        "  may write widgets.example.com/status: ClusterRole w rule [apiGroups example.com; resources "
        "widgets/status; verbs update] via ClusterRoleBinding b-w (subject serviceaccount ops/op-sa)",
        "fence: field manager 'elsewhere' wrote status of the objects in the cluster, but no workload found here may: "
        "a controller outside the cluster, or one using a user's credentials? (not fenced)",
    ]
    assert plan_fencing(Rbac(), OPS, TARGETS).lines() == [
        "fence: no controller in the cluster may write the status of the restored resources"
    ]


def test_aggregation_is_named_in_the_reason():
    (grant,) = found(aggregating({"agg": "true"}))["ops/deployment/op"].grants
    assert grant.role == "ClusterRole agg (aggregating part)"


def test_the_plan_as_data():
    plan = plan_fencing(bound(rule()), [*OPS, deployment("ops", "agent", "op-sa", kind="DaemonSet")], TARGETS)
    data = plan.to_dict()
    assert [(c["kind"], c["name"], c["action"]) for c in data["controllers"]] == [
        ("DaemonSet", "agent", "only reported"),
        ("Deployment", "op", "scale to 0 and back"),
    ]
    assert data["controllers"][1]["grants"] == [
        {
            "resource": "widgets.example.com",
            "role": "ClusterRole w",
            "rule": "[apiGroups example.com; resources widgets/status; verbs update]",
            "binding": "ClusterRoleBinding b-w",
            "subject": "serviceaccount ops/op-sa",
        }
    ]
    assert (data["unmatchedManagers"], data["warnings"]) == ([], [])


def test_fencing_does_not_change_which_restore_is_resumed():
    plain = state_key("b", ("store", "server"), RestoreOptions())
    assert state_key("b", ("store", "server"), RestoreOptions(fence="auto", fence_exclude=("ops/op",))) == plain


@pytest.mark.parametrize(
    ("values", "error"),
    [
        ({"fence": "always"}, "fence must be one of none, auto, report, best-effort, not 'always'"),
        ({"fence": "auto", "fence_exclude": "ops"}, "invalid --fence-exclude entry 'ops': expected NAMESPACE/NAME"),
        ({"fence_exclude": "ops/op"}, "--fence-exclude needs --fence"),
    ],
)
def test_fence_options_are_checked(values, error):
    with pytest.raises(ConfigError, match=error):
        restore_options(values)
    assert restore_options({"fence": "best-effort", "fence_exclude": "a/b,c/d"}).fence_exclude == ("a/b", "c/d")
