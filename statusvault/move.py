"""Move custom resources, with their status, from one cluster to another: pause the source, back it up (kept as
the audit trail), restore into the target with every object created paused, verify, unpause the target, and
leave the source paused (or delete what was moved). The same command resumes a move that stopped part-way;
--abort (with the same command) gives it up: the record goes, the source is unpaused, a re-run starts afresh.
"""

from __future__ import annotations

import base64
import contextlib
import dataclasses
import functools
import hashlib
import logging
import os
import threading
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any

import orjson

from statusvault.archive.crypto import Key
from statusvault.backup import BackupRequest, backup_with
from statusvault.backup.selection import select_resources
from statusvault.errors import ConfigError, Conflict, Invalid, NotFound, StatusVaultError
from statusvault.kube.api import KubeApi
from statusvault.kube.discovery import Discovery
from statusvault.kube.transport import JSON_PATCH, Request
from statusvault.model import KubeObject, ResourceType, Selection, display, name_matches
from statusvault.restore.core.fields import written_by
from statusvault.restore.core.pausemarkers import RECORD, PauseOptions, pause_patch, unpause_patch
from statusvault.restore.options import PARALLEL, FenceMode, RestoreOptions
from statusvault.restore.quiet.fenceread import read_fence
from statusvault.restore.quiet.fencing import FencePlan, FenceTarget, status_managers
from statusvault.restore.results.verdict import RunOutcome, Verdict, moved
from statusvault.restore.runner import RestoreRequest, RestoreResult, open_backup, restore_with, unfinished_manager
from statusvault.storage.base import ObjectStore
from statusvault.store.backups import BackupStore
from statusvault.transforms import map_namespace

log = logging.getLogger(__name__)
ATTEMPTS = 5
Patch = list[dict[str, Any]]


@dataclasses.dataclass
class Side:
    """One side of a move (the source or the target cluster): a client, and what it serves."""

    client: KubeApi
    discover: Callable[[bool], Discovery]  # refresh=True re-reads (after CRDs are restored)


@dataclasses.dataclass(kw_only=True)
class MoveRequest:
    source: Side
    target: Side
    store: ObjectStore
    selection: Selection
    options: RestoreOptions  # how the target is restored (pause, mapping, modifiers, ...)
    name: str = ""  # the backup kept as the audit trail; default: derived from the move, so a re-run resumes
    state_dir: Path | None = None
    parallel: int = PARALLEL
    delete_source: bool = False
    # what the moved objects need moves with them (backup/closure.py); None: where a project's rules say so
    with_dependencies: bool | None = None
    key: Key | None = None  # the record's own key, when it holds dependencies (record_key)
    distinct: bool = False  # the caller has checked that source and target are two clusters (check_distinct)
    strict: bool = False  # --strict: what the target's server changed or warned about makes the move partial
    cancel: threading.Event | None = None  # set: stop (a signal): no new write; the same command resumes


@dataclasses.dataclass
class MoveReport:
    name: str
    source_paused: int = 0
    source_unpausable: list[str] = dataclasses.field(default_factory=list)  # no pause marker known for them
    restore: RestoreResult | None = None  # the restore into the target, and its verdict
    verify_problems: list[str] = dataclasses.field(default_factory=list)
    source_deleted: int = 0
    source_kept: list[str] = dataclasses.field(default_factory=list)  # --delete-source: not the object moved

    delete_source: bool = False  # asked for: done only once the move's verdict is done

    @property
    def verdict(self) -> Verdict:
        """The move's one verdict: its restore's (restore/results/verdict.py, --strict included), and what the read-back
        of the target found short (MoveNotVerified). Interrupted before its restore: interrupted."""
        if self.restore is None:
            return Verdict(RunOutcome.INTERRUPTED)
        return moved(self.restore.verdict, self.verify_problems)

    @property
    def succeeded(self) -> bool:
        return self.verdict.outcome is RunOutcome.DONE


@dataclasses.dataclass
class AbortReport:
    name: str
    record_dropped: bool = False  # the move's backup was deleted: the next run starts a fresh move
    target_deleted: int = 0  # copies the move created in the target, still paused by it
    source_unpaused: int = 0


def move_name(source: str, target: str, selection: Selection) -> str:
    key = repr((source, target, selection))
    return f"move-{hashlib.sha256(key.encode()).hexdigest()[:12]}"


