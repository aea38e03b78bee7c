"""REST paths read back into what they name (the inverse of ResourceType.path)."""

from __future__ import annotations

import dataclasses


@dataclasses.dataclass(frozen=True)
class Route:
    qualified: str  # resource.group, as ResourceType.qualified
    namespace: str  # "" for a cluster-scoped type or a cluster-wide collection
    name: str  # "" for a collection
    sub: str = ""


def route(path: str) -> Route:
    """`/api/v1/namespaces/ns/configmaps/x` -> Route("configmaps", "ns", "x"); ValueError for what is not a
    resource's path (discovery, /version)."""
    parts = path.strip("/").split("/")
    if parts[0] == "api" and len(parts) >= 3:
        group, rest = "", parts[2:]
    elif parts[0] == "apis" and len(parts) >= 4:
        group, rest = parts[1], parts[3:]
    else:
        raise ValueError(f"not a resource path: {path}")
    namespace = ""
    if len(rest) >= 3 and rest[0] == "namespaces":
        namespace, rest = rest[1], rest[2:]
    resource, name, sub = [*rest, "", ""][:3]
    return Route(f"{resource}.{group}" if group else resource, namespace, name, sub)
