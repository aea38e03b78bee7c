"""The reference model of a restore: from a backup's objects, the options and the target as it was before, the
state a restore must leave and what its report must count, as docs/how-to/restore.md promises.

Small, slow and plain on purpose: every rule is written out again over dicts, sharing no code with statusvault,
so that the pairwise suite (tests/integration/test_compose.py) can hold the real restore to it. Resource names
are qualified (`plural.group`); the suite resolves the spellings users give (Kind, short name) before."""

from __future__ import annotations

import copy
import dataclasses
import fnmatch
import re
from collections.abc import Callable, Mapping
from typing import Any

CRD = "customresourcedefinitions.apiextensions.k8s.io"
RESTORE_STATUS = "statusvault.io/restore-status"


@dataclasses.dataclass(frozen=True)
class Type:
    """A custom resource type of the backup (its CRD is in the backup too)."""

    qualified: str
    kind: str
    namespaced: bool
    subresource: bool = True  # its status is written through /status (else in the create body)


@dataclasses.dataclass(frozen=True)
class Marker:
    """A pause marker: an annotation KEY=VALUE, or a field at a JSON pointer (one level under spec here)."""

    kind: str  # "annotation" | "field"
    key: str
    value: Any

    def on(self, obj: dict[str, Any]) -> bool:
        if self.kind == "annotation":
            return bool(obj["metadata"].get("annotations", {}).get(self.key) == self.value)
        return bool(_pointer(obj, self.key) == self.value)


CROSSPLANE = Marker("annotation", "crossplane.io/paused", "true")
CROSSPLANE_SHAPES = ("forProvider", "compositionRef", "compositionSelector", "resourceRefs")

Modify = Callable[[dict[str, Any], str], dict[str, Any]]  # (object as archived, its source namespace) -> patched


@dataclasses.dataclass(frozen=True)
class Options:
    namespaces: tuple[str, ...] = ()
    include: tuple[str, ...] = ()
    exclude: tuple[str, ...] = ()
    selector: str = ""
    names: tuple[str, ...] = ()
    cluster_resources: bool | None = None  # None: on unless -n is given
    mapping: Mapping[str, str] = dataclasses.field(default_factory=dict)
    status_include: tuple[str, ...] = ()  # "*": every type
    status_exclude: tuple[str, ...] = ()
    no_status: bool = False
    policy: str = "none"
    dry_run: str = ""  # client | server
    pause_auto: bool = False
    marker: Marker | None = None  # --pause-annotation / --pause-field ...
    pause_resources: tuple[str, ...] = ()  # ... for these (patterns over qualified names)
    keep_paused: tuple[str, ...] = ()
    modify: Modify | None = None  # --modifiers, as Python
    gated: tuple[str, ...] = ()  # --order: types whose group has a gate (that passes) before the next group
    later: tuple[str, ...] = ()  # --order: types of the next group (every other type comes first)
    replace_crds: bool = False  # --allow-privileged-resources covers CRDs: policy update replaces an existing one
    streamed: bool = False  # --stream (and nothing that plans first): CRDs are written as the archive is read


@dataclasses.dataclass(frozen=True)
class Live:
    """One object as it is on the cluster, as far as the restore promises anything about it."""

    spec: Any
    status: Any  # None: no status
    labels: Mapping[str, str]
    annotations: Mapping[str, str]
    paused_with: Marker | None = None  # a marker the restore added and left (recorded on the object)


Key = tuple[str, str, str]  # (qualified, namespace, name); namespace "" when cluster-scoped


@dataclasses.dataclass
class Target:
    served: set[str]  # the custom resource types the cluster serves
    objects: dict[Key, Live]
    phases: Mapping[str, frozenset[str]] = dataclasses.field(default_factory=dict)  # types whose status may only
    # have these phases (a schema stricter than the backup's): the server rejects a status write with another


@dataclasses.dataclass
class Expected:
    code: int  # 0 success, 2 bad options (a selection that matches nothing), 3 partial failure
    target: Target
    results: dict[Key, str]  # per object of the selection: created, updated, skipped, failed (would-... in dry runs)
    without_status: set[Key]  # objects whose saved status (in scope) is not on them at the end
    unpaused: int = 0  # objects the restore created paused and unpaused at the end
    left_paused: int = 0  # ... and left paused (--keep-paused, or the run failed)


SECRETS = "secrets"
Dependency = tuple[dict[str, Any], Key]  # a Secret the backup took, and the object (as archived) that named it


