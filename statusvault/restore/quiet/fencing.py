"""Which controllers to fence for a restore, found from RBAC: a pure plan over plain RBAC and workload objects.

A controller can only rewrite a restored status if it may `update` or `patch` `<resource>/status`. The RBAC
objects say which ServiceAccounts may (rules naming the resource's status, `*` resources, verbs or API groups,
aggregated ClusterRoles, bindings to ServiceAccounts, to `system:serviceaccounts[:NS]` or `system:authenticated`,
RoleBindings only in their namespace); the workloads say which Deployments, StatefulSets and DaemonSets run as
them. Each one found is fenced by a pause convention its resources have, else scaled to 0 and back; a DaemonSet
is only reported. Status managers recorded on objects (managedFields with subresource "status") are reported too.
"""

from __future__ import annotations

import dataclasses
import enum
import re
from collections.abc import Iterable, Mapping
from typing import Any

from statusvault.model import KubeObject, ResourceType
from statusvault.restore.core.pausemarkers import PauseOptions

WRITE_VERBS = frozenset(("update", "patch", "*"))
SYSTEM_NAMESPACES = frozenset(("kube-system",))  # the API server's and the control plane's own controllers
ALL_SERVICE_ACCOUNTS = "system:serviceaccounts"
EVERYONE = ("system:authenticated",)
SELF_LABEL = ("app.kubernetes.io/name", "statusvault")


class FenceAction(enum.StrEnum):
    SCALE = "scale to 0 and back"
    PAUSE = "pause its objects"
    REPORT = "only reported"
    EXCLUDE = "excluded"


@dataclasses.dataclass(frozen=True)
class Rbac:
    """The RBAC objects as listed (plain dicts)."""

    cluster_roles: tuple[KubeObject, ...] = ()
    roles: tuple[KubeObject, ...] = ()
    cluster_role_bindings: tuple[KubeObject, ...] = ()
    role_bindings: tuple[KubeObject, ...] = ()


@dataclasses.dataclass(frozen=True)
class FenceTarget:
    """A resource whose status the restore writes, and the namespaces it writes it in (empty: cluster-scoped)."""

    rt: ResourceType
    namespaces: frozenset[str] = frozenset()


@dataclasses.dataclass(frozen=True)
class Grant:
    """Why a ServiceAccount may write a resource's status: the rule, its role, and the binding."""

    resource: str  # qualified
    role: str  # "ClusterRole NAME" or "Role NS/NAME", aggregated ones named with what they aggregate
    rule: str
    binding: str
    subject: str

    def describe(self) -> str:
        return f"{self.role} rule {self.rule} via {self.binding} (subject {self.subject})"


@dataclasses.dataclass(frozen=True)
class Operator:
    """A workload (an operator, in the fenced sense) whose RBAC lets it write the restored statuses."""

    kind: str  # Deployment | StatefulSet | DaemonSet
    namespace: str
    name: str
    service_account: str
    grants: tuple[Grant, ...]
    managers: tuple[str, ...]  # status managers recorded on the objects that name this controller
    action: FenceAction
    why: str  # why this action

    @property
    def ref(self) -> str:
        return f"{self.namespace}/{self.kind.lower()}/{self.name}"

    @property
    def resources(self) -> tuple[str, ...]:
        return tuple(sorted({g.resource for g in self.grants}))


