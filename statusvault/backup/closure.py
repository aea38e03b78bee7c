"""A backup's dependencies (`--with-dependencies`): after the selected objects, what they need (dependencies.py),
listed as pages stream and written to the same archive, each with the reference that brought it.

Memory grows with the selected objects' identities (UID, key) and their references, never with the cluster's
objects: the unselected custom types are read as metadata (for ownership), the taken objects' bodies are
listed page by page and written at once."""

from __future__ import annotations

import dataclasses
import functools
import logging
from collections import defaultdict
from collections.abc import Callable, Iterator
from typing import Any

import orjson

from statusvault.archive import member_path
from statusvault.dependencies import (
    OWNED_BUILTINS,
    SECRET,
    LabelRule,
    Reference,
    RefField,
    crd_schema,
    references,
    schema_fields,
    taken_secret,
)
from statusvault.errors import ConfigError, Forbidden, NotFound
from statusvault.kube.api import KubeApi
from statusvault.kube.discovery import Discovery
from statusvault.model import KubeObject, ObjectKey, ResourceType, object_key
from statusvault.vocabulary.kinds import CRDS

log = logging.getLogger(__name__)

PER_NAMESPACE_MAX = 8  # LIST each namespace of interest up to this many; more: one cluster-wide LIST, filtered
Write = Callable[[ResourceType, str, KubeObject], None]  # (type, member path, object): archive it


@dataclasses.dataclass
class Closure:
    """What the dependencies came to: every edge (object, what brought it, how), the references to objects that
    do not exist, and the objects written per type."""

    edges: list[Reference] = dataclasses.field(default_factory=list)
    missing: list[Reference] = dataclasses.field(default_factory=list)
    written: dict[str, int] = dataclasses.field(default_factory=dict)
    projects: tuple[str, ...] = ()
    left_out: dict[str, int] = dataclasses.field(default_factory=dict)  # why -> objects not taken (default mode)

    def to_dict(self) -> dict[str, Any]:
        return {
            "objects": sum(self.written.values()),
            "projects": list(self.projects),
            "leftOut": dict(self.left_out),
            "edges": [e.to_list() for e in self.edges],
            "missing": [e.to_list() for e in self.missing],
        }


_BUILTIN_DEPENDENCIES = frozenset(rt.qualified for rt in OWNED_BUILTINS)


