"""What a custom resource needs that is not in it: the objects it owns, the Secrets and ConfigMaps its spec names,
and what a project's rules tie to it (`backup --with-dependencies`, docs/dependencies.md).

A reference is read where the CRD's schema says a field is one, never guessed from a value:

- an object field with a string `name` whose field name says what it names (`...SecretRef`, `...secret`,
  `secretKeyRef`, `writeConnectionSecretToRef`, `publishConnectionDetailsTo`; `...ConfigMapRef`, `configMap`, ...);
- a key selector (`{name, key}`: Kubernetes' SecretKeySelector and ConfigMapKeySelector shapes), a Secret unless
  its name or description says ConfigMap;
- an array of such objects under a name that says what its items name (`imagePullSecrets`, `secretRefs`);
- a string field named `secretName` / `...SecretName` (`configMapName`), or one named `...Secret` whose description
  says it names a Secret ("the secret containing ...");
- an object reference whose `kind` is Secret or ConfigMap (`{kind, name[, namespace]}`).

Where the schema keeps no properties (x-kubernetes-preserve-unknown-fields, or no schema readable), only the
field-name rules apply. A reference's namespace is its own `namespace` when it has one, else its object's."""

from __future__ import annotations

import dataclasses
import fnmatch
import re
from collections.abc import Iterable, Iterator
from typing import Any

from statusvault.model import KubeObject, ObjectKey, ResourceType
from statusvault.vocabulary.kinds import CONFIGMAPS, SECRETS, SERVICES

SECRET, CONFIGMAP = SECRETS.qualified, CONFIGMAPS.qualified
ITEMS = "[]"  # a path step into every item of an array
MAX_DEPTH = 32  # schema nesting followed; deeper is left unread (no real CRD comes near)
SERVICE_ACCOUNT_TOKEN = "kubernetes.io/service-account-token"  # never taken: a token for any account it names

# Types whose objects a selected custom resource may own and that come with it (besides every custom type): the
# state a controller made for it and cannot make again the same (a CA, a password, a Service's cluster IP). Pods,
# workloads and RBAC are left out: their controllers recreate them, and a restore treats them as privileged.
OWNED_BUILTINS = (SECRETS, CONFIGMAPS, SERVICES)

_SECRET_NAMES = re.compile(r"(secretrefs?|secretkeyref|secret|secrets|passwordsecret|writeconnectionsecrettoref|"
                           r"publishconnectiondetailsto)$")  # fmt: skip
_CONFIGMAP_NAMES = re.compile(r"(configmaprefs?|configmapkeyref|configmap|configmaps)$")
_NAMES_A_SECRET = re.compile(
    r"\b(name of (a|the) secret|(the|a) secret (of type \S+ )?(containing|that contains|which contains|holding))\b",
    re.IGNORECASE,
)
_REF_KEYS = frozenset({"name", "namespace", "key", "optional", "kind", "apiVersion", "uid", "items", "defaultMode"})


@dataclasses.dataclass(frozen=True)
class RefField:
    """A field of a custom resource that names a Secret or ConfigMap: its path from the object's root (`[]` for
    each item of an array), what it names, and how (`object`: {name[, namespace]}; `string`: the name itself)."""

    path: tuple[str, ...]
    target: str  # SECRET or CONFIGMAP
    shape: str = "object"

    @property
    def dotted(self) -> str:
        return ".".join(self.path).replace(".[]", "[]")


@dataclasses.dataclass(frozen=True)
class Reference:
    """One object a selected object needs, and why: the reference's field, `ownerReferences`, or a rule's label."""

    target: ObjectKey
    source: ObjectKey
    via: str

    def to_list(self) -> list[str]:
        t, s = self.target, self.source
        return [t.qualified, t.namespace, t.name, s.qualified, s.namespace, s.name, self.via]

    @classmethod
    def from_list(cls, row: Any) -> Reference:
        """A manifest's edge; a malformed one is a ValueError (the manifest reader names the backup)."""
        if not (isinstance(row, list) and len(row) == 7 and all(isinstance(v, str) for v in row)):
            raise ValueError(f"malformed dependency edge {row!r:.80}")
        return cls(ObjectKey(*row[0:3]), ObjectKey(*row[3:6]), row[6])


