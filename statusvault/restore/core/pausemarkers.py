"""Objects created already paused, unpaused once every object of the restore has its status.

Between an object's create and its status write its operator can see it without status and re-provision
(Velero #6017, #1687). With `--pause`, each object is created carrying its operator's pause marker (as
Upbound's Crossplane migration does), and a record of what statusvault added, so that the unpause removes
exactly that (an object already paused in the backup stays paused: Cluster API #12742). The unpause is a
JSON patch guarded by resourceVersion that touches only the marker and the record.
"""

from __future__ import annotations

import copy
import dataclasses
import enum
import fnmatch
import json
from typing import Any

from statusvault.errors import ConfigError
from statusvault.model import KubeObject, ResourceType

RECORD = "statusvault.io/paused-by-restore"  # what statusvault added, so only that is taken away again
_ABSENT = "absent"


class MarkerKind(enum.StrEnum):
    """Where a pause marker is: an annotation, or a field at a JSON pointer. The value is what the record keeps."""

    ANNOTATION = "annotation"
    FIELD = "field"


@dataclasses.dataclass(frozen=True)
class Marker:
    """How an operator is told to leave an object alone: an annotation, or a field at a JSON pointer."""

    kind: MarkerKind
    key: str  # the annotation key, or the JSON pointer
    value: Any  # the value that means paused

    def __post_init__(self) -> None:
        object.__setattr__(
            self, "kind", MarkerKind(self.kind)
        )  # "field" read from a file is the member; else ValueError

    def describe(self) -> str:
        return f"{self.key}={json.dumps(self.value) if self.kind is MarkerKind.FIELD else self.value}"

    def present(self, obj: KubeObject) -> bool:
        """Whether the object is paused by this marker already."""
        if self.kind is MarkerKind.ANNOTATION:
            return bool(((obj.get("metadata") or {}).get("annotations") or {}).get(self.key) == self.value)
        return bool(_get(obj, self.key) == self.value)

    def apply(self, body: KubeObject) -> None:
        """Add the marker to a create body, with the record of what it replaced."""
        meta = body.setdefault("metadata", {})
        annotations = meta.setdefault("annotations", {})
        if self.kind is MarkerKind.ANNOTATION:
            was = annotations.get(self.key, _ABSENT)
            annotations[self.key] = self.value
        else:
            was = _get(body, self.key, _ABSENT)
            _set(body, self.key, self.value)
        annotations[RECORD] = json.dumps({"kind": self.kind, "key": self.key, "was": was}, separators=(",", ":"))


@dataclasses.dataclass(frozen=True)
class Profile:
    name: str
    marker: Marker
    groups: tuple[str, ...] = ()
    kinds: tuple[str, ...] = ()  # empty: every kind of the groups
    shapes: tuple[str, ...] = ()  # JSON pointers any of which marks an object of the profile, whatever its group

    def matches(self, rt: ResourceType, obj: KubeObject) -> bool:
        if self.kinds and rt.kind not in self.kinds:
            return False
        if any(fnmatch.fnmatchcase(rt.group, g) for g in self.groups):
            return True
        return any(_get(obj, p, _ABSENT) != _ABSENT for p in self.shapes)


PROFILES = (
    Profile("cluster-api Cluster", Marker(MarkerKind.FIELD, "/spec/paused", True), ("cluster.x-k8s.io",), ("Cluster",)),
    Profile(
        "cluster-api",
        Marker(MarkerKind.ANNOTATION, "cluster.x-k8s.io/paused", "true"),
        ("cluster.x-k8s.io", "*.cluster.x-k8s.io"),
    ),
    Profile(
        "crossplane",
        Marker(MarkerKind.ANNOTATION, "crossplane.io/paused", "true"),
        ("*.crossplane.io", "*.upbound.io", "*.crossplane-contrib.io"),
        shapes=("/spec/forProvider", "/spec/compositionRef", "/spec/compositionSelector", "/spec/resourceRefs"),
    ),
    Profile("flux", Marker(MarkerKind.FIELD, "/spec/suspend", True), ("*.toolkit.fluxcd.io",)),
    Profile("argo-rollouts", Marker(MarkerKind.FIELD, "/spec/paused", True), ("argoproj.io",), ("Rollout",)),
)