class DependencyCollector:
    """Sees every selected object as it is archived, then lists and writes what they need."""

    def __init__(
        self,
        client: KubeApi,
        discovery: Discovery,
        selected: set[str],
        rules: tuple[LabelRule, ...],
        secrets_allowed: str,
        explicit: bool = True,
        with_crds: bool = False,
    ):
        self.client, self.discovery, self.selected, self.rules = client, discovery, selected, rules
        self.secrets_allowed = secrets_allowed  # "" when Secret data may be archived; else why not (the refusal)
        self.seeds: dict[str, ObjectKey] = {}  # UID -> key of each selected (or taken) object
        self.named: dict[tuple[str, str, str], list[Reference]] = defaultdict(list)  # target -> references
        self.labelled: dict[tuple[str, str, str], Reference] = {}  # (namespace, label, value or "") -> edge proto
        self.namespaces: set[str] = set()  # where selected objects and referenced objects live
        self._fields: dict[str, list[RefField] | None] = {}
        self.with_crds = with_crds  # the CRDs of the custom types taken come too (as the selected types' do)
        self.crds: set[str] = set()  # CRDs archived
        self.refused: set[tuple[str, str, str]] = set()  # found, never taken (service account tokens)
        # Secrets, ConfigMaps and Services the selection archived itself (a namespace backup takes them): a reference
        # to one is recorded, the object not written again
        self.archived: set[tuple[str, str, str]] = set()
        # asked for (--with-dependencies), or on by default: then only from the objects of projects whose rules say
        # so, and what may not be listed or archived in clear is left out with a warning instead of failing the backup
        self.explicit = explicit
        self.projects: set[str] = set()  # on by default: the projects whose objects were seen
        self.closure = Closure()

    def see(self, rt: ResourceType, data: bytes) -> None:
        """A selected object, in its archived form (parsed again: the archive's writer has only its bytes)."""
        obj = orjson.loads(data)
        key = object_key(rt, obj)
        if rt.qualified in _BUILTIN_DEPENDENCIES:
            self.archived.add(_triple(key))  # and, selected, what it owns is its dependency (below)
        if rt.is_crd:
            self.crds.add(key.name)
            return
        if not self.explicit:
            projects = {r.project for r in self.rules if r.on_by_default and r.applies(rt)}
            if not projects:
                return
            self.projects |= projects
        meta = obj.get("metadata") or {}
        uid = meta.get("uid")
        if isinstance(uid, str) and uid:
            self.seeds[uid] = key
        if key.namespace:
            self.namespaces.add(key.namespace)
        if not rt.custom or rt.is_crd:
            return
        for ref in references(obj, self._fields_of(rt), key):
            self.named[_triple(ref.target)].append(ref)
            self.namespaces.add(ref.target.namespace)
        for rule in self.rules:
            if rule.applies(rt) and key.namespace:
                value = key.name if rule.value_is_name else ""
                self.labelled.setdefault((key.namespace, rule.label, value), Reference(key, key, rule.via))

    def _fields_of(self, rt: ResourceType) -> list[RefField] | None:
        """The reference fields of the type's schema, read from its CRD once (None: none readable)."""
        if rt.qualified not in self._fields:
            try:
                crd = self.client.get(CRDS, None, rt.qualified)
            except Forbidden:
                log.warning("may not read the CRD of %s: its references are found by field names alone", rt.qualified)
                crd = None
            self._fields[rt.qualified] = schema_fields(crd_schema(crd, rt.version))
        return self._fields[rt.qualified]

    @property
    def following(self) -> bool:
        """Whether dependencies are followed: asked for, or on by default and objects of such a project were seen."""
        return self.explicit or bool(self.projects)

    def write(self, write: Write) -> Closure:
        """List and write the dependencies: the custom resources the selected ones own (any depth), then the
        Secrets, ConfigMaps and Services they own, name or a project's rule ties to them."""
        self.closure.projects = tuple(sorted(self.projects))
        owned = self._owned_custom()
        for rt in sorted(owned, key=lambda t: t.qualified):
            self._write_crd(rt, write)
            self._write_type(rt, functools.partial(_owned_by, owned[rt]), write)
        builtins = [
            served
            for served in (self.discovery.by_qualified(rt.qualified) for rt in OWNED_BUILTINS)
            if served is not None and "list" in served.verbs
        ]
        self._seed_owned_builtins(builtins)
        for served in builtins:
            self._write_type(served, self._builtin_reason(served), write)
        taken = {_triple(e.target) for e in self.closure.edges}
        for target, refs in sorted(self.named.items()):
            if target not in taken and target not in self.refused:
                self.closure.missing += refs[:1]
        if self.closure.missing:
            log.warning("%d referenced object(s) do not exist: %s", len(self.closure.missing),
                        ", ".join(str(r.target) for r in self.closure.missing[:5]))  # fmt: skip
        return self.closure

    def _write_crd(self, rt: ResourceType, write: Write) -> None:
        """The CRD of a custom type taken as a dependency, before its objects, unless archived already."""
        crd_type = self.discovery.by_qualified(CRDS.qualified)
        if not self.with_crds or crd_type is None or rt.qualified in self.crds:
            return
        crd = self.client.get(CRDS, None, rt.qualified)
        if crd is not None:
            self.crds.add(rt.qualified)
            write(crd_type, member_path(ObjectKey(crd_type.qualified, "", rt.qualified)), crd)

    def _owned_custom(self) -> dict[ResourceType, dict[str, Reference]]:
        """The unselected custom resources that selected objects own, at any depth (from metadata-only LISTs):
        per type, UID -> the edge that brought it."""
        children: dict[str, list[tuple[ResourceType, dict[str, Any]]]] = defaultdict(list)
        for rt in self.discovery.custom():
            if rt.qualified in self.selected or "list" not in rt.verbs or not rt.namespaced:
                continue
            for meta in self._metadata(rt):
                for ref in meta.get("ownerReferences") or ():
                    if isinstance(ref, dict) and isinstance(ref.get("uid"), str):
                        children[ref["uid"]].append((rt, meta))
        owned: dict[ResourceType, dict[str, Reference]] = defaultdict(dict)
        frontier = list(self.seeds)
        while frontier:
            uid = frontier.pop()
            for rt, meta in children.pop(uid, ()):
                child = meta.get("uid", "")
                if not isinstance(child, str) or not child or child in self.seeds:
                    continue
                key = ObjectKey(rt.qualified, meta.get("namespace", ""), meta.get("name", ""))
                owned[rt][child] = Reference(key, self.seeds[uid], "ownerReferences")
                self.seeds[child] = key
                frontier.append(child)
        return owned

    def _seed_owned_builtins(self, builtins: list[ResourceType]) -> None:
        """Ownership among the built-in types followed to a fixed point, whatever order they are listed in: a Secret
        owned by a Service that a custom resource owns (or names, or a project's rule ties to it) is the Service's
        dependency as much as the Service is the custom resource's. From metadata-only LISTs, before any is
        written: each one brought makes its UID a seed, so what it owns is brought in turn."""
        metas = [(rt, meta) for rt in builtins for meta in self._metadata(rt)]
        changed = True
        while changed:
            changed = False
            for rt, meta in metas:
                uid = meta.get("uid")
                if not isinstance(uid, str) or not uid or uid in self.seeds:
                    continue
                if self._builtin_reason(rt)({"metadata": meta}) is not None:
                    self.seeds[uid] = ObjectKey(rt.qualified, meta.get("namespace", ""), meta.get("name", ""))
                    changed = True

    def _metadata(self, rt: ResourceType) -> Iterator[dict[str, Any]]:
        for ns in self._scopes():
            try:
                for meta in self.client.list_metadata(rt, ns):
                    if ns is not None or meta.get("namespace") in self.namespaces:
                        yield meta
            except (Forbidden, NotFound) as e:
                log.warning("cannot list %s for dependencies (%s): objects it owns are not followed", rt.qualified, e)
                return

    def _scopes(self) -> list[str | None]:
        if len(self.namespaces) <= PER_NAMESPACE_MAX:
            scopes: list[str | None] = [*sorted(self.namespaces)]
            return scopes
        return [None]

    def _builtin_reason(self, rt: ResourceType) -> Callable[[KubeObject], Reference | None]:
        def reason(obj: KubeObject) -> Reference | None:
            meta = obj.get("metadata") or {}
            key = object_key(rt, obj)
            for owner in meta.get("ownerReferences") or ():
                source = self.seeds.get(owner.get("uid", "")) if isinstance(owner, dict) else None
                if source is not None:
                    return Reference(key, source, "ownerReferences")
            refs = self.named.get(_triple(key))
            if refs:
                return Reference(key, refs[0].source, refs[0].via)
            labels = meta.get("labels") or {}
            for label, value in labels.items() if isinstance(labels, dict) else ():
                edge = self.labelled.get((key.namespace, label, value)) or self.labelled.get((key.namespace, label, ""))
                if edge is not None:
                    return Reference(key, edge.source, edge.via)
            return None

        return reason

    def _labelled_edges(self, rt: ResourceType, obj: KubeObject) -> list[Reference]:
        """The project rules' label references to an object (recorded beside an owner or spec reference to it)."""
        meta = obj.get("metadata") or {}
        key, labels = object_key(rt, obj), meta.get("labels") or {}
        found = []
        for label, value in labels.items() if isinstance(labels, dict) else ():
            edge = self.labelled.get((key.namespace, label, value)) or self.labelled.get((key.namespace, label, ""))
            if edge is not None:
                found.append(Reference(key, edge.source, edge.via))
        return found

    def _write_type(self, rt: ResourceType, reason: Callable[[KubeObject], Reference | None], write: Write) -> None:
        for ns in self._scopes():
            try:
                pages = self.client.list_pages(rt, ns, "", 500)
                for page in pages:
                    for obj in page:
                        self._take(rt, obj, reason, write, ns)
            except Forbidden as e:
                if not self.explicit:
                    why = f"may not list {rt.qualified}"
                    log.warning("dependencies in %s not followed: %s (%s); grant list on it, or give "
                                "--no-with-dependencies", rt.qualified, why, e.reason)  # fmt: skip
                    self.closure.left_out[why] = self.closure.left_out.get(why, 0) + 1
                    return
                raise ConfigError(
                    f"cannot back up the dependencies in {rt.qualified}: the API server refused to list it "
                    f"({e.code} {e.reason}); grant list on it, or leave out --with-dependencies"
                ) from e

    def _take(
        self,
        rt: ResourceType,
        obj: KubeObject,
        reason: Callable[[KubeObject], Reference | None],
        write: Write,
        ns: str | None,
    ) -> None:
        meta = obj.get("metadata") or {}
        if ns is None and meta.get("namespace") not in self.namespaces:
            return
        edge = reason(obj)
        if edge is None or "deletionTimestamp" in meta:
            return
        if rt.qualified == SECRET:
            if not taken_secret(obj):
                log.info("left out %s: a service account token is never taken as a dependency", edge.target)
                self.refused.add(_triple(edge.target))
                return
            if self.secrets_allowed and not self.explicit:
                why = "Secret data in a backup not encrypted"
                if not self.closure.left_out.get(why):
                    log.warning("left out the Secrets the rules of %s bring: %s", ", ".join(sorted(self.projects)),
                                self.secrets_allowed)  # fmt: skip
                self.closure.left_out[why] = self.closure.left_out.get(why, 0) + 1
                self.refused.add(_triple(edge.target))
                return
            if self.secrets_allowed:
                raise ConfigError(
                    f"{edge.target} ({edge.via} of {edge.source}) holds Secret data, and {self.secrets_allowed}"
                )
        if _triple(edge.target) in self.archived:  # the selection took it: its references are recorded, no more
            self.closure.edges += [edge, *(r for r in dict.fromkeys(self.named.get(_triple(edge.target)) or ())
                                           if r != edge)]  # fmt: skip
            return
        refs = [*(self.named.get(_triple(edge.target)) or ()), *self._labelled_edges(rt, obj)]
        self.closure.edges += [
            edge,
            *(r for r in dict.fromkeys(refs) if r != edge),
        ]  # each object once, every reference
        self.closure.written[rt.qualified] = self.closure.written.get(rt.qualified, 0) + 1
        uid = _uid(obj)
        if uid:
            self.seeds[uid] = edge.target
        if rt.custom:
            for ref in references(obj, self._fields_of(rt), edge.target):
                self.named[_triple(ref.target)].append(ref)
        write(rt, member_path(edge.target), obj)


def _owned_by(edges: dict[str, Reference], obj: KubeObject) -> Reference | None:
    return edges.get(_uid(obj))


def _uid(obj: KubeObject) -> str:
    uid = (obj.get("metadata") or {}).get("uid")
    return uid if isinstance(uid, str) else ""


def _triple(key: ObjectKey) -> tuple[str, str, str]:
    return key.qualified, key.namespace, key.name