def secret_live(secret: dict[str, Any]) -> Live:
    """A Secret as the model sees it: its data and labels."""
    return Live(secret.get("data"), None, secret["metadata"].get("labels") or {}, {})


def restore(
    backup: list[dict[str, Any]],
    types: list[Type],
    opts: Options,
    before: Target,
    dependencies: list[Dependency] = (),  # type: ignore[assignment]
    authenticated: bool = False,
) -> Expected:
    """What restoring `backup` (custom objects only; every type's CRD is in it) with `opts` into `before` must do;
    with the Secrets the backup took as dependencies (docs/dependencies.md): each comes, before what names it,
    when the object that named it is restored from an authenticated backup (encrypted, or signed and verified), and
    a reference that names a mapped namespace moves with it."""
    by_kind = {t.kind: t for t in types}
    chosen = [(by_kind[o["kind"]], o) for o in backup if selected(types, o, opts)]
    user_selection = opts.namespaces or opts.include or opts.selector or opts.names
    if not chosen and user_selection:
        return Expected(2, copy.deepcopy(before), {}, set())
    # a restore of part of the backup (-n, -l, --name), planned first or streamed, creates only the CRDs its objects
    # need (and those --include-resources names)
    needed = {t.qualified for t, _ in chosen} | set(opts.include)
    partial = bool(opts.namespaces or opts.selector or opts.names)
    served = before.served | {
        t.qualified for t in types if _crd_comes(t, opts) and (not partial or t.qualified in needed)
    }
    after = Target(set(served), dict(before.objects))
    results: dict[Key, str] = {}
    lacking: set[Key] = set()
    paused: list[Key] = []
    wants: dict[Key, bool] = {}
    for t, obj in chosen:
        key = (t.qualified, opts.mapping.get(_ns(obj), _ns(obj)) if t.namespaced else "", obj["metadata"]["name"])
        desired = opts.modify(copy.deepcopy(obj), _ns(obj)) if opts.modify else copy.deepcopy(obj)
        if dependencies:
            _move_references(desired.get("spec"), opts.mapping)
        saved = desired.get("status") or None
        wanted = saved is not None and _wants_status(t, obj, opts)
        crd_updated = opts.policy == "update" and opts.replace_crds and _crd_comes(t, opts) and not opts.dry_run
        phases = None if crd_updated else before.phases.get(t.qualified)
        checked = _status_checked(t, key in before.objects, opts)
        rejected = wanted and checked and phases is not None and saved.get("phase") not in phases
        wants[key] = wanted
        if t.qualified not in served:
            results[key] = "failed"
            lacking |= {key} if wanted else set()
        elif key in before.objects and opts.policy == "none":
            results[key] = "skipped"  # its status is "kept": not counted
        elif key in before.objects:
            results[key] = "updated"
            kept = before.objects[key].status
            after.objects[key] = _live(desired, saved if wanted and not rejected else kept)
        else:
            results[key] = "created"
            marker = _marker(t, desired, opts)
            after.objects[key] = _live(desired, saved if wanted and not rejected else None, marker)
            paused += [key] if marker else []
        lacking |= {key} if rejected and results[key] != "skipped" else set()
    if authenticated and not opts.dry_run:
        restored = {(t.qualified, _ns(o), o["metadata"]["name"]) for t, o in chosen}
        for secret, source in dependencies:
            ns, name = secret["metadata"]["namespace"], secret["metadata"]["name"]
            if source in restored and (not opts.namespaces or ns in opts.namespaces):
                after.objects[(SECRETS, opts.mapping.get(ns, ns), name)] = secret_live(secret)
    if opts.gated and not opts.dry_run and any(k[0] in opts.gated and (r == "failed" or k in lacking)
                                               for k, r in results.items()):  # fmt: skip
        return _stopped_at_gate(before, after, results, lacking, paused, wants, opts)
    code = 3 if lacking or "failed" in results.values() else 0
    if opts.dry_run:
        would = {"created": "would-create", "updated": "would-update"}
        return Expected(code, copy.deepcopy(before), {k: would.get(r, r) for k, r in results.items()}, lacking)
    kept = lambda k: any(fnmatch.fnmatchcase(k[0], p) for p in opts.keep_paused)  # noqa: E731
    early = _unpaused_before_gate(results, lacking, paused, opts)
    unpaused = [k for k in paused if not kept(k) and (code == 0 or k in early)]
    for key in unpaused:  # once every object has its status, unless kept paused (or before its group's gate)
        after.objects[key] = dataclasses.replace(after.objects[key], paused_with=None)
    return Expected(code, after, results, lacking, len(unpaused), len(paused) - len(unpaused))