@dataclasses.dataclass(frozen=True)
class FencePlan:
    controllers: tuple[Operator, ...] = ()
    managers: Mapping[str, tuple[str, ...]] = dataclasses.field(default_factory=dict)  # resource -> status managers
    unmatched: tuple[str, ...] = ()  # status managers no workload found here stands for
    warnings: tuple[str, ...] = ()
    managers_from: str = "cluster"  # where the managers were read: "backup" (format 1.2 on), "cluster", ...
    rbac_read: bool = True  # False: --fence best-effort could not read RBAC, so it knows nothing of the writers

    def acting(self, action: FenceAction) -> list[Operator]:
        return [c for c in self.controllers if c.action == action]

    @property
    def scaled(self) -> tuple[str, ...]:
        """NAMESPACE/KIND/NAME of the workloads to scale to 0, as --scale-down takes them."""
        return tuple(c.ref for c in self.acting(FenceAction.SCALE))

    @property
    def pauses(self) -> bool:
        return bool(self.acting(FenceAction.PAUSE))

    def to_dict(self) -> dict[str, Any]:
        """The plan for -o json/yaml."""
        return {
            "controllers": [
                {
                    "kind": c.kind,
                    "namespace": c.namespace,
                    "name": c.name,
                    "serviceAccount": c.service_account,
                    "action": str(c.action),
                    "why": c.why,
                    "grants": [dataclasses.asdict(g) for g in c.grants],
                    "managers": list(c.managers),
                }
                for c in self.controllers
            ],
            "unmatchedManagers": list(self.unmatched),
            "managersFrom": self.managers_from,
            "warnings": list(self.warnings),
            "rbacRead": self.rbac_read,
        }

    def lines(self) -> list[str]:
        """The plan as the user reads it: each controller, why it was found, and what is done to it."""
        out = []
        for c in self.controllers:
            out.append(
                f"fence {c.kind} {c.namespace}/{c.name} (serviceaccount {c.service_account}): {c.action}: {c.why}"
            )
            out += [f"  may write {g.resource}/status: {g.describe()}" for g in c.grants]
            out += [
                f"  wrote status of the objects in the {self.managers_from} as field manager {m!r}" for m in c.managers
            ]
        for m in self.unmatched:
            out.append(
                f"fence: field manager {m!r} wrote status of the objects in the {self.managers_from}, but no workload "
                "found here may: "
                "a controller outside the cluster, or one using a user's credentials? (not fenced)"
            )
        if self.rbac_read and not self.controllers and not self.unmatched:
            out.append("fence: no controller in the cluster may write the status of the restored resources")
        return out + [f"fence: warning: {w}" for w in self.warnings]


def plan_fencing(
    rbac: Rbac,
    workloads: Iterable[KubeObject],
    targets: Iterable[FenceTarget],
    *,
    status_managers: Mapping[str, Iterable[str]] | None = None,
    exclude: Iterable[str] = (),
    pause: PauseOptions | None = None,
) -> FencePlan:
    """The controllers that may write the targets' status, each with its fencing. `exclude`: NS/NAME of workloads
    the user keeps running; `status_managers`: per resource, the managers that wrote its objects' status."""
    targets = list(targets)
    grants = service_account_grants(rbac, targets)
    managers = {r: tuple(sorted(set(m))) for r, m in (status_managers or {}).items() if m}
    excluded = set(exclude)
    controllers = []
    for obj in workloads:
        ns, name = obj["metadata"].get("namespace", ""), obj["metadata"]["name"]
        sa = _service_account(obj)
        found = grants_of(grants, ns, sa)
        if not found:
            continue
        named = _managers_naming(managers, {g.resource for g in found}, (name, sa))
        action, why = _action(obj, targets, found, excluded, pause or PauseOptions(auto=True))
        controllers.append(Operator(obj.get("kind", ""), ns, name, sa, tuple(found), named, action, why))
    matched = {m for c in controllers for m in c.managers}
    unmatched = sorted({m for ms in managers.values() for m in ms if m not in matched and not _ours(m)})
    controllers.sort(key=lambda c: (c.namespace, c.kind, c.name))
    return FencePlan(tuple(controllers), managers, tuple(unmatched))


def service_account_grants(rbac: Rbac, targets: list[FenceTarget]) -> dict[tuple[str, str], list[Grant]]:
    """(namespace, serviceaccount) -> the grants that let it write a target's status. Group subjects are kept
    under ("*", "*") (every ServiceAccount) and (NS, "*") (every one of NS)."""
    cluster_roles = {r["metadata"]["name"]: r for r in rbac.cluster_roles}
    roles = {(r["metadata"].get("namespace", ""), r["metadata"]["name"]): r for r in rbac.roles}
    out: dict[tuple[str, str], list[Grant]] = {}
    for binding in (*rbac.cluster_role_bindings, *rbac.role_bindings):
        scope = binding["metadata"].get("namespace")  # None: a ClusterRoleBinding
        found = _role(binding, scope, cluster_roles, roles)
        if found is None:
            continue
        label, rules = found
        where = f"ClusterRoleBinding {binding['metadata']['name']}" if scope is None else f"RoleBinding {scope}/"
        where += "" if scope is None else binding["metadata"]["name"]
        for target in targets:
            if scope is not None and (not target.rt.namespaced or scope not in target.namespaces):
                continue
            for rule in rules:
                if allows(rule, target.rt):
                    for key, subject in _subjects(binding, scope):
                        grant = Grant(target.rt.qualified, label, _rule_text(rule), where, subject)
                        out.setdefault(key, []).append(grant)
                    break
    return out