def request_name(req: MoveRequest) -> str:
    return req.name or move_name(req.source.client.server, req.target.client.server, req.selection)


def run_move(req: MoveRequest) -> MoveReport:
    """Run the move, or resume it: its backup (the record) exists only from a run that got past the backup
    phase and was not aborted since. One cluster under two names is refused before any write."""
    if not req.distinct:
        check_distinct(req.source.client, req.target.client, req.options.mapping, req.selection.namespaces)
    name = request_name(req)
    req = dataclasses.replace(req, key=record_key(req, name))
    report = MoveReport(name, delete_source=req.delete_source)
    restore = _target_restore(req, name)
    options = restore.options
    if not BackupStore(req.store).is_complete(name):  # else a re-run: the source is paused and backed up already
        if options.fence == FenceMode.AUTO:
            fence_report(req)  # RBAC of the target that cannot be read fails here, before the source is paused
        report.source_paused, report.source_unpausable = _pause_source(req.source, req.selection, options.pause)
        _backup(req, name)
    if req.cancel is not None and req.cancel.is_set():  # stopped while the source was paused and backed up
        return report
    report.restore = restore_with(restore, client=req.target.client, discover=req.target.discover, strict=req.strict)
    if report.restore.report.work_complete and not report.restore.report.interrupted:
        report.verify_problems = verify(req.target.client, req.target.discover(True), req.store, name, options, req.key)
    if report.succeeded and req.delete_source:  # judged (--strict too) before anything in the source is deleted
        report.source_deleted, report.source_kept = delete_source(
            req.source, req.store, name, req.key, req.target, req.options.mapping
        )
    return report


def fence_report(req: MoveRequest) -> FencePlan:
    """The fencing the move's restore would do in the target (--fence report), planned from the objects the move
    takes in the source (in the namespaces they are mapped to, with the managers that wrote their status, as
    the move's backup would record them); nothing is written on either side."""
    namespaces: dict[str, tuple[ResourceType, set[str]]] = {}
    managers: dict[str, set[str]] = {}
    for rt, obj in _selected(req.source, req.selection):
        ns = map_namespace(obj["metadata"].get("namespace", ""), req.options.mapping) if rt.namespaced else ""
        namespaces.setdefault(rt.qualified, (rt, set()))[1].add(ns)
        managers.setdefault(rt.qualified, set()).update(status_managers([obj]))
    targets = [FenceTarget(rt, frozenset(ns for ns in found if ns)) for _, (rt, found) in sorted(namespaces.items())]
    return read_fence(req.target.client, targets, req.options, managers, "source cluster")


def _target_restore(req: MoveRequest, name: str) -> RestoreRequest:
    """The restore into the target: the backup is the selection already, so it takes all of it (the CRDs it took
    among them), each object created paused with the marker the source was paused with."""
    options = dataclasses.replace(req.options, pause=_source_pause(req), selection=Selection())
    return RestoreRequest(
        store=req.store,
        backup=name,
        options=options,
        state_dir=req.state_dir,
        parallel=req.parallel,
        key=req.key,
        cancel=req.cancel,
    )


KEYS_DIR = "move-keys"


def record_key(req: MoveRequest, name: str) -> Key | None:
    """The key of a move's record when it is asked to hold the moved objects' dependencies (None: not asked): made
    for the move and kept in its state directory (0600), so that a resumed or aborted move reads it. Encrypted with
    it, the record is authenticated: its Secrets, ConfigMaps and Services come as dependencies (dependencies.md)."""
    if not req.with_dependencies:  # on by default (a project's rules): the record leaves their Secrets out
        return None
    if req.state_dir is None:
        return Key.generate()  # no state kept: a re-run starts a fresh move
    path = req.state_dir / KEYS_DIR / f"{name}.key"
    if path.exists():
        return Key.from_file(path)
    secret = os.urandom(32)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "wb") as f:
        f.write(base64.b64encode(secret))
    return Key(secret)


