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


def select_resources(discovery: Discovery, sel: Selection) -> list[ResourceType]:
    """The resource types a backup lists, in archive order (CRDs first)."""
    included = resolve_names(discovery, sel.include_resources)
    excluded = {rt.qualified for rt in resolve_names(discovery, sel.exclude_resources)}
    explicit = {rt.qualified for rt in included}
    candidates = included if included else discovery.custom()
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