@dataclasses.dataclass(frozen=True)
class PauseOptions:
    """--pause auto|none, generic markers for a named set of resources, and what stays paused."""

    auto: bool = False
    annotation: tuple[str, str] | None = None  # KEY=VALUE
    field: tuple[str, Any] | None = None  # /json/pointer=VALUE
    resources: tuple[str, ...] = ()  # qualified names the generic marker applies to (wildcards allowed)
    keep_paused: tuple[str, ...] = ()  # qualified names left paused at the end (wildcards allowed)
    profiled: tuple[str, ...] = ()  # qualified names paused by their known profile without --pause auto (fencing)

    @property
    def enabled(self) -> bool:
        return self.auto or self.annotation is not None or self.field is not None or bool(self.profiled)

    def marker_for(self, rt: ResourceType, obj: KubeObject) -> Marker | None:
        """The marker an object is created with, or None (not paused by this restore)."""
        if rt.is_crd or not rt.custom:
            return None
        if any(fnmatch.fnmatchcase(rt.qualified, r) for r in self.resources):
            if self.annotation is not None:
                return Marker(MarkerKind.ANNOTATION, *self.annotation)
            if self.field is not None:
                return Marker(MarkerKind.FIELD, *self.field)
        if self.auto or rt.qualified in self.profiled:
            return next((p.marker for p in PROFILES if p.matches(rt, obj)), None)
        return None

    def keeps(self, qualified: str) -> bool:
        return any(fnmatch.fnmatchcase(qualified, r) for r in self.keep_paused)


def pause_options(
    mode: str, annotation: str, field: str, resources: tuple[str, ...], keep: tuple[str, ...]
) -> PauseOptions:
    """PauseOptions from the flags' values; ConfigError names the flag that is wrong."""
    if mode not in ("none", "auto"):
        raise ConfigError(f"--pause must be auto or none, not {mode!r}")
    ann = _pair(annotation, "--pause-annotation", "KEY=VALUE") if annotation else None
    fld = _pair(field, "--pause-field", "/json/pointer=VALUE") if field else None
    if fld is not None:
        if not fld[0].startswith("/"):
            raise ConfigError(f"--pause-field {field!r}: the path is a JSON pointer starting with '/'")
        fld = (fld[0], _json_value(fld[1]))
    if ann and fld:
        raise ConfigError("give --pause-annotation or --pause-field, not both")
    if (ann or fld) and not resources:
        raise ConfigError("--pause-annotation and --pause-field need --pause-resources: the resources they apply to")
    if resources and not (ann or fld):
        raise ConfigError("--pause-resources needs --pause-annotation or --pause-field")
    opts = PauseOptions(mode == "auto", ann, fld, resources, keep)
    if keep and not opts.enabled:
        raise ConfigError("--keep-paused needs --pause")
    return opts


def pause_lost(marker: Marker) -> str:
    """Why an object created with `marker` is not paused: the server did not keep the marker."""
    if marker.kind is MarkerKind.FIELD:
        cause = f"the server dropped the field {marker.key} (its CRD's schema has no such field?)"
    else:
        cause = f"the server dropped the annotation {marker.key} (a mutating webhook?)"
    return (
        f"created WITHOUT its pause marker {marker.describe()}: {cause}; its operator was free to act on it "
        "before its status was written. Pause it with a marker the server keeps (--pause-annotation)"
    )


def unmarked_warning(resource: str) -> str:
    """The report's warning for a custom resource that --pause auto has no marker for."""
    return (
        f"--pause auto knows no pause marker for {resource}: its objects were NOT paused (name a marker with "
        f"--pause-annotation or --pause-field and --pause-resources {resource})"
    )


def unpause_patch(live: KubeObject) -> list[dict[str, Any]] | None:
    """The JSON patch that takes away what statusvault added (guarded by resourceVersion); None when the
    object carries no record of ours."""
    meta = live.get("metadata") or {}
    raw = (meta.get("annotations") or {}).get(RECORD)
    if raw is None:
        return None
    try:
        record = json.loads(raw)
        kind, key, was = MarkerKind(record["kind"]), record["key"], record["was"]
    except (ValueError, KeyError, TypeError):
        return None  # not a record statusvault wrote: leave the object alone
    ops: list[dict[str, Any]] = [
        {"op": "test", "path": "/metadata/resourceVersion", "value": meta.get("resourceVersion")},
        {"op": "remove", "path": "/metadata/annotations/" + _escape(RECORD)},
    ]
    on_annotation = kind is MarkerKind.ANNOTATION
    path = "/metadata/annotations/" + _escape(key) if on_annotation else key
    present = (key in (meta.get("annotations") or {})) if on_annotation else _get(live, key, _ABSENT) != _ABSENT
    if was == _ABSENT:
        if present:
            ops.append({"op": "remove", "path": path})
    else:
        ops.append({"op": "add", "path": path, "value": was})
    return ops