def _source_pause(req: MoveRequest) -> PauseOptions:
    """How the source is paused: --pause-resources read as every option reads resource names, against what the
    source serves (a name it does not know fails before anything is paused), and kept to the resources moved (one
    the selection leaves out pauses nothing, as in a restore); without a marker, the operators' conventions."""
    pause = req.options.pause if req.options.pause.enabled else PauseOptions(auto=True)
    source = req.source.discover(False)
    moved = Discovery(select_resources(source, req.selection), [])
    return dataclasses.replace(pause, resources=_moved_resources(pause.resources, moved, source))


def _moved_resources(names: tuple[str, ...], moved: Discovery, source: Discovery) -> tuple[str, ...]:
    """The resources moved that --pause-resources names (a name is read among them first, so one that is
    ambiguous only in the whole source is not); a name the source does not serve at all is an error."""
    out: set[str] = set()
    for name in names:
        found = {rt.qualified for rt in moved.match(name)}
        if not found and not source.match(name):
            raise ConfigError(f"--pause-resources {name}: no resource of that name in the source")
        out |= found
    return tuple(sorted(out))


def abort_move(req: MoveRequest) -> AbortReport:
    """Give a move up: delete the copies it left paused in the target, drop its record (so the same command
    starts a fresh move, never resumes a stale backup), then unpause the source. Refused once an object of the
    move is live in the target: the source's operator would manage it too."""
    report = AbortReport(request_name(req))
    req = dataclasses.replace(req, key=record_key(req, report.name))
    if BackupStore(req.store).is_complete(report.name):
        restore = _target_restore(req, report.name)
        manager = unfinished_manager(req.target.client, req.target.discover, restore)
        ours, live = _target_copies(req, report.name, manager)
        if live:
            raise StatusVaultError(
                f"cannot abort move {report.name}: {len(live)} object(s) are live (not paused) in the target, "
                f"e.g. {live[0]}; unpausing the source would let two operators manage them. Move them back instead"
            )
        for obj in ours:
            report.target_deleted += _delete_exact(req.target, obj)
        BackupStore(req.store).delete(report.name)  # before the unpause: a killed abort never leaves a stale record
        report.record_dropped = True
    elif BackupStore(req.store).files(report.name):  # a backup killed mid-write
        BackupStore(req.store).delete(report.name)
        report.record_dropped = True
    for rt, obj in _selected(req.source, req.selection):
        if _patch(req.source.client, rt, obj, unpause_patch):
            report.source_unpaused += 1
    return report


def _selected(cluster: Side, selection: Selection) -> Iterator[tuple[ResourceType, KubeObject]]:
    """The custom resources the selection takes in `cluster`, as its backup takes them (--name included)."""
    for rt in select_resources(cluster.discover(False), selection):
        if rt.is_crd or not rt.custom:
            continue
        for ns in selection.namespaces or (None,):
            for page in cluster.client.list_pages(rt, ns if rt.namespaced else None, selection.label_selector):
                yield from ((rt, obj) for obj in page if name_matches(obj["metadata"]["name"], selection.names))


def _pause_source(source: Side, selection: Selection, pause: PauseOptions) -> tuple[int, list[str]]:
    """Pause every selected object in the source, so two operators never manage the same external resource."""
    paused, unknown = 0, []
    for rt, obj in _selected(source, selection):
        marker = pause.marker_for(rt, obj)
        if marker is None:
            unknown.append(_display(rt, obj))
            continue
        if _patch(source.client, rt, obj, functools.partial(pause_patch, marker=marker)):
            paused += 1
    return paused, unknown


def _patch(client: KubeApi, rt: ResourceType, obj: KubeObject, make: Callable[[KubeObject], Patch | None]) -> bool:
    """Send the patch `make` builds from the live object, re-reading on a lost race; False when none is due."""
    meta = obj["metadata"]
    live: KubeObject | None = obj
    for _ in range(ATTEMPTS):
        if live is None:
            return False
        patch = make(live)
        if patch is None:
            return False
        try:
            client.patch(rt, meta.get("namespace"), meta["name"], patch, JSON_PATCH)
            return True
        except (Conflict, Invalid):  # the object changed since it was read (the patch's test failed): again
            pass
        live = client.get(rt, meta.get("namespace"), meta["name"])
    raise StatusVaultError(f"{_display(rt, obj)} kept changing under other writers")


