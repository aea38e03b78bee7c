"""Move custom resources, with their status, from one cluster to another: pause the source, back it up (kept as
the audit trail), restore into the target with every object created paused, verify, unpause the target, and
leave the source paused (or delete it). The same command resumes a move that stopped part-way; --abort
unpauses the source.
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import logging
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import orjson

from statusvault import catalog
from statusvault.backup import BackupEngine
from statusvault.errors import ConfigError, KubeApiError, StatusVaultError
from statusvault.kube.api import KubeApi
from statusvault.kube.client import KubeClient
from statusvault.kube.discovery import Discovery
from statusvault.kube.transport import JSON_PATCH
from statusvault.model import KubeObject, ResourceType, Selection, display
from statusvault.restore.options import RestoreOptions
from statusvault.restore.pausing import PauseOptions, pause_patch, unpause_patch
from statusvault.restore.results import RestoreReport
from statusvault.restore.service import RestoreRequest, open_backup, run_restore
from statusvault.selection import select_resources
from statusvault.storage.base import ObjectStore, backup_prefix, manifest_key
from statusvault.transforms import contains, map_namespace, status_annotation

log = logging.getLogger(__name__)
ATTEMPTS = 5
Patch = list[dict[str, Any]]


@dataclasses.dataclass
class Cluster:
    client: KubeClient
    discover: Callable[[bool], Discovery]  # refresh=True re-reads (after CRDs are restored)


@dataclasses.dataclass
class MoveRequest:
    source: Cluster
    target: Cluster
    store: ObjectStore
    selection: Selection
    options: RestoreOptions  # how the target is restored (pause, mapping, modifiers, ...)
    name: str = ""  # the backup kept as the audit trail; default: derived from the move, so a re-run resumes
    state_dir: Path | None = None
    parallel: int = 8
    delete_source: bool = False


@dataclasses.dataclass
class MoveReport:
    name: str
    source_paused: int = 0
    source_unpausable: list[str] = dataclasses.field(default_factory=list)  # no pause marker known for them
    restore: RestoreReport | None = None
    verify_problems: list[str] = dataclasses.field(default_factory=list)
    source_deleted: int = 0

    @property
    def succeeded(self) -> bool:
        return self.restore is not None and self.restore.succeeded and not self.verify_problems


def move_name(source: str, target: str, selection: Selection) -> str:
    key = repr((source, target, selection))
    return f"move-{hashlib.sha256(key.encode()).hexdigest()[:12]}"


def run_move(req: MoveRequest) -> MoveReport:
    name = req.name or move_name(req.source.client.server, req.target.client.server, req.selection)
    report = MoveReport(name)
    pause = req.options.pause if req.options.pause.enabled else PauseOptions(auto=True)
    options = dataclasses.replace(req.options, pause=pause)
    if not req.store.exists(manifest_key(name)):  # else a re-run: the source is paused and backed up already
        report.source_paused, report.source_unpausable = _pause_source(req.source, req.selection, pause)
        _backup(req, name)
    restore = RestoreRequest(req.store, name, options, req.state_dir, parallel=req.parallel)
    report.restore = run_restore(req.target.client, req.target.discover, restore)
    if report.restore.succeeded:
        report.verify_problems = verify(req.target.client, req.target.discover(True), req.store, name, options)
    if report.succeeded and req.delete_source:
        report.source_deleted = _delete_source(req.source, req.selection)
    return report


def abort_move(source: Cluster, selection: Selection) -> int:
    """Unpause what a move paused in the source; returns how many objects were unpaused."""
    count = 0
    for rt, obj in _selected(source, selection):
        if _patch(source.client, rt, obj, unpause_patch):
            count += 1
    return count


def _selected(cluster: Cluster, selection: Selection) -> Iterator[tuple[ResourceType, KubeObject]]:
    for rt in select_resources(cluster.discover(False), selection):
        if rt.is_crd or not rt.custom:
            continue
        for ns in selection.namespaces or (None,):
            for page in cluster.client.list_pages(rt, ns if rt.namespaced else None, selection.label_selector):
                yield from ((rt, obj) for obj in page)


def _pause_source(source: Cluster, selection: Selection, pause: PauseOptions) -> tuple[int, list[str]]:
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
        except KubeApiError as e:
            if e.code not in (409, 422):
                raise
        live = client.get(rt, meta.get("namespace"), meta["name"])
    raise StatusVaultError(f"{_display(rt, obj)} kept changing under other writers")


def _backup(req: MoveRequest, name: str) -> None:
    if next(iter(req.store.list(backup_prefix(name))), None) is not None:  # a backup killed mid-write: again
        catalog.delete(req.store, name)
    selection = dataclasses.replace(req.selection, include_crds=True)  # the target may not have them
    BackupEngine(req.source.client, req.source.discover(False), req.store).run(name, selection)


def verify(client: KubeApi, discovery: Discovery, store: ObjectStore, name: str, opts: RestoreOptions) -> list[str]:
    """Read back every object of the backup from the target: it must exist, and carry its saved status."""
    problems = []
    with open_backup(store, name) as reader:
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
    if opts.modifiers is not None:
        obj, _ = opts.modifiers.apply(rt.qualified, {**obj, "metadata": {**meta, "namespace": ns}})
    live = client.get(rt, ns or None, meta["name"])
    where = display(rt.qualified, ns, meta["name"])
    if live is None:
        return f"{where} is missing in the target"
    wanted = status_annotation(obj) if status_annotation(obj) is not None else not opts.no_status
    if obj.get("status") and wanted and not contains(live.get("status"), obj["status"]):
        return f"{where} lacks its saved status in the target"
    return ""


def _delete_source(source: Cluster, selection: Selection) -> int:
    count = 0
    for rt, obj in _selected(source, selection):
        source.client.delete(rt, obj["metadata"].get("namespace"), obj["metadata"]["name"])
        count += 1
    return count


def _display(rt: ResourceType, obj: KubeObject) -> str:
    meta = obj.get("metadata") or {}
    return display(rt.qualified, meta.get("namespace", ""), meta.get("name", ""))


def check_distinct(source: str, target: str) -> None:
    if source == target:
        raise ConfigError(f"the source and the target are the same API server ({source})")