def allows(rule: Mapping[str, Any], rt: ResourceType) -> bool:
    """Whether one PolicyRule lets its subject update or patch `<resource>/status` (as the RBAC authorizer
    matches: "*", "resource/status", "*/status"; resourceNames narrow it to some objects but still allow)."""
    if rule.get("nonResourceURLs") and not rule.get("resources"):
        return False
    if not WRITE_VERBS & set(rule.get("verbs") or ()):
        return False
    groups = set(rule.get("apiGroups") or ())
    if "*" not in groups and rt.group not in groups:
        return False
    resources = set(rule.get("resources") or ())
    return bool(resources & {"*", f"{rt.resource}/status", "*/status"})


def aggregated_rules(role: KubeObject, cluster_roles: Mapping[str, KubeObject]) -> tuple[str, list[dict[str, Any]]]:
    """A ClusterRole's rules with those of the ClusterRoles its aggregationRule selects, and its label."""
    name = role["metadata"]["name"]
    rules = list(role.get("rules") or ())
    selectors = (role.get("aggregationRule") or {}).get("clusterRoleSelectors") or ()
    if not selectors:
        return f"ClusterRole {name}", rules
    parts = []
    for other in sorted(cluster_roles.values(), key=lambda r: str(r["metadata"]["name"])):
        labels = other["metadata"].get("labels") or {}
        if other is not role and any(_selects(s, labels) for s in selectors):
            parts.append(other["metadata"]["name"])
            rules += [r for r in other.get("rules") or () if r not in rules]
    return f"ClusterRole {name} (aggregating {', '.join(parts) or 'nothing'})", rules


def _selects(selector: Mapping[str, Any], labels: Mapping[str, str]) -> bool:
    """A LabelSelector (matchLabels, matchExpressions) against labels."""
    if any(labels.get(k) != v for k, v in (selector.get("matchLabels") or {}).items()):
        return False
    for e in selector.get("matchExpressions") or ():
        key, op, values = e.get("key"), e.get("operator"), set(e.get("values") or ())
        ok = {
            "In": key in labels and labels[key] in values,
            "NotIn": key not in labels or labels[key] not in values,
            "Exists": key in labels,
            "DoesNotExist": key not in labels,
        }.get(str(op), False)
        if not ok:
            return False
    return True


def _role(
    binding: KubeObject,
    scope: str | None,
    cluster_roles: Mapping[str, KubeObject],
    roles: Mapping[tuple[str, str], KubeObject],
) -> tuple[str, list[dict[str, Any]]] | None:
    ref = binding.get("roleRef") or {}
    if ref.get("kind") == "ClusterRole":
        role = cluster_roles.get(ref.get("name", ""))
        return None if role is None else aggregated_rules(role, cluster_roles)
    if ref.get("kind") == "Role" and scope is not None:
        r = roles.get((scope, ref.get("name", "")))
        return None if r is None else (f"Role {scope}/{r['metadata']['name']}", list(r.get("rules") or ()))
    return None


def _subjects(binding: KubeObject, scope: str | None) -> list[tuple[tuple[str, str], str]]:
    """(namespace, serviceaccount) keys the binding's subjects stand for ("*" for all), with the subject shown."""
    out = []
    for s in binding.get("subjects") or ():
        kind, name = s.get("kind"), str(s.get("name", ""))
        if kind == "ServiceAccount":
            out.append(((str(s.get("namespace") or scope or ""), name), f"serviceaccount {s.get('namespace')}/{name}"))
        elif kind == "Group" and (name == ALL_SERVICE_ACCOUNTS or name in EVERYONE):
            out.append((("*", "*"), f"group {name}"))
        elif kind == "Group" and name.startswith(ALL_SERVICE_ACCOUNTS + ":"):
            out.append(((name.split(":", 2)[2], "*"), f"group {name}"))
        elif kind == "User" and name.startswith("system:serviceaccount:") and name.count(":") == 3:
            _, _, ns, sa = name.split(":")
            out.append(((ns, sa), f"user {name}"))
    return out


