"""What a CustomResourceDefinition does to the fake: the type it serves, and the status the server gives it."""

from __future__ import annotations

from typing import Any

from statusvault.model import KubeObject, ResourceType

VERBS = ("create", "delete", "get", "list", "patch", "update", "watch")


def defined(crd: KubeObject) -> str:
    """The qualified name of the resource a CRD defines (its own name: `<plural>.<group>`)."""
    spec = crd.get("spec") or {}
    return f"{(spec.get('names') or {}).get('plural', '')}.{spec.get('group', '')}"


def types_of(crd: KubeObject) -> list[ResourceType]:
    """The served versions of a CRD's resource, the storage version first (the preferred one here)."""
    spec, names = crd["spec"], crd["spec"]["names"]
    versions = sorted((v for v in spec["versions"] if v.get("served", True)), key=lambda v: not v.get("storage"))
    return [
        ResourceType(
            spec["group"],
            v["name"],
            names["plural"],
            names["kind"],
            spec.get("scope", "Namespaced") == "Namespaced",
            "status" in (v.get("subresources") or {}),
            True,
            VERBS,
            tuple(names.get("shortNames") or ()),
            names.get("singular", ""),
        )
        for v in versions
    ]


def established(crd: KubeObject) -> dict[str, Any]:
    """The status the API server gives a CRD it accepted."""
    conditions = [{"type": t, "status": "True", "reason": t} for t in ("NamesAccepted", "Established")]
    return {"conditions": conditions, "acceptedNames": dict(crd["spec"]["names"]), "storedVersions": []}