def _backup(req: MoveRequest, name: str) -> None:
    """The move's record; what a killed run's backup left is replaced, one a live run is writing refused (the
    engine's writer lease)."""
    selection = dataclasses.replace(req.selection, include_crds=True)  # the target may not have them
    record = BackupRequest(
        store=req.store, name=name, selection=selection, key=req.key, with_dependencies=req.with_dependencies
    )
    backup_with(record, client=req.source.client, discovery=req.source.discover(False))


def verify(
    client: KubeApi, discovery: Discovery, store: ObjectStore, name: str, opts: RestoreOptions, key: Key | None = None
) -> list[str]:
    """Read back every object of the backup from the target: it must exist. Its status is the restore's read-back's
    to judge (restore/results/audit.py), when the restore hands the object to the target's operator: after that,
    a running operator's status writes are its own work, not a failed move."""
    problems = []
    with open_backup(store, name, key) as reader:
        for _, data in reader.objects():
            problem = _check(client, discovery, data, opts)
            if problem:
                problems.append(problem)
    return problems


def _check(client: KubeApi, discovery: Discovery, data: bytes, opts: RestoreOptions) -> str:
    obj = orjson.loads(data)
    group, _, version = str(obj.get("apiVersion", "")).rpartition("/")
    rt = discovery.find(group, version, str(obj.get("kind", "")))
    if rt is None or rt.is_crd or not rt.custom:
        return ""
    meta = obj["metadata"]
    ns = map_namespace(meta.get("namespace", ""), opts.mapping) if rt.namespaced else ""
    if client.get(rt, ns or None, meta["name"]) is None:
        return f"{display(rt.qualified, ns, meta['name'])} is missing in the target"
    return ""


def delete_source(
    source: Side,
    store: ObjectStore,
    name: str,
    key: Key | None = None,
    target: Side | None = None,
    mapping: Mapping[str, str] | None = None,
) -> tuple[int, list[str]]:
    """Delete in the source exactly the objects the move backed up (by UID): never one created or replaced
    there since, nor one the target holds as itself (the same UID: the two are one cluster, so the copy is the
    source). Returns how many were deleted and the objects left alone.

    An object's finalizers are its operator's clean-up of what the object manages, which now belongs to the
    target's copy: they must not run. The source's operator is paused, so they never would, and the object would
    stay there, terminating, until someone unpaused it and let them run. So a paused object is deleted and then
    released (its finalizers taken off), as `clusterctl move` does. An object with finalizers the move could not
    pause is left alone and listed: its operator is live, and a delete would start its clean-up at once."""
    deleted, kept = 0, []
    for rt, obj in _backed_up(source.discover(False), store, name, key):
        meta = obj["metadata"]
        live = source.client.get(rt, meta.get("namespace"), meta["name"])
        if live is None:
            continue
        if live["metadata"].get("uid") != meta.get("uid"):
            kept.append(f"{_display(rt, obj)} (not the object moved: created again since the backup)")
            continue
        if target is not None and _same_object(target, rt, live, mapping or {}):
            kept.append(f"{_display(rt, obj)} (the target holds this very object: source and target are one cluster)")
            continue
        if live["metadata"].get("finalizers") and RECORD not in (live["metadata"].get("annotations") or {}):
            kept.append(f"{_display(rt, obj)} (not paused in the source, and its finalizers would have its live "
                        "operator clean up what the target's copy now manages)")  # fmt: skip
            continue
        gone = _delete_exact(source, live)
        deleted += gone
        if gone and live["metadata"].get("finalizers"):
            with contextlib.suppress(NotFound):  # gone already: nothing held it
                _patch(source.client, rt, live, functools.partial(_release, uid=live["metadata"]["uid"]))
    return deleted, kept


def _release(live: KubeObject, uid: str) -> Patch | None:
    """Take the finalizers off this very object (a test of its UID), which the move has deleted."""
    meta = live["metadata"]
    if meta.get("uid") != uid or not meta.get("finalizers"):
        return None
    return [{"op": "test", "path": "/metadata/uid", "value": uid}, {"op": "remove", "path": "/metadata/finalizers"}]


def _same_object(target: Side, rt: ResourceType, live: KubeObject, mapping: Mapping[str, str]) -> bool:
    """Whether the target's copy of `live` (its name, in the namespace the move mapped it to) is `live` itself."""
    meta = live["metadata"]
    namespace = map_namespace(meta.get("namespace", ""), mapping) if rt.namespaced else None
    try:
        copy = target.client.get(rt, namespace or None, meta["name"])
    except StatusVaultError:
        return False
    return copy is not None and copy["metadata"].get("uid") == meta.get("uid")


