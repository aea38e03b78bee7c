"""The built-in resource types statusvault names directly, each defined once."""

from __future__ import annotations

from statusvault.model import CRD_GROUP, CRD_RESOURCE, ResourceType

NAMESPACES = ResourceType("", "v1", "namespaces", "Namespace", namespaced=False, has_status=True)
PODS = ResourceType("", "v1", "pods", "Pod", namespaced=True, has_status=True)
CONFIGMAPS = ResourceType("", "v1", "configmaps", "ConfigMap", namespaced=True)
SECRETS = ResourceType("", "v1", "secrets", "Secret", namespaced=True)
SERVICES = ResourceType("", "v1", "services", "Service", namespaced=True, has_status=True)
EVENTS = ResourceType("", "v1", "events", "Event", namespaced=True)
LEASES = ResourceType("coordination.k8s.io", "v1", "leases", "Lease", namespaced=True)
CRDS = ResourceType(
    CRD_GROUP,
    "v1",
    CRD_RESOURCE,
    "CustomResourceDefinition",
    namespaced=False,
    has_status=True,
    verbs=("create", "get", "list"),
    short_names=("crd", "crds"),
    singular="customresourcedefinition",
)
CRD_QUALIFIED = CRDS.qualified

_RBAC = "rbac.authorization.k8s.io"
CLUSTER_ROLES = ResourceType(_RBAC, "v1", "clusterroles", "ClusterRole", namespaced=False)
ROLES = ResourceType(_RBAC, "v1", "roles", "Role", namespaced=True)
CLUSTER_ROLE_BINDINGS = ResourceType(_RBAC, "v1", "clusterrolebindings", "ClusterRoleBinding", namespaced=False)
ROLE_BINDINGS = ResourceType(_RBAC, "v1", "rolebindings", "RoleBinding", namespaced=True)
DEPLOYMENTS = ResourceType("apps", "v1", "deployments", "Deployment", namespaced=True, has_status=True)
STATEFULSETS = ResourceType("apps", "v1", "statefulsets", "StatefulSet", namespaced=True, has_status=True)
DAEMONSETS = ResourceType("apps", "v1", "daemonsets", "DaemonSet", namespaced=True, has_status=True)