@dataclasses.dataclass
class Moved:
    code: int  # 0: every object and status verified in the target; 3: something is missing
    source: Target
    target: Target
    results: dict[Key, str]  # the restore's, per object
    source_paused: int  # objects the move paused in the source


def move(
    source: list[dict[str, Any]], types: list[Type], opts: Options, before: Target, delete_source: bool = False
) -> Moved:
    """What `statusvault move` with `opts` (selection, mapping, modifiers, pause markers) must do (docs/move.md):
    the selected objects paused in the source, backed up with the CRDs of the types selected, restored paused into
    the target `before` as their owner left them, then unpaused there; the source stays paused, or with
    `delete_source` its moved objects are deleted once the move is verified."""
    chosen_types = [t for t in types if _type_taken(t, opts)]
    moved = [o for o in source if selected(types, o, opts) and any(t.kind == o["kind"] for t in chosen_types)]
    restore_opts = Options(
        mapping=opts.mapping, pause_auto=True, marker=opts.marker, pause_resources=opts.pause_resources,
        modify=opts.modify,
    )  # fmt: skip
    restored = restore(moved, chosen_types, restore_opts, before)
    after = Target({t.qualified for t in types}, {})
    paused = 0
    for obj in source:
        t = next(t for t in types if t.kind == obj["kind"])
        key = (t.qualified, _ns(obj), obj["metadata"]["name"])
        marker = _marker(t, obj, restore_opts) if obj in moved else None
        paused += marker is not None
        if obj not in moved or not (delete_source and restored.code == 0):
            after.objects[key] = _live(obj, obj.get("status") or None, marker)
    return Moved(restored.code, after, restored.target, restored.results, paused)


def _move_references(spec: Any, mapping: Mapping[str, str]) -> None:
    """A `...SecretRef` that names a namespace names its mapped one."""
    for key, value in (spec or {}).items() if isinstance(spec, dict) else ():
        if key.endswith("SecretRef") and isinstance(value, dict) and value.get("namespace") in mapping:
            value["namespace"] = mapping[value["namespace"]]


def _type_taken(t: Type, opts: Options) -> bool:
    """Whether a backup takes a type: named by --include-resources (every custom type without it), not excluded;
    a cluster-scoped one as _cluster_scoped_taken says."""
    if (opts.include and t.qualified not in opts.include) or t.qualified in opts.exclude:
        return False
    return t.namespaced or _cluster_scoped_taken(t, opts)


def _cluster_scoped_taken(t: Type, opts: Options) -> bool:
    """As --include-cluster-resources says; without it, when no -n is given or the type is named."""
    if opts.cluster_resources is not None:
        return opts.cluster_resources
    return not opts.namespaces or t.qualified in opts.include


def _ns(obj: dict[str, Any]) -> str:
    return str(obj["metadata"].get("namespace", ""))


def selected(types: list[Type], obj: dict[str, Any], opts: Options) -> bool:
    """-n (the namespace backed up from), --include/--exclude-resources, cluster-scoped, -l, --name."""
    t = next(t for t in types if t.kind == obj["kind"])
    if (opts.include and t.qualified not in opts.include) or t.qualified in opts.exclude:
        return False
    if t.namespaced and opts.namespaces and _ns(obj) not in opts.namespaces:
        return False
    if not t.namespaced and not _cluster_scoped_taken(t, opts):
        return False
    if opts.names and not any(fnmatch.fnmatchcase(obj["metadata"]["name"], p) for p in opts.names):
        return False
    return selector_matches(opts.selector, obj["metadata"].get("labels") or {})


def _crd_comes(t: Type, opts: Options) -> bool:
    """A type's CRD comes with the restore unless CRDs are excluded: always without --include-resources, else
    when CRDs or the type are named (-n, -l and --name do not apply to CRDs)."""
    return CRD not in opts.exclude and (not opts.include or CRD in opts.include or t.qualified in opts.include)


def _status_checked(t: Type, exists: bool, opts: Options) -> bool:
    """Whether the server sees the saved status: in a real run; in a server dry run, unless the object would be
    created and takes its status through /status (there is nothing yet to send it to); never in a client one."""
    if opts.dry_run == "server":
        return exists or not t.subresource
    return opts.dry_run != "client"