def grants_of(grants: Mapping[tuple[str, str], list[Grant]], namespace: str, account: str) -> list[Grant]:
    """The grants of one ServiceAccount: its own, its namespace's group's, and every ServiceAccount's."""
    return [*grants.get((namespace, account), ()), *grants.get((namespace, "*"), ()), *grants.get(("*", "*"), ())]


def _service_account(workload: KubeObject) -> str:
    spec = ((workload.get("spec") or {}).get("template") or {}).get("spec") or {}
    return str(spec.get("serviceAccountName") or spec.get("serviceAccount") or "default")


def _action(
    obj: KubeObject, targets: list[FenceTarget], grants: list[Grant], excluded: set[str], pause: PauseOptions
) -> tuple[FenceAction, str]:
    meta = obj["metadata"]
    ns, name = meta.get("namespace", ""), meta["name"]
    if ns in SYSTEM_NAMESPACES:
        return FenceAction.EXCLUDE, f"a control-plane controller ({ns}): never fenced"
    if (meta.get("labels") or {}).get(SELF_LABEL[0]) == SELF_LABEL[1]:
        return FenceAction.EXCLUDE, "statusvault itself: never fenced"
    if f"{ns}/{name}" in excluded:
        return FenceAction.EXCLUDE, "--fence-exclude"
    resources = {g.resource for g in grants}
    by_name = {t.rt.qualified: t.rt for t in targets}
    markers = [pause.marker_for(by_name[r], {}) for r in sorted(resources)]
    if all(markers):
        conventions = sorted({m.describe() for m in markers if m is not None})
        return FenceAction.PAUSE, f"every resource it may write has a pause convention ({', '.join(conventions)})"
    if obj.get("kind") == "DaemonSet":
        return FenceAction.REPORT, "a DaemonSet cannot be scaled to 0: NOT fenced, only reported"
    return FenceAction.SCALE, "no pause convention for " + ", ".join(
        r for r, m in zip(sorted(resources), markers, strict=True) if m is None
    )


def _managers_naming(
    managers: Mapping[str, tuple[str, ...]], resources: set[str], names: tuple[str, ...]
) -> tuple[str, ...]:
    """The status managers of these resources whose name holds the workload's name or its account's."""
    found = {m for r in resources for m in managers.get(r, ()) if any(_names(m, n) for n in names if n)}
    return tuple(sorted(found))


def _names(manager: str, name: str) -> bool:
    """Whether the manager's words (split at - _ . : /) hold the name's words in a row."""
    words, wanted = _words(manager), _words(name)
    return any(words[i : i + len(wanted)] == wanted for i in range(len(words) - len(wanted) + 1))


def _words(text: str) -> list[str]:
    return [w for w in re.split(r"[-_.:/]", text.lower()) if w]


def _ours(manager: str) -> bool:
    return manager.startswith("statusvault")


def status_managers(objects: Iterable[KubeObject]) -> set[str]:
    """The field managers that wrote the status of these objects (their managedFields): through /status, or owning
    `f:status`; an entry without fieldsV1 is one a backup kept because it wrote the status."""
    out = set()
    for obj in objects:
        for entry in (obj.get("metadata") or {}).get("managedFields") or ():
            fields = entry.get("fieldsV1")
            wrote = entry.get("subresource") == "status" or fields is None or "f:status" in fields
            if wrote and entry.get("manager"):
                out.add(str(entry["manager"]))
    return out


def _rule_text(rule: Mapping[str, Any]) -> str:
    def show(key: str) -> str:
        return ",".join(str(v) or '""' for v in rule.get(key) or ())

    return f"[apiGroups {show('apiGroups')}; resources {show('resources')}; verbs {show('verbs')}]"
