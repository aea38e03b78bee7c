"""Render the restore controller's manifests: ServiceAccount, RBAC, Deployment."""

from __future__ import annotations

import dataclasses
from typing import Any

from statusvault.controller.backups import LockLimits
from statusvault.controller.crd import BACKUP_PLURAL, PLURAL, SCHEDULE_PLURAL
from statusvault.controller.crd import GROUP as OWN_GROUP
from statusvault.controller.schedules import BACKUP_ACCOUNT
from statusvault.model import CRD_GROUP, CRD_RESOURCE, KubeObject, ResourceType
from statusvault.schedule import (
    DEFAULT_IMAGE,
    KEY_ARGS,
    ca_bundle_configmap,
    mount_ca_bundle,
    mount_encryption_key,
    rules_for,
    secure_container,
    secure_pod,
    storage_args,
)
from statusvault.storage.base import S3Options
from statusvault.vocabulary.kinds import CRDS

NAME = "statusvault-controller"
CA_CONFIGMAP = "statusvault-s3-ca"  # the S3 CA bundle, mounted by the controller and its BackupSchedules' CronJobs
LABELS = {"app.kubernetes.io/name": "statusvault", "app.kubernetes.io/component": "restore-controller"}
STATE_DIR = "/var/lib/statusvault"
RBAC_API = "rbac.authorization.k8s.io/v1"
RESTORE_VERBS = ["get", "list", "create", "update", "patch"]
RBAC_RESOURCES = ("clusterrolebindings", "clusterroles", "rolebindings", "roles")


@dataclasses.dataclass(frozen=True)
class ControllerSpec:
    namespace: str
    storage: str
    s3: S3Options = dataclasses.field(default_factory=S3Options)
    image: str = DEFAULT_IMAGE
    credentials_secret: str = ""
    replicas: int = 1
    interval: float = 10.0
    encryption_secret: str = ""  # a Secret whose "key" is the base64 encryption key
    require_service_account: bool = False  # lockdown: no ClusterRole; it acts only as each resource's ServiceAccount
    # the Object Lock a Backup or BackupSchedule may ask for (controller run --lock-modes, --max-lock-for)
    locks: LockLimits = dataclasses.field(default_factory=LockLimits)
    ca_pem: str = ""  # the S3 CA bundle's content, carried into the namespace as the ConfigMap CA_CONFIGMAP


def restore_rules(types: list[ResourceType]) -> list[dict[str, Any]]:
    """What a restore writes: CRDs, namespaces, and each listed type with its /status subresource."""
    groups: dict[str, set[str]] = {CRD_GROUP: {CRD_RESOURCE}, "": {"namespaces"}}
    for rt in types:
        groups.setdefault(rt.group, set()).update({rt.resource, f"{rt.resource}/status"})
    rules = [
        {"apiGroups": [g], "resources": sorted(r), "verbs": list(RESTORE_VERBS)} for g, r in sorted(groups.items())
    ]
    return [
        *rules,
        # scale-down and fencing write /scale only: the replica count to go back to is the restore's to keep
        {"apiGroups": ["apps"], "resources": ["deployments", "statefulsets"], "verbs": ["get"]},
        {"apiGroups": ["apps"], "resources": ["deployments/scale", "statefulsets/scale"], "verbs": ["get", "patch"]},
        {"apiGroups": [""], "resources": ["pods"], "verbs": ["list"]},  # ... and waiting for the pods to be gone
        *FENCE_RULES,
    ]


FENCE_RULES = (  # fence: find who may write a status (read only: reading RBAC grants nothing)
    {"apiGroups": ["rbac.authorization.k8s.io"], "resources": list(RBAC_RESOURCES), "verbs": ["get", "list"]},
    {"apiGroups": ["apps"], "resources": ["daemonsets", "deployments", "statefulsets"], "verbs": ["list"]},
)


def own_namespace_rules() -> list[dict[str, Any]]:
    """Restores, Backups, BackupSchedules and their status, the schedules' CronJobs (deleted by the garbage
    collector with their owner), intents and their status ConfigMaps, the Leases, and Events, in the controller's
    namespace only."""
    own = [PLURAL, BACKUP_PLURAL, SCHEDULE_PLURAL]
    return [
        {"apiGroups": [OWN_GROUP], "resources": own, "verbs": ["get", "list"]},
        {"apiGroups": [OWN_GROUP], "resources": [f"{r}/status" for r in own], "verbs": ["get", "update"]},
        {"apiGroups": ["batch"], "resources": ["cronjobs"], "verbs": ["get", "list", "create", "update"]},
        {"apiGroups": [""], "resources": ["configmaps"], "verbs": ["get", "list", "create", "update"]},
        {"apiGroups": ["coordination.k8s.io"], "resources": ["leases"], "verbs": ["get", "create", "update"]},
        {"apiGroups": [""], "resources": ["events"], "verbs": ["create"]},
        # a Restore or Backup names a ServiceAccount of this namespace: the controller acts as it (Impersonate-User)
        {"apiGroups": [""], "resources": ["serviceaccounts"], "verbs": ["impersonate"]},
    ]