def _target_of(name: str) -> str | None:
    low = name.lower()
    if _CONFIGMAP_NAMES.search(low) or "configmap" in low:
        return CONFIGMAP
    if _SECRET_NAMES.search(low):
        return SECRET
    return None


def schema_fields(schema: dict[str, Any] | None) -> list[RefField] | None:
    """The reference fields an openAPIV3Schema declares (under spec, or anywhere but status and metadata); None when
    there is no schema to read (then `references` reads by field names alone)."""
    if not isinstance(schema, dict) or not isinstance(schema.get("properties"), dict):
        return None
    out: list[RefField] = []
    for name, sub in schema["properties"].items():
        if name not in ("status", "metadata", "apiVersion", "kind"):
            _walk_schema(sub, (name,), out, 0)
    return out


def _walk_schema(schema: Any, path: tuple[str, ...], out: list[RefField], depth: int) -> None:
    if not isinstance(schema, dict) or depth > MAX_DEPTH:
        return
    field = path[-1] if path[-1] != ITEMS else path[-2] if len(path) > 1 else ""
    kind = schema.get("type")
    props = schema.get("properties") if isinstance(schema.get("properties"), dict) else None
    if kind == "string" and path[-1] != ITEMS:
        target = _string_target(field, str(schema.get("description") or ""))
        if target:
            out.append(RefField(path, target, "string"))
        return
    if kind == "array":
        _walk_schema(schema.get("items"), (*path, ITEMS), out, depth + 1)
        return
    if props is None:
        if schema.get("x-kubernetes-preserve-unknown-fields"):
            out.append(RefField(path, "", "unknown"))  # read by field names alone
        return
    target = _object_target(field, schema, props)
    if target:
        out.append(RefField(path, target))
        return
    for name, sub in props.items():
        _walk_schema(sub, (*path, name), out, depth + 1)


def _string_target(field: str, description: str) -> str | None:
    low = field.lower()
    if low.endswith("secretname"):
        return SECRET
    if low.endswith("configmapname"):
        return CONFIGMAP
    if low.endswith("secret") and _NAMES_A_SECRET.search(description):
        return SECRET
    return None


def _object_target(field: str, schema: dict[str, Any], props: dict[str, Any]) -> str | None:
    """What an object-typed field names, if it is a reference: by its name, or by its shape (a key selector)."""
    if (props.get("name") or {}).get("type") != "string" or not set(props) <= _REF_KEYS:
        return None
    described = str(schema.get("description") or "").lower()
    by_name = _target_of(field)
    if by_name:
        return by_name
    if "kind" in props:
        return None  # an object reference: its kind says, per object (read from the value's `kind`)
    if "key" in props:  # a key selector: Secret unless it says ConfigMap
        return CONFIGMAP if "configmap" in described or "config map" in described else SECRET
    return None


def references(obj: KubeObject, fields: list[RefField] | None, source: ObjectKey) -> Iterator[Reference]:
    """The Secrets and ConfigMaps `obj` names, once per reference (two fields naming one Secret are two), through
    the schema's fields (or, without a schema, its field names); object references with `kind: Secret|ConfigMap`
    anywhere in its spec too (one field found both ways is one reference)."""
    seen: set[tuple[str, str, str, str]] = set()
    own_ns = source.namespace
    for ref in _found(obj, fields):
        target, ns, name, via = ref
        ns = ns or own_ns
        if not name or not ns or (target, ns, name, via) in seen:
            continue  # a cluster-scoped object's reference without a namespace names nothing it can be found by
        seen.add((target, ns, name, via))
        yield Reference(ObjectKey(target, ns, name), source, via)


def _found(obj: KubeObject, fields: list[RefField] | None) -> Iterator[tuple[str, str, str, str]]:
    if fields is None:
        for name, value in obj.items():
            if name not in ("status", "metadata"):
                yield from _by_names(value, (name,), 0)
        return
    for f in fields:
        for path, value in _at(obj, f.path):
            if f.shape == "unknown":
                yield from _by_names(value, path, 0)
            elif f.shape == "string":
                if isinstance(value, str):
                    yield f.target, "", value, _dotted(path)
            elif isinstance(value, dict):
                yield from _object_ref(value, f.target, path)
    for name in ("spec",):  # typed object references ({kind, name}) are read from the value wherever they are
        yield from _kinded(obj.get(name), (name,), 0)