def _delete_exact(cluster: Side, obj: KubeObject) -> int:
    """Delete this very object (a UID precondition): 1, or 0 when it is gone or was replaced meanwhile."""
    meta = obj["metadata"]
    group, _, version = str(obj.get("apiVersion", "")).rpartition("/")
    rt = cluster.discover(False).find(group, version, str(obj.get("kind", "")))
    if rt is None:
        return 0
    body = orjson.dumps({"preconditions": {"uid": meta["uid"]}})
    try:
        cluster.client.request_json(Request("DELETE", rt.path(meta.get("namespace"), meta["name"]), body=body))
    except (NotFound, Conflict):  # gone, or another object by that name now
        return 0
    return 1


def _backed_up(
    discovery: Discovery, store: ObjectStore, name: str, key: Key | None
) -> Iterator[tuple[ResourceType, KubeObject]]:
    """The custom resources (CRDs aside) of the move's backup, as they were in the source."""
    with open_backup(store, name, key) as reader:
        for _, data in reader.objects():
            obj = orjson.loads(data)
            group, _, version = str(obj.get("apiVersion", "")).rpartition("/")
            rt = discovery.find(group, version, str(obj.get("kind", "")))
            if rt is not None and rt.custom and not rt.is_crd:
                yield rt, obj


def _target_copies(req: MoveRequest, name: str, manager: str) -> tuple[list[KubeObject], list[str]]:
    """The objects of the move's backup found in the target: those the move left there paused (its record on
    them, or paused by their owner and written by the move's unfinished restore, `manager`), and those live there
    (an operator may act on them). Other objects paused by their owner are neither: they stay as they are."""
    discovery = req.target.discover(True)
    pause = _source_pause(req)
    ours, live = [], []
    for rt, obj in _backed_up(discovery, req.store, name, req.key):
        meta = obj["metadata"]
        ns = map_namespace(meta.get("namespace", ""), req.options.mapping) if rt.namespaced else ""
        copy = req.target.client.get(rt, ns or None, meta["name"])
        if copy is None:
            continue
        marker = pause.marker_for(rt, copy)
        if RECORD in (copy["metadata"].get("annotations") or {}):
            ours.append(copy)
        elif marker is None or not marker.present(copy):
            live.append(display(rt.qualified, ns, meta["name"]))
        elif manager and written_by(copy["metadata"], manager):
            ours.append(copy)
    return ours, live


def _display(rt: ResourceType, obj: KubeObject) -> str:
    meta = obj.get("metadata") or {}
    return display(rt.qualified, meta.get("namespace", ""), meta.get("name", ""))


def check_distinct(
    source: KubeApi, target: KubeApi, mapping: Mapping[str, str] | None = None, namespaces: tuple[str, ...] = ()
) -> None:
    """Refuse a move whose source and target are one cluster: the same server address, or the same identity (the
    kube-system namespace's UID) whatever name or address reaches it (127.0.0.1 and localhost, two contexts). Within
    one cluster only a move between namespaces is a move: every namespace it takes mapped to another one."""
    if source.server == target.server:
        raise ConfigError(f"the source and the target are the same API server ({source.server})")
    ids = cluster_identity(source), cluster_identity(target)
    between = bool(namespaces) and all((mapping or {}).get(ns, ns) != ns for ns in namespaces)
    if ids[0] and ids[0] == ids[1] and not between:
        raise ConfigError(
            f"the source ({source.server}) and the target ({target.server}) are the same cluster "
            f"(kube-system namespace UID {ids[0]}): move into another cluster, or map each namespace moved to "
            "another one (--namespace-mapping)"
        )
    if not all(ids):
        log.warning("cannot tell whether the source and target are one cluster (kube-system not readable)")


def cluster_identity(client: KubeApi) -> str:
    """The cluster's identity: its kube-system namespace's UID, made once with the cluster and never again ("" when
    it cannot be read)."""
    try:
        ns = client.get_path("/api/v1/namespaces/kube-system")
    except StatusVaultError:
        return ""
    return str(((ns or {}).get("metadata") or {}).get("uid") or "")
