"""Turn a user's Selection into the ordered list of resource types to back up (pure, over Discovery)."""

from __future__ import annotations

from statusvault.kube.discovery import Discovery
from statusvault.model import ResourceType, Selection


def resolve_names(discovery: Discovery, names: tuple[str, ...]) -> list[ResourceType]:
    """Resolve user-given resource names; an unknown name raises ConfigError."""
    return [discovery.resolve(n) for n in names]


def order_key(rt: ResourceType) -> tuple[int, str]:
    """CRDs first, then cluster-scoped resources, then namespaced ones."""
    return (0 if rt.is_crd else 1 if not rt.namespaced else 2, rt.qualified)


# Built-in namespaced types a namespace backup leaves out, as Velero does: they only make sense live (the server or
# a controller makes them again), or are no objects at all. Named in --include-resources, they are taken.
LIVE_ONLY = frozenset({
    "events", "events.events.k8s.io", "endpoints", "endpointslices.discovery.k8s.io", "leases.coordination.k8s.io",
    "pods.metrics.k8s.io", "localsubjectaccessreviews.authorization.k8s.io",
})  # fmt: skip
# ... and of these, the objects a controller owns (a Deployment's ReplicaSets, their Pods): it makes them again
CONTROLLED = frozenset({"pods", "replicasets.apps"})


def namespace_objects(discovery: Discovery) -> list[ResourceType]:
    """The built-in namespaced types a namespace backup takes beside the custom resources: every one the server
    lists but the LIVE_ONLY ones."""
    return [rt for rt in discovery.preferred if rt.namespaced and not rt.custom and rt.qualified not in LIVE_ONLY]


def select_resources(discovery: Discovery, sel: Selection, whole_namespaces: bool = False) -> list[ResourceType]:
    """The resource types a backup lists, in archive order (CRDs first). `whole_namespaces` (a backup's own
    listing, and the permissions a scheduled one is given): a backup of namespaces (-n) without --include-resources
    takes their built-in objects too (namespace_objects), so that a restore can be asked for any of them later;
    else the custom resources."""
    included = resolve_names(discovery, sel.include_resources)
    excluded = {rt.qualified for rt in resolve_names(discovery, sel.exclude_resources)}
    explicit = {rt.qualified for rt in included}
    candidates = included if included else discovery.custom()
    if whole_namespaces and sel.whole_namespaces:
        candidates = [*candidates, *namespace_objects(discovery)]
    chosen: dict[str, ResourceType] = {}
    for rt in candidates:
        if rt.qualified in excluded or "list" not in rt.verbs or rt.is_crd:
            continue
        if not rt.namespaced and not sel.takes_cluster_scoped(rt.qualified in explicit):
            continue
        chosen[rt.qualified] = rt
    named_crds = any(rt.is_crd for rt in included)
    wants_crds = named_crds or (sel.include_crds and any(rt.custom for rt in chosen.values()))
    crd = next((rt for rt in discovery.preferred if rt.is_crd), None)
    if wants_crds and crd is not None and crd.qualified not in excluded:
        chosen[crd.qualified] = crd
    return sorted(chosen.values(), key=order_key)
