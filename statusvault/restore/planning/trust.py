"""What a restore writes without being asked, whatever the backup lists: a backup is written by whoever can write
the store, so it is not trusted to choose what a restore creates (docs/security.md).

By default a restore creates custom resources, the CRDs they need and their namespaces, never updating a CRD or
a Namespace the cluster has (--existing-resource-policy update included). A built-in type comes only when named
(--include-resources), and a privileged one only when also allowed (--allow-privileged-resources): naming it in
a backup is not enough, nor is naming it by a pattern. Whether a type is custom or built-in is the cluster's
word (discovery reads its CRDs), never the backup's."""

from __future__ import annotations

from statusvault.kube.discovery import builtin_group
from statusvault.model import CRD_GROUP, ResourceType

ALL = "*"
CRDS = f"customresourcedefinitions.{CRD_GROUP}"
_RBAC = "rbac.authorization.k8s.io"
_ADMISSION = "admissionregistration.k8s.io"

# Each privileged type and why: what a smuggled object of it could do.
PRIVILEGED: dict[str, str] = {
    **dict.fromkeys(
        (f"roles.{_RBAC}", f"rolebindings.{_RBAC}", f"clusterroles.{_RBAC}", f"clusterrolebindings.{_RBAC}"),
        "RBAC: grants rights, up to cluster-admin",
    ),
    **dict.fromkeys(
        (
            f"validatingwebhookconfigurations.{_ADMISSION}",
            f"mutatingwebhookconfigurations.{_ADMISSION}",
            f"validatingadmissionpolicies.{_ADMISSION}",
            f"validatingadmissionpolicybindings.{_ADMISSION}",
            f"mutatingadmissionpolicies.{_ADMISSION}",
            f"mutatingadmissionpolicybindings.{_ADMISSION}",
        ),
        "admission: sees, changes or refuses every write it matches",
    ),
    "apiservices.apiregistration.k8s.io": "API aggregation: another server answers a whole API group",
    **dict.fromkeys(
        (
            "pods",
            "replicationcontrollers",
            "deployments.apps",
            "statefulsets.apps",
            "daemonsets.apps",
            "replicasets.apps",
            "jobs.batch",
            "cronjobs.batch",
        ),
        "workload: runs code as any ServiceAccount of its namespace, with host paths and privileges",
    ),
    "serviceaccounts": "identity: what RBAC binds to, and the tokens workloads run with",
    "secrets": "credentials: service account tokens, registry and TLS keys",
    "persistentvolumes": "storage: a hostPath volume is the node's filesystem",
    "priorityclasses.scheduling.k8s.io": "scheduling: may evict every other workload",
    "runtimeclasses.node.k8s.io": "node: chooses the container runtime handler",
    "certificatesigningrequests.certificates.k8s.io": "credentials: asks for a client certificate",
    CRDS: "replacing an existing CRD changes (or prunes) every object of its type",
}


def privileged(rt: ResourceType) -> str:
    """Why the type is privileged ("" when it is not): named above, or any cluster-scoped built-in type but
    Namespaces, whose objects act on the whole cluster. `rt` is as the cluster serves it."""
    why = PRIVILEGED.get(rt.qualified, "")
    if why or rt.custom or rt.namespaced or rt.qualified == "namespaces":
        return why
    return "cluster-scoped built-in: acts on the whole cluster"


def allowed(rt: ResourceType, allow: frozenset[str]) -> bool:
    return ALL in allow or rt.qualified in allow


def custom_type(rt: ResourceType, served: ResourceType | None) -> bool:
    """Whether the cluster holds the objects as custom resources: as it serves the type (its CRDs say); not served
    (its CRD comes with the backup, or is missing: then the report names the objects as unavailable), when its
    group is not one Kubernetes owns."""
    if served is not None:
        return served.custom
    return not builtin_group(rt.group)