def _meta(name: str, namespace: str | None = None) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name, "labels": dict(LABELS)}
    if namespace:
        meta["namespace"] = namespace
    return meta


def cluster_name(name: str, spec: ControllerSpec) -> str:
    """A cluster-scoped object's name: one per install's namespace, so a second install (another namespace)
    adds its own ClusterRoles and bindings instead of rebinding the first one's to its ServiceAccounts."""
    return f"{name}-{spec.namespace}"


def _binding(kind: str, spec: ControllerSpec, account: str = NAME) -> KubeObject:
    name = account if kind == "Role" else cluster_name(account, spec)
    return {
        "apiVersion": RBAC_API,
        "kind": f"{kind}Binding",
        "metadata": _meta(name, spec.namespace if kind == "Role" else None),
        "subjects": [{"kind": "ServiceAccount", "name": account, "namespace": spec.namespace}],
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": kind, "name": name},
    }


def backup_account(spec: ControllerSpec, types: list[ResourceType]) -> list[KubeObject]:
    """The one ServiceAccount every BackupSchedule's CronJob runs as: get/list on the controller's types and
    CRDs, nothing else (the controller never creates RBAC, which would need bind/escalate)."""
    read = rules_for([CRDS, *types])
    return [
        {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": _meta(BACKUP_ACCOUNT, spec.namespace)},
        {
            "apiVersion": RBAC_API,
            "kind": "ClusterRole",
            "metadata": _meta(cluster_name(BACKUP_ACCOUNT, spec)),
            "rules": read,
        },
        _binding("ClusterRole", spec, BACKUP_ACCOUNT),
    ]


def deployment(spec: ControllerSpec) -> KubeObject:
    args = ["statusvault", "--log-format", "json", "controller", "run", "--interval", f"{spec.interval:g}"]
    ca = CA_CONFIGMAP if spec.ca_pem else ""
    args += ["--state-dir", STATE_DIR, *storage_args(spec.storage, spec.s3, ca)]
    args += [*(["--s3-ca-configmap", ca] if ca else []), "--image", spec.image]
    if spec.encryption_secret:
        args += [*KEY_ARGS, "--encryption-key-secret", spec.encryption_secret]
    if spec.credentials_secret:
        args += ["--credentials-secret", spec.credentials_secret]
    if spec.require_service_account:
        args += ["--require-service-account"]
    args += lock_limit_args(spec.locks)
    container = secure_container("controller", spec.image, args, spec.credentials_secret)
    container["env"].append({"name": "POD_NAME", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}})
    container["volumeMounts"].append({"name": "state", "mountPath": STATE_DIR})
    pod = secure_pod(NAME, container, "Always", LABELS)
    pod["spec"]["volumes"].append({"name": "state", "emptyDir": {}})  # journals survive container restarts
    mount_encryption_key(pod, spec.encryption_secret)
    mount_ca_bundle(pod, ca)
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": _meta(NAME, spec.namespace),
        "spec": {
            "replicas": spec.replicas,
            "selector": {"matchLabels": dict(LABELS)},
            "strategy": {"type": "Recreate"},
            "template": pod,
        },
    }


def lock_limit_args(locks: LockLimits) -> list[str]:
    """`controller run`'s --lock-modes and --max-lock-for, each only when not its default."""
    args = [] if locks.modes == LockLimits().modes else ["--lock-modes", ",".join(locks.modes) or "none"]
    return args + (["--max-lock-for", locks.max_for] if locks.max_for else [])


def render(spec: ControllerSpec, types: list[ResourceType], crds: list[KubeObject]) -> list[KubeObject]:
    """Every manifest of the controller, in apply order: its resources' CRDs first. Locked down (it acts only as
    each resource's ServiceAccount), it has no ClusterRole at all."""
    cluster_rights: list[KubeObject] = [
        {
            "apiVersion": RBAC_API,
            "kind": "ClusterRole",
            "metadata": _meta(cluster_name(NAME, spec)),
            "rules": restore_rules(types),
        },
        _binding("ClusterRole", spec),
    ]
    return [
        *crds,
        {"apiVersion": "v1", "kind": "Namespace", "metadata": _meta(spec.namespace)},
        {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": _meta(NAME, spec.namespace)},
        *([ca_bundle_configmap(CA_CONFIGMAP, spec.namespace, spec.ca_pem, LABELS)] if spec.ca_pem else []),
        *([] if spec.require_service_account else cluster_rights),
        {
            "apiVersion": RBAC_API,
            "kind": "Role",
            "metadata": _meta(NAME, spec.namespace),
            "rules": own_namespace_rules(),
        },
        _binding("Role", spec),
        *backup_account(spec, types),
        deployment(spec),
    ]
