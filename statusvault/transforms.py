"""Pure object transforms for restore: strip, split status, remap namespaces and owners, build patches."""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from typing import Any, NamedTuple

import jsonpatch
import orjson

from statusvault.model import KubeObject

SERVER_SET_METADATA = (
    "uid",
    "resourceVersion",
    "generation",
    "creationTimestamp",
    "selfLink",
    "managedFields",
    "deletionTimestamp",
    "deletionGracePeriodSeconds",
)
RESTORE_STATUS_ANNOTATION = "statusvault.io/restore-status"
# on an object a declarative restore left without its saved status (controller/runs.py); a restore that writes the
# status takes it away again (restore/running/objects.py)
NOT_RESTORED_ANNOTATION = "statusvault.dev/status-not-restored"
# Top-level fields that are not user-owned content: never patched on update.
NOT_CONTENT = ("apiVersion", "kind", "metadata", "status")


def sanitize(obj: KubeObject, keep_status: bool = False) -> KubeObject:
    """A create body: server-set metadata removed, labels/annotations/finalizers kept; status only if asked.

    The metadata (and its labels and annotations) are new dicts; the rest (spec, data, status) is shared
    with `obj` and must not be changed in place (copying each object whole cost more than its JSON)."""
    out = {k: v for k, v in obj.items() if keep_status or k != "status"}
    meta = {k: v for k, v in (obj.get("metadata") or {}).items() if k not in SERVER_SET_METADATA}
    for key in ("labels", "annotations"):
        if isinstance(meta.get(key), dict):
            meta[key] = dict(meta[key])
    out["metadata"] = meta
    if out.get("kind") == "Service" and out.get("apiVersion") == "v1":
        out["spec"] = dict(out.get("spec") or {})
        _reset_cluster_ip(out)
    return out


def _reset_cluster_ip(svc: KubeObject) -> None:
    """A Service's cluster IP belongs to the old cluster's range; let the server allocate one (not headless)."""
    spec = svc.get("spec") or {}
    if spec.get("clusterIP") not in (None, "None"):
        spec.pop("clusterIP", None)
        spec.pop("clusterIPs", None)


def map_namespace(namespace: str, mapping: Mapping[str, str]) -> str:
    return mapping.get(namespace, namespace)


def remap_owner_refs(
    refs: list[dict[str, Any]], resolve: Callable[[dict[str, Any]], str | None]
) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """Rewrite each ownerReference's uid via `resolve(ref)`; return (kept refs, dropped refs)."""
    kept, dropped = [], []
    for ref in refs:
        uid = resolve(ref)
        if uid is None:
            dropped.append(ref)
        else:
            kept.append({**ref, "uid": uid})
    return kept, dropped


VELERO_RESTORE_STATUS = "velero.io/restore-status"  # Velero's design for a controller's per-object opt-in


def status_annotation(obj: KubeObject) -> bool | None:
    """The per-object override: statusvault.io/restore-status "true"/"false", else Velero's velero.io/restore-status
    (which a resource's own controller sets, in Velero's design for object-level status restore), else None."""
    annotations = (obj.get("metadata") or {}).get("annotations") or {}
    value = annotations.get(RESTORE_STATUS_ANNOTATION, annotations.get(VELERO_RESTORE_STATUS))
    if value is None:
        return None
    return str(value).strip().lower() in ("true", "yes", "1")


def _content(obj: KubeObject) -> KubeObject:
    meta = obj.get("metadata") or {}
    return {
        "metadata": {k: meta[k] for k in ("labels", "annotations", "finalizers", "ownerReferences") if k in meta},
        **{k: v for k, v in obj.items() if k not in NOT_CONTENT},
    }


def update_patch(live: KubeObject, desired: KubeObject) -> list[dict[str, Any]]:
    """A JSON patch turning the live object's user content (spec, data, labels, ...) into the desired one.

    Guarded by a `test` of resourceVersion, so a concurrent writer makes it fail instead of being overwritten.
    Returns [] when nothing differs.
    """
    ops: list[dict[str, Any]] = jsonpatch.make_patch(_content(live), _content(assigned_kept(live, desired))).patch
    if not ops:
        return []
    rv = (live.get("metadata") or {}).get("resourceVersion")
    return [{"op": "test", "path": "/metadata/resourceVersion", "value": rv}, *ops]


