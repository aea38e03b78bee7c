"""Render the watcher's manifests: ServiceAccount, least-privilege RBAC (get/list/watch on the watched types,
Leases in its own namespace), and a Deployment of two replicas (a Lease elects the writer). Built from the
scheduled backup's pieces."""

from __future__ import annotations

import dataclasses
from typing import Any

from statusvault.model import KubeObject, ResourceType
from statusvault.schedule import (
    DEFAULT_IMAGE,
    ScheduleSpec,
    backup_args,
    ca_bundle_configmap,
    mount_ca_bundle,
    mount_encryption_key,
    rbac,
    secure_container,
    secure_pod,
)

LABELS = {"app.kubernetes.io/name": "statusvault", "app.kubernetes.io/component": "watch"}
RBAC_API = "rbac.authorization.k8s.io/v1"


@dataclasses.dataclass(frozen=True)
class WatchSpec:
    schedule: ScheduleSpec  # name, selection, storage, namespace, image, Secrets: as a scheduled backup's
    replicas: int = 2
    flush_interval: float = 10.0
    base_interval: str = "1h"
    metrics_port: int = 9090


def watch_args(spec: WatchSpec, types: list[ResourceType]) -> list[str]:
    """`watch run NAME` with exactly the selection a scheduled backup of the same types gets."""
    s = spec.schedule
    selection = backup_args(s, types)[3:]  # after "backup --schedule NAME"
    extra = ["--flush-interval", f"{spec.flush_interval:g}", "--base-interval", spec.base_interval]
    extra += ["--lease-namespace", s.job_namespace, "--metrics-port", str(spec.metrics_port)]
    extra += ["--metrics-address", "0.0.0.0"]
    return ["statusvault", "--log-format", "json", "watch", "run", s.name, *selection, *extra]


def watch_rbac(spec: WatchSpec, types: list[ResourceType]) -> list[KubeObject]:
    """The scheduled backup's read rules plus `watch`, and a Role for the Lease."""
    s = spec.schedule
    out = rbac(s, types)
    for obj in out:
        for rule in obj.get("rules", []):
            rule["verbs"] = [*rule["verbs"], "watch"]
    meta = {"name": f"{s.account}-lease", "namespace": s.job_namespace, "labels": dict(LABELS)}
    lease_rule = {"apiGroups": ["coordination.k8s.io"], "resources": ["leases"], "verbs": ["get", "create", "update"]}
    out.append({"apiVersion": RBAC_API, "kind": "Role", "metadata": meta, "rules": [lease_rule]})
    out.append(
        {
            "apiVersion": RBAC_API,
            "kind": "RoleBinding",
            "metadata": dict(meta),
            "subjects": [{"kind": "ServiceAccount", "name": s.account, "namespace": s.job_namespace}],
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": meta["name"]},
        }
    )
    return out


def deployment(spec: WatchSpec, types: list[ResourceType]) -> KubeObject:
    s = spec.schedule
    container = secure_container("watch", s.image, watch_args(spec, types), s.credentials_secret)
    container["env"].append({"name": "POD_NAME", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}})
    container["ports"] = [{"name": "metrics", "containerPort": spec.metrics_port}]
    labels = {**LABELS, "statusvault.io/watch": s.name}
    pod: dict[str, Any] = secure_pod(s.account, container, "Always", labels)
    mount_encryption_key(pod, s.encryption_secret)
    mount_ca_bundle(pod, s.ca_configmap)
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": s.account, "namespace": s.job_namespace, "labels": dict(LABELS)},
        "spec": {"replicas": spec.replicas, "selector": {"matchLabels": labels}, "template": pod},
    }


def render(spec: WatchSpec, types: list[ResourceType]) -> list[KubeObject]:
    s = spec.schedule
    meta, ns = {"labels": dict(LABELS)}, s.job_namespace
    return [
        {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": s.job_namespace, **meta}},
        {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": s.account, "namespace": ns, **meta}},
        *([ca_bundle_configmap(s.ca_configmap, ns, s.ca_pem, LABELS)] if s.ca_pem else []),
        *watch_rbac(spec, types),
        deployment(spec, types),
    ]


__all__ = ["DEFAULT_IMAGE", "WatchSpec", "render"]