def still_paused(before: KubeObject, answer: KubeObject) -> bool:
    """Whether the answer to an unpause patch still holds the marker `before`'s record names, as it was not before
    the restore (a mutating webhook put it back): the object stays paused, whatever the 200 said."""
    raw = ((before.get("metadata") or {}).get("annotations") or {}).get(RECORD)
    try:
        record = json.loads(raw) if raw is not None else None
        kind, key, was = MarkerKind(record["kind"]), record["key"], record["was"]  # type: ignore[index]
    except (ValueError, KeyError, TypeError):
        return False
    if kind is MarkerKind.ANNOTATION:
        now = ((answer.get("metadata") or {}).get("annotations") or {}).get(key, _ABSENT)
    else:
        now = _get(answer, key, _ABSENT)
    return bool(now != was)


def without_record(body: KubeObject) -> None:
    """Undo, in a body about to be created, a pause statusvault recorded on the object it came from (the
    source of a move is paused before it is backed up): the object is restored as its owner left it."""
    annotations = (body.get("metadata") or {}).get("annotations") or {}
    raw = annotations.get(RECORD)
    if raw is None:
        return
    try:
        record = json.loads(raw)
        kind, key, was = MarkerKind(record["kind"]), record["key"], record["was"]
    except (ValueError, KeyError, TypeError):
        return
    del annotations[RECORD]
    if kind is MarkerKind.ANNOTATION:
        if was == _ABSENT:
            annotations.pop(key, None)
        else:
            annotations[key] = was
    elif was == _ABSENT:
        _remove(body, key)
    else:
        _set(body, key, was)
    if not annotations:
        body["metadata"].pop("annotations", None)


def pause_patch(live: KubeObject, marker: Marker) -> list[dict[str, Any]] | None:
    """The JSON patch that pauses a live object with `marker` and records it, guarded by resourceVersion (the
    annotations, and for a field marker its top-level field, are written whole); None when it is paused already
    (by its owner, or by an earlier run)."""
    if marker.present(live):
        return None
    marked = copy.deepcopy(live)
    marker.apply(marked)
    rv = (live.get("metadata") or {}).get("resourceVersion")
    ops: list[dict[str, Any]] = [
        {"op": "test", "path": "/metadata/resourceVersion", "value": rv},
        {"op": "add", "path": "/metadata/annotations", "value": marked["metadata"]["annotations"]},
    ]
    if marker.kind is MarkerKind.FIELD:
        top = _tokens(marker.key)[0]
        ops.append({"op": "add", "path": "/" + _escape(top), "value": marked[top]})
    return ops


def _pair(raw: str, flag: str, form: str) -> tuple[str, str]:
    key, sep, value = raw.partition("=")
    if not sep or not key:
        raise ConfigError(f"{flag} {raw!r}: expected {form}")
    return key, value


def _json_value(raw: str) -> Any:
    try:
        return json.loads(raw)
    except ValueError:
        return raw


def _escape(key: str) -> str:
    return key.replace("~", "~0").replace("/", "~1")


def _tokens(pointer: str) -> list[str]:
    return [t.replace("~1", "/").replace("~0", "~") for t in pointer.split("/")[1:]]


def _get(obj: Any, pointer: str, default: Any = None) -> Any:
    for token in _tokens(pointer):
        if not isinstance(obj, dict) or token not in obj:
            return default
        obj = obj[token]
    return obj


def _remove(obj: dict[str, Any], pointer: str) -> None:
    """Remove the field, copying the dicts on its path (a body shares them with the archived object)."""
    tokens = _tokens(pointer)
    for token in tokens[:-1]:
        if not isinstance(obj.get(token), dict):
            return
        obj[token] = dict(obj[token])
        obj = obj[token]
    obj.pop(tokens[-1], None)


def _set(obj: dict[str, Any], pointer: str, value: Any) -> None:
    """Set the field, copying the dicts on its path (a body shares them with the archived object)."""
    tokens = _tokens(pointer)
    for token in tokens[:-1]:
        obj[token] = dict(obj.get(token) or {})
        obj = obj[token]
    obj[tokens[-1]] = value