# a Service's fields the server assigns when the body leaves them out: an update keeps the live values (unsetting
# the primary cluster IP is refused, 422; a node port or health-check port would be reallocated)
_SERVICE_ASSIGNED = ("clusterIP", "clusterIPs", "ipFamilies", "ipFamilyPolicy", "healthCheckNodePort")


def assigned_kept(live: KubeObject, desired: KubeObject) -> KubeObject:
    """`desired` with the server-assigned fields it leaves out taken from `live` (a Service's cluster IPs, node
    ports, health-check port), so that an update changes what the backup says and nothing the server chose."""
    if desired.get("kind") != "Service" or desired.get("apiVersion") != "v1":
        return desired
    have, want = live.get("spec") or {}, dict(desired.get("spec") or {})
    for field in _SERVICE_ASSIGNED:
        if field not in want and field in have:
            want[field] = have[field]
    live_ports = {(p.get("port"), p.get("protocol", "TCP"), p.get("name")): p for p in have.get("ports") or ()
                  if isinstance(p, dict)}  # fmt: skip
    ports = []
    for port in want.get("ports") or ():
        found = live_ports.get((port.get("port"), port.get("protocol", "TCP"), port.get("name"))) if isinstance(
            port, dict) else None  # fmt: skip
        if found is not None and "nodePort" not in port and "nodePort" in found:
            port = {**port, "nodePort": found["nodePort"]}
        ports.append(port)
    if ports:
        want["ports"] = ports
    return {**desired, "spec": want}


ABSENT = object()


def restore_diff(live: KubeObject, desired: KubeObject, saved_status: Any = ABSENT) -> list[dict[str, Any]]:
    """What differs between a live object and the backup's version of it: user content, and the status when
    it would be restored. Entries are {"path", "live", "backup"}; a side without the field has no key."""
    before, after = _content(live), _content(desired)
    if saved_status is not ABSENT:
        before["status"], after["status"] = live.get("status", ABSENT), saved_status
    out: list[dict[str, Any]] = []
    _diff(before, after, "", out)
    return _masked(out) if _secret(desired) or _secret(live) else out


SECRET_FIELDS = ("/data", "/stringData")


def _secret(obj: KubeObject) -> bool:
    return obj.get("kind") == "Secret" and obj.get("apiVersion") == "v1"


def _masked(diff: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """A Secret's values never reach a report: masked as kubectl diff masks them (which side differs is kept)."""
    out = []
    for entry in diff:
        path = entry["path"]
        if any(path == f or path.startswith(f"{f}/") for f in SECRET_FIELDS):
            entry = {"path": path, **{side: f"*** ({side})" for side in ("live", "backup") if side in entry}}
        out.append(entry)
    return out


def _diff(a: Any, b: Any, path: str, out: list[dict[str, Any]]) -> None:
    if isinstance(a, dict) and isinstance(b, dict):
        for k in sorted(set(a) | set(b), key=str):
            _diff(a.get(k, ABSENT), b.get(k, ABSENT), f"{path}/{_escape(str(k))}", out)
    elif isinstance(a, list) and isinstance(b, list) and len(a) == len(b):
        for i, (x, y) in enumerate(zip(a, b, strict=True)):
            _diff(x, y, f"{path}/{i}", out)
    elif a != b:
        entry: dict[str, Any] = {"path": path}
        if a is not ABSENT:
            entry["live"] = a
        if b is not ABSENT:
            entry["backup"] = b
        out.append(entry)


def _escape(key: str) -> str:
    """A JSON Pointer token (RFC 6901)."""
    return key.replace("~", "~0").replace("/", "~1")


def status_body(live: KubeObject, status: Any) -> KubeObject:
    """The body of a PUT to /status: the live object (its resourceVersion) carrying the saved status."""
    return {**live, "status": status}


def contains(actual: Any, saved: Any) -> bool:
    """Whether `actual` holds everything in `saved`: fields the server added (defaults) are allowed, fields it
    dropped or changed are not. Lists must keep their length; their items are compared the same way."""
    if _same_json(actual, saved):  # the usual case, decided in C
        return True
    if isinstance(saved, dict):
        return isinstance(actual, dict) and all(k in actual and contains(actual[k], v) for k, v in saved.items())
    if isinstance(saved, list):
        return isinstance(actual, list) and len(actual) == len(saved) and all(map(contains, actual, saved))
    if isinstance(saved, bool) or isinstance(actual, bool):  # JSON true is not 1
        return actual is saved
    return bool(actual == saved)


PRUNED = "pruned"
CHANGED = "changed"
_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_-]*\Z")  # a key shown as .key; any other as [key]