def _object_ref(value: dict[str, Any], target: str, path: tuple[str, ...]) -> Iterator[tuple[str, str, str, str]]:
    name, ns = value.get("name"), value.get("namespace")
    if isinstance(name, str) and (ns is None or isinstance(ns, str)):
        yield target, ns or "", name, _dotted(path)


def _by_names(value: Any, path: tuple[str, ...], depth: int) -> Iterator[tuple[str, str, str, str]]:
    """References found by field names alone (a part of the object the schema does not describe)."""
    if depth > MAX_DEPTH:
        return
    if isinstance(value, list):
        for i, item in enumerate(value):
            yield from _by_names(item, (*path, f"[{i}]"), depth + 1)
        return
    if not isinstance(value, dict):
        return
    for name, sub in value.items():
        low = name.lower()
        if isinstance(sub, str) and (low.endswith("secretname") or low.endswith("configmapname")):
            yield (SECRET if low.endswith("secretname") else CONFIGMAP), "", sub, _dotted((*path, name))
            continue
        target = _target_of(name)
        if target and isinstance(sub, dict) and isinstance(sub.get("name"), str) and set(sub) <= _REF_KEYS:
            yield from _object_ref(sub, target, (*path, name))
            continue
        yield from _by_names(sub, (*path, name), depth + 1)


def _kinded(value: Any, path: tuple[str, ...], depth: int) -> Iterator[tuple[str, str, str, str]]:
    if depth > MAX_DEPTH:
        return
    if isinstance(value, list):
        for i, item in enumerate(value):
            yield from _kinded(item, (*path, f"[{i}]"), depth + 1)
        return
    if not isinstance(value, dict):
        return
    kind, api = value.get("kind"), value.get("apiVersion", "v1")
    if kind in ("Secret", "ConfigMap") and api == "v1" and isinstance(value.get("name"), str):
        yield from _object_ref(value, SECRET if kind == "Secret" else CONFIGMAP, path)
        return
    for name, sub in value.items():
        yield from _kinded(sub, (*path, name), depth + 1)


def _at(obj: Any, path: tuple[str, ...]) -> Iterator[tuple[tuple[str, ...], Any]]:
    """Every value at `path` in `obj` with its concrete path (`[i]` for each array item)."""
    found: list[tuple[tuple[str, ...], Any]] = [((), obj)]
    for step in path:
        nxt: list[tuple[tuple[str, ...], Any]] = []
        for where, value in found:
            if step == ITEMS:
                if isinstance(value, list):
                    nxt += [((*where, f"[{i}]"), item) for i, item in enumerate(value)]
            elif isinstance(value, dict) and step in value:
                nxt.append(((*where, step), value[step]))
        found = nxt
    return iter(found)


def _dotted(path: Iterable[str]) -> str:
    return ".".join(path).replace(".[", "[")


def crd_schema(crd: KubeObject | None, version: str) -> dict[str, Any] | None:
    """The openAPIV3Schema of one version of a CRD (None: no CRD, no such version, or no schema)."""
    spec = (crd or {}).get("spec") or {}
    for v in spec.get("versions") or ():
        if isinstance(v, dict) and v.get("name") == version:
            schema = (v.get("schema") or {}).get("openAPIV3Schema")
            return schema if isinstance(schema, dict) else None
    schema = (spec.get("validation") or {}).get("openAPIV3Schema")  # a v1beta1 CRD's one schema
    return schema if isinstance(schema, dict) else None


# --- Project rules: what a project ties to its objects besides references and ownership ---------------------------


