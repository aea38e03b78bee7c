"""A CustomResourceDefinition in a shape a current API server refuses, written as the `v1` it accepts.

Servers from Kubernetes 1.22 on serve CRDs only as v1 and refuse a v1 CRD without a structural schema. Backups
(Velero's, typically) hold both older shapes:

- `apiextensions.k8s.io/v1beta1`, from clusters of 1.21 or older for any CRD (Velero writes them so from 1.16 to
  1.21 too, for a CRD without a structural schema);
- `apiextensions.k8s.io/v1` as an older server returned a CRD without a schema: `preserveUnknownFields: true`
  and no `openAPIV3Schema` (Velero writes it with `--features=EnableAPIGroupVersions`).

The fields that moved from v1beta1:

- `spec.version` (one version) -> `spec.versions` when the CRD lists none;
- `spec.validation`, `spec.subresources`, `spec.additionalPrinterColumns` (one for every version) -> each version's
  `schema`, `subresources`, `additionalPrinterColumns`, unless the version has its own; a column's `JSONPath` ->
  `jsonPath`;
- `spec.preserveUnknownFields` (true when unset in v1beta1; v1 allows only false) -> `x-kubernetes-preserve-unknown-
  fields: true` on every object of the version schemas (the root and each nested object a v1 server would
  otherwise prune), which keeps every field as v1beta1 did;
- v1 requires a schema for every version: a version without one gets an object schema that keeps every field;
- `spec.conversion.webhookClientConfig` / `conversionReviewVersions` -> `spec.conversion.webhook.clientConfig` /
  `conversionReviewVersions` (v1beta1's default review version, `v1beta1`, written out).

A v1beta1 schema that is not structural (a property without a type, say) is carried over as it is: the server
refuses such a CRD as v1, and the restore reports that refusal for the CRD and its objects.
"""

from __future__ import annotations

import copy
from typing import Any

V1BETA1 = "apiextensions.k8s.io/v1beta1"
V1 = "apiextensions.k8s.io/v1"
_PER_VERSION = ("validation", "subresources", "additionalPrinterColumns")
_KEEP_ALL = {"type": "object", "x-kubernetes-preserve-unknown-fields": True}


def is_v1beta1(crd: dict[str, Any]) -> bool:
    return crd.get("apiVersion") == V1BETA1 and crd.get("kind") == "CustomResourceDefinition"


def refused_shape(crd: dict[str, Any]) -> bool:
    """Whether a current server refuses the CRD as it is: v1beta1, or v1 keeping unknown fields at the top
    (`preserveUnknownFields: true`) or with a version that has no schema."""
    if is_v1beta1(crd):
        return True
    if crd.get("apiVersion") != V1 or crd.get("kind") != "CustomResourceDefinition":
        return False
    spec = crd.get("spec")
    if not isinstance(spec, dict):
        return False
    versions = [v for v in spec.get("versions") or () if isinstance(v, dict)]
    schemaless = any(not ((v.get("schema") or {}).get("openAPIV3Schema")) for v in versions)
    return spec.get("preserveUnknownFields") is True or schemaless


def as_v1(crd: dict[str, Any]) -> dict[str, Any]:
    """The v1 form a current server accepts of a CRD in a refused shape (refused_shape; a new object, the argument
    is not changed)."""
    if not is_v1beta1(crd):
        return _v1_kept(crd)
    out = copy.deepcopy(crd)
    out["apiVersion"] = V1
    spec = out.get("spec")
    if not isinstance(spec, dict):
        return out
    shared = {field: spec.pop(field) for field in _PER_VERSION if field in spec}
    single = spec.pop("version", None)
    keep_unknown = spec.pop("preserveUnknownFields", True) is not False
    versions = spec.get("versions")
    if not isinstance(versions, list) or not versions:
        versions = [{"name": single, "served": True, "storage": True}] if isinstance(single, str) else []
    spec["versions"] = [_version(v, shared, keep_unknown) for v in versions if isinstance(v, dict)]
    if isinstance(spec.get("conversion"), dict):
        spec["conversion"] = _conversion(spec["conversion"])
    return out


def _v1_kept(crd: dict[str, Any]) -> dict[str, Any]:
    """A v1 CRD without a schema, or keeping unknown fields at the top: each version's schema (one keeping every
    field where it has none) keeps unknown fields, as the top-level setting did; the setting goes (v1: false only)."""
    out = copy.deepcopy(crd)
    spec = out["spec"]
    keep_unknown = spec.pop("preserveUnknownFields", False) is True
    versions = []
    for version in spec.get("versions") or ():
        if not isinstance(version, dict):
            continue
        schema = (
            (version.get("schema") or {}).get("openAPIV3Schema") if isinstance(version.get("schema"), dict) else None
        )
        root = dict(schema) if isinstance(schema, dict) and schema else dict(_KEEP_ALL)
        root.setdefault("type", "object")
        version["schema"] = {"openAPIV3Schema": _keeping_unknown(root) if keep_unknown or not schema else root}
        versions.append(version)
    spec["versions"] = versions
    return out


def _version(version: dict[str, Any], shared: dict[str, Any], keep_unknown: bool) -> dict[str, Any]:
    out = dict(version)
    own_schema = out.pop("schema", None)
    schema = own_schema if isinstance(own_schema, dict) else shared.get("validation")
    root = dict((schema or {}).get("openAPIV3Schema") or {}) if isinstance(schema, dict) else {}
    if not root:
        root = dict(_KEEP_ALL)
    root.setdefault("type", "object")
    if keep_unknown:
        root = _keeping_unknown(root)
    out["schema"] = {"openAPIV3Schema": root}
    if "subresources" not in out and "subresources" in shared:
        out["subresources"] = shared["subresources"]
    columns = out.get("additionalPrinterColumns", shared.get("additionalPrinterColumns"))
    if isinstance(columns, list):
        out["additionalPrinterColumns"] = [_column(c) for c in columns if isinstance(c, dict)]
    return out


def _keeping_unknown(root: dict[str, Any]) -> dict[str, Any]:
    """The schema with every object in it keeping unknown fields (a copy; iterative, so depth costs no stack)."""
    root = copy.deepcopy(root)
    todo = [root]
    while todo:
        node = todo.pop()
        if node.get("type") == "object" or "properties" in node:
            node["x-kubernetes-preserve-unknown-fields"] = True
        children = [*(node.get("properties") or {}).values(), node.get("items"), node.get("additionalProperties")]
        todo += [c for c in children if isinstance(c, dict)]
    return root


def _column(column: dict[str, Any]) -> dict[str, Any]:
    out = {k: v for k, v in column.items() if k != "JSONPath"}
    if "JSONPath" in column:
        out["jsonPath"] = column["JSONPath"]
    return out


def _conversion(conversion: dict[str, Any]) -> dict[str, Any]:
    out = {k: v for k, v in conversion.items() if k not in ("webhookClientConfig", "conversionReviewVersions")}
    if conversion.get("strategy") == "Webhook":
        reviews = conversion.get("conversionReviewVersions") or ["v1beta1"]
        webhook: dict[str, Any] = {"conversionReviewVersions": reviews}
        if "webhookClientConfig" in conversion:
            webhook["clientConfig"] = conversion["webhookClientConfig"]
        out["webhook"] = webhook
    return out