class ServerChange(NamedTuple):
    """A field of what was sent that the server's answer lacks (pruned) or holds with another value (changed)."""

    path: str  # "spec.zone", "status.conditions[0].reason", "metadata.labels[app.kubernetes.io/name]"
    how: str  # PRUNED | CHANGED
    sent: Any = None  # the value sent there: what the read-back looks for later (restore/results/audit.py)

    def __str__(self) -> str:
        return f"{self.path} {self.how}"


def object_changes(body: KubeObject, answer: KubeObject, with_status: bool = True) -> list[ServerChange]:
    """What the server dropped or changed of a create or update body: its user content, and its status when it
    carries one and the write sent it (`with_status`: a patch never does). Server-set metadata (uid,
    resourceVersion, ...) was never sent, so it is never a change."""
    sent, got = _content(body), _content(answer)
    if with_status and "status" in body:
        sent["status"] = body["status"]
        if "status" in answer:
            got["status"] = answer["status"]
    return server_changes(sent, got)


def status_changes(saved: Any, answer: KubeObject) -> list[ServerChange]:
    """What the server dropped or changed of a saved status it was sent, by the object it answered with."""
    return server_changes({"status": saved}, {"status": answer["status"]} if "status" in answer else {})


def server_changes(sent: dict[str, Any], answer: dict[str, Any]) -> list[ServerChange]:
    """Each field of `sent` that `answer` dropped (pruned) or holds with another value (changed), in sent order.

    Fields only the answer has are not changes: a field the backup never held cannot be lost, and schema defaults
    or a webhook's additions would otherwise be reported for every object. Nor is a null the answer leaves out or
    fills in. A list whose length changed is one change (its items cannot be paired); else items are compared."""
    if _same_json(sent, answer):  # the usual case, decided in C
        return []
    out: list[ServerChange] = []
    _dict_changes(sent, answer, "", out)
    return out


def _dict_changes(sent: dict[str, Any], got: dict[str, Any], path: str, out: list[ServerChange]) -> None:
    for key, value in sent.items():
        if value is None:
            continue
        if key not in got:
            out.append(ServerChange(_field(path, key), PRUNED, value))
        elif isinstance(value, dict | list):
            _value_changes(value, got[key], _field(path, key), out)
        elif not _same(value, got[key]):
            out.append(ServerChange(_field(path, key), CHANGED, value))


def _value_changes(sent: Any, got: Any, path: str, out: list[ServerChange]) -> None:
    if isinstance(sent, dict) and isinstance(got, dict):
        _dict_changes(sent, got, path, out)
    elif isinstance(sent, list) and isinstance(got, list) and len(sent) == len(got):
        for i, (a, b) in enumerate(zip(sent, got, strict=True)):
            if isinstance(a, dict | list):
                _value_changes(a, b, f"{path}[{i}]", out)
            elif not _same(a, b):
                out.append(ServerChange(f"{path}[{i}]", CHANGED, a))
    elif not _same(sent, got):
        out.append(ServerChange(path, CHANGED, sent))


def _same(a: Any, b: Any) -> bool:
    if isinstance(a, bool) or isinstance(b, bool):  # JSON true is not 1
        return a is b
    return bool(a == b)


def _field(path: str, key: str) -> str:
    if _NAME.match(key):
        return f"{path}.{key}" if path else key
    return f"{path}[{key}]"


_STEP = re.compile(r"\.?([A-Za-z_][A-Za-z0-9_-]*)|\[([^\]]*)\]")


def still_changed(obj: KubeObject, change: ServerChange) -> bool:
    """Whether `obj` still lacks what `change` was sent: the field its path names is missing or holds another value.
    The path is read as server_changes writes it (`.key`, `[key]`, `[index]`)."""
    value: Any = obj
    at = 0
    while at < len(change.path):
        step = _STEP.match(change.path, at)
        if step is None:
            return True  # a path this reader cannot follow: still counted, never taken as fixed
        key = step.group(1) if step.group(1) is not None else step.group(2)
        at = step.end()
        if isinstance(value, dict) and key in value:
            value = value[key]
        elif isinstance(value, list) and key.isdigit() and int(key) < len(value):
            value = value[int(key)]
        else:
            return True
    return not _same_json(value, change.sent)


def _same_json(a: Any, b: Any) -> bool:
    try:
        return orjson.dumps(a, option=orjson.OPT_SORT_KEYS) == orjson.dumps(b, option=orjson.OPT_SORT_KEYS)
    except TypeError:
        return False