@dataclasses.dataclass(frozen=True)
class LabelRule:
    """Objects in a selected object's namespace that carry `label`: with the selected object's name as its value
    (`value_is_name`), or with any value; taken for selected objects of the `groups` (shell-style patterns)."""

    project: str
    groups: tuple[str, ...]
    label: str
    value_is_name: bool
    on_by_default: bool  # the project's objects are useless without them: followed without --with-dependencies

    def applies(self, rt: ResourceType) -> bool:
        return any(fnmatch.fnmatchcase(rt.group, g) for g in self.groups)

    @property
    def via(self) -> str:
        return f"label {self.label}" + ("=<name>" if self.value_is_name else "")


_CAPI = ("cluster.x-k8s.io", "*.cluster.x-k8s.io")
PROJECT_RULES: tuple[LabelRule, ...] = (
    # Cluster API: the Secrets a cluster's controllers made (CA, kubeconfig, etcd, service account keys) carry the
    # cluster's name; clusterctl move also moves whatever is labelled for it (its docs: "Move").
    LabelRule("cluster-api", ("cluster.x-k8s.io",), "cluster.x-k8s.io/cluster-name", True, True),
    LabelRule("cluster-api", _CAPI, "clusterctl.cluster.x-k8s.io/move", False, True),
    # CloudNativePG: the Secrets and ConfigMaps its operator makes for a Cluster carry the cluster's name.
    LabelRule("cnpg", ("postgresql.cnpg.io",), "cnpg.io/cluster", True, True),
)


def default_on(types: Iterable[ResourceType]) -> list[str]:
    """The projects whose rules say their selected objects come with their dependencies by default."""
    return sorted({r.project for r in PROJECT_RULES for rt in types if r.on_by_default and r.applies(rt)})


def taken_secret(obj: KubeObject) -> bool:
    """Whether a Secret may come as a dependency: never a service account token (created in a namespace, it is a
    token for any account its annotation names)."""
    return obj.get("type") != SERVICE_ACCOUNT_TOKEN


# --- Restoring: which objects of a backup are dependencies, and the references to move with a namespace ----------

Triple = tuple[str, str, str]  # (resource.group, namespace, name) as archived


class DependencyIndex:
    """A backup's dependency graph (its manifest's `dependencies`): what brought each dependency, and which fields of
    which objects name a namespace (moved by --namespace-mapping)."""

    def __init__(self, edges: list[Reference]):
        self.sources: dict[Triple, list[Triple]] = {}
        self.fields: dict[Triple, list[str]] = {}
        self.edges: dict[Triple, list[Reference]] = {}
        for e in edges:
            target, source = _key(e.target), _key(e.source)
            self.sources.setdefault(target, []).append(source)
            self.edges.setdefault(target, []).append(e)
            if e.via != "ownerReferences" and not e.via.startswith("label "):
                self.fields.setdefault(source, []).append(e.via)

    @classmethod
    def of(cls, manifest: dict[str, Any]) -> DependencyIndex | None:
        """The manifest's graph, None when it has none; ValueError when it is malformed."""
        deps = manifest.get("dependencies")
        if deps is None:
            return None
        if not isinstance(deps, dict) or not isinstance(deps.get("edges"), list):
            raise ValueError("its dependencies are not an object with a list of edges")
        return cls([Reference.from_list(row) for row in deps["edges"]])

    def brought_by(self, target: Triple) -> list[Triple]:
        return self.sources.get(target, [])


def _key(k: ObjectKey) -> Triple:
    return k.qualified, k.namespace, k.name


_STEP = re.compile(r"([^.\[\]]+)|\[(\d+)\]")


def move_reference(obj: KubeObject, path: str, mapping: dict[str, str]) -> bool:
    """Point the reference at `path` (`spec.x[0].secretRef`) to its namespace's new name; whether it moved. Only a
    reference that names its namespace moves (one without follows its object's)."""
    value: Any = obj
    for m in _STEP.finditer(path):
        name, index = m.groups()
        if name is not None:
            value = value.get(name) if isinstance(value, dict) else None
        else:
            value = value[int(index)] if isinstance(value, list) and int(index) < len(value) else None
        if value is None:
            return False
    if not isinstance(value, dict) or not isinstance(value.get("namespace"), str):
        return False
    moved = mapping.get(value["namespace"])
    if moved is None:
        return False
    value["namespace"] = moved
    return True
