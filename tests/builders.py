"""Small builders for test data: CRDs, custom resources, owner references."""

from __future__ import annotations

import uuid
from typing import Any


def unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


def unique_kind(prefix: str) -> str:
    """A Kind no other test's CRD has (so a Kind-only name is never ambiguous in the shared cluster): the prefix and
    ten random letters."""
    return prefix + "".join(chr(ord("a") + int(c, 16)) for c in uuid.uuid4().hex[:10])


def crd(
    group: str,
    kind: str,
    *,
    scope: str = "Namespaced",
    status: bool = True,
    versions: tuple[str, ...] = ("v1",),
    schema: dict[str, Any] | None = None,
) -> dict[str, Any]:
    plural = kind.lower() + "s"
    schema = schema or {"type": "object", "x-kubernetes-preserve-unknown-fields": True}
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": f"{plural}.{group}"},
        "spec": {
            "group": group,
            "scope": scope,
            "names": {"plural": plural, "singular": kind.lower(), "kind": kind},
            "versions": [
                {
                    "name": v,
                    "served": True,
                    "storage": i == 0,
                    "schema": {"openAPIV3Schema": schema},
                    **({"subresources": {"status": {}}} if status else {}),
                }
                for i, v in enumerate(versions)
            ],
        },
    }


def cr(
    api_version: str,
    kind: str,
    name: str,
    *,
    spec: dict[str, Any] | None = None,
    status: dict[str, Any] | None = None,
    labels: dict[str, str] | None = None,
    annotations: dict[str, str] | None = None,
    owners: list[dict[str, Any]] | None = None,
) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name}
    if labels:
        meta["labels"] = labels
    if annotations:
        meta["annotations"] = annotations
    if owners:
        meta["ownerReferences"] = owners
    obj: dict[str, Any] = {"apiVersion": api_version, "kind": kind, "metadata": meta, "spec": spec or {}}
    if status is not None:
        obj["status"] = status
    return obj


def owner_ref(owner: dict[str, Any], controller: bool = True) -> dict[str, Any]:
    return {
        "apiVersion": owner["apiVersion"],
        "kind": owner["kind"],
        "name": owner["metadata"]["name"],
        "uid": owner["metadata"]["uid"],
        "controller": controller,
        "blockOwnerDeletion": True,
    }


def kc_status(n: int = 1) -> dict[str, Any]:
    """A KubernetesCluster status as the operator writes it."""
    return {
        "apiServerURL": f"https://c{n}.k8s.example.net:6443",
        "masterVersion": "1.29.4",
        "clusterID": f"kc-{n:06d}",
        "phase": "Running",
        "observedGeneration": 3,
        "conditions": [
            {
                "type": "Ready",
                "status": "True",
                "reason": "Provisioned",
                "lastTransitionTime": "2025-11-02T10:00:00Z",
            }
        ],
    }


def resource_type(
    group: str, kind: str, *, namespaced: bool = True, status: bool = True, custom: bool = True, version: str = "v1"
):
    from statusvault.model import ResourceType

    return ResourceType(
        group, version, kind.lower() + "s", kind, namespaced, status, custom, ("list", "create"), singular=kind.lower()
    )


def write_archive(path, entries, *, format_version: str = "1.0", manifest: dict[str, Any] | None = None):
    """Write an archive of (ResourceType, object) pairs the way a backup does, its manifest with `manifest`'s
    fields too; return the path."""
    import orjson

    from statusvault.archive import ArchiveWriter, member_path
    from statusvault.backup import ResourceSummary
    from statusvault.model import object_key

    summaries: dict[str, ResourceSummary] = {}
    with open(path, "wb") as sink:
        writer = ArchiveWriter(sink)
        for rt, obj in entries:
            writer.add(member_path(object_key(rt, obj)), orjson.dumps(obj, option=orjson.OPT_SORT_KEYS))
            s = summaries.setdefault(rt.qualified, ResourceSummary(rt))
            s.count += 1
        writer.finish(
            {
                "formatVersion": format_version,
                "name": "t",
                "resources": {q: s.to_dict() for q, s in summaries.items()},
                "totals": {"objects": sum(s.count for s in summaries.values())},
                **(manifest or {}),
            }
        )
    return path


def with_meta(obj: dict[str, Any], namespace: str = "", uid: str = "") -> dict[str, Any]:
    obj["metadata"]["uid"] = uid or unique("uid")
    if namespace:
        obj["metadata"]["namespace"] = namespace
    return obj


REGION_URL = "https://prod.eu-central-1.example.net:6443"


def region_move(*, namespaces: str = "", more_rules: str = "") -> str:
    """A modifiers file whose first rule moves KubernetesClusters from eu-west-1 to eu-central-1 (spec.region)
    and points their saved status at the new API server (status.apiServerURL = REGION_URL); `namespaces`
    limits it (a YAML list's items), `more_rules` are further rules (YAML list items at column 0)."""
    where = f"    namespaces: [{namespaces}]\n" if namespaces else ""
    return f"""version: v1
resourceModifierRules:
- conditions:
    groupResource: kubernetesclusters.xyz.example.com
{where}    matches:
    - path: /spec/region
      value: eu-west-1
  patches:
  - operation: replace
    path: /spec/region
    value: eu-central-1
  statusPatches:
  - operation: replace
    path: /status/apiServerURL
    value: {REGION_URL}
{more_rules}"""