def _wants_status(t: Type, obj: dict[str, Any], opts: Options) -> bool:
    """The annotation beats every flag; then --no-status, the exclusions, the inclusions; by default every
    custom resource's status."""
    override = (obj["metadata"].get("annotations") or {}).get(RESTORE_STATUS)
    if override is not None:
        return override == "true"
    if opts.no_status or t.qualified in opts.status_exclude:
        return False
    return not opts.status_include or "*" in opts.status_include or t.qualified in opts.status_include


def _stopped_at_gate(
    before: Target,
    after: Target,
    results: dict[Key, str],
    lacking: set[Key],
    paused: list[Key],
    wants: dict[Key, bool],
    opts: Options,
) -> Expected:
    """--order: objects of a gated group that failed (or lack their status) keep its gate from passing, and its
    onTimeout fail stops the run (exit 1) before the next group: those are never written (the ones with a saved
    status count as without it), and what was paused stays paused."""
    for key in [k for k in results if k[0] in opts.later]:
        if results.pop(key) != "skipped" and wants[key]:
            lacking.add(key)
        if key in before.objects:
            after.objects[key] = before.objects[key]
        else:
            after.objects.pop(key, None)
    left = [k for k in paused if k[0] not in opts.later]
    return Expected(1, after, results, lacking, 0, len(left))


def _unpaused_before_gate(results: dict[Key, str], lacking: set[Key], paused: list[Key], opts: Options) -> set[Key]:
    """--order: a gated group's paused objects are unpaused before its gate, when every object restored so far (its
    group's and the earlier groups') has its status."""
    if not opts.gated:
        return set()
    so_far = [k for k in results if k[0] not in opts.later]
    if any(results[k] == "failed" or k in lacking for k in so_far):
        return set()
    return {k for k in paused if k[0] in opts.gated}


def _marker(t: Type, obj: dict[str, Any], opts: Options) -> Marker | None:
    """The marker the restore adds when it creates `obj`: the generic one for the resources named, else the
    crossplane annotation (--pause auto) for objects shaped like crossplane's; none when the object carries it
    already (paused in the backup: it stays so)."""
    marker = None
    if opts.marker and any(fnmatch.fnmatchcase(t.qualified, p) for p in opts.pause_resources):
        marker = opts.marker
    elif opts.pause_auto and any(s in (obj.get("spec") or {}) for s in CROSSPLANE_SHAPES):
        marker = CROSSPLANE
    return None if marker is None or marker.on(obj) else marker


def _live(obj: dict[str, Any], status: Any, paused_with: Marker | None = None) -> Live:
    meta = obj["metadata"]
    return Live(obj.get("spec"), status, meta.get("labels") or {}, meta.get("annotations") or {}, paused_with)


def _pointer(obj: Any, pointer: str) -> Any:
    for token in pointer.split("/")[1:]:
        obj = obj.get(token) if isinstance(obj, dict) else None
    return obj


_TERM = re.compile(r"^\s*(!?)([\w./-]+)\s*(?:(==|=|!=)\s*([\w.-]*)|\s+(in|notin)\s*\(([^)]*)\))?\s*$")


def selector_matches(selector: str, labels: Mapping[str, str]) -> bool:
    """Kubernetes label selector semantics for the forms the suite uses: k=v, k==v, k!=v, k, !k, k in (..),
    k notin (..), joined by commas. `k!=v` and `notin` also match objects without the label."""
    for term in _split_terms(selector):
        m = _TERM.match(term)
        if m is None:
            raise ValueError(f"selector term {term!r} is not one the model knows")
        negated, key, op, value, set_op, values = m.groups()
        present = key in labels
        if set_op:
            members = {v.strip() for v in values.split(",")}
            ok = (present and labels[key] in members) if set_op == "in" else not (present and labels[key] in members)
        elif op in ("=", "=="):
            ok = present and labels[key] == value
        elif op == "!=":
            ok = not (present and labels[key] == value)
        else:
            ok = not present if negated else present
        if not ok:
            return False
    return True


def _split_terms(selector: str) -> list[str]:
    """Split on the commas outside parentheses."""
    terms, depth, current = [], 0, ""
    for ch in selector:
        depth += {"(": 1, ")": -1}.get(ch, 0)
        if ch == "," and depth == 0:
            terms.append(current)
            current = ""
        else:
            current += ch
    return [t for t in [*terms, current] if t.strip()]
