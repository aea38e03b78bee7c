"""The backup engine: list the selected resources page by page and stream them into an archive."""

from __future__ import annotations

import contextlib
import dataclasses
import datetime as dt
import functools
import logging
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import orjson

from statusvault import installed_version, rfc3339
from statusvault.archive import FORMAT_VERSION, ArchiveWriter, member_path, signing
from statusvault.archive.crypto import Key
from statusvault.archive.envelope import Keyring, Keys, context, sealed_field
from statusvault.archive.format import ENVELOPE_FORMAT_VERSION
from statusvault.archive.signing import Signer
from statusvault.backup.closure import DependencyCollector
from statusvault.backup.listers import ListJob, list_in_worker
from statusvault.backup.selection import CONTROLLED, select_resources
from statusvault.backup.spools import InOrder, Record, Spool
from statusvault.dependencies import PROJECT_RULES, default_on
from statusvault.errors import BackupStoppedError, ConfigError, Forbidden, KubeApiError, LeaseLostError, NotFound
from statusvault.kube.api import KubeApi
from statusvault.kube.discovery import Discovery
from statusvault.kube.transport import Request
from statusvault.model import KubeObject, ResourceType, Selection, name_matches, object_key, writes_status
from statusvault.processes import WorkerSettings
from statusvault.processes.pool import WorkerPool
from statusvault.runtime.killpoints import kill_point
from statusvault.runtime.progress import NullProgress, Progress
from statusvault.storage.base import (
    ObjectLock,
    ObjectStore,
    sweep_stale_writes,
    validate_backup_name,
)
from statusvault.store.backups import BackupStore
from statusvault.store.writerlease import WriterLease, claim
from statusvault.vocabulary.kinds import NAMESPACES, SECRETS

log = logging.getLogger(__name__)


@dataclasses.dataclass
class ResourceSummary:
    rt: ResourceType
    count: int = 0
    with_status: int = 0
    terminating: int = 0

    def to_dict(self) -> dict[str, Any]:
        rt = self.rt
        return {
            "group": rt.group,
            "version": rt.version,
            "resource": rt.resource,
            "kind": rt.kind,
            "namespaced": rt.namespaced,
            "hasStatusSubresource": rt.has_status,
            "custom": rt.custom,
            "shortNames": list(rt.short_names),
            "singular": rt.singular,
            "count": self.count,
            "withStatus": self.with_status,
            "terminating": self.terminating,
        }


@dataclasses.dataclass
class BackupResult:
    name: str
    storage: str
    manifest: dict[str, Any]
    duration: float

    @property
    def objects(self) -> int:
        return int(self.manifest["totals"]["objects"])

    def to_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "storage": self.storage,
            "durationSeconds": round(self.duration, 3),
            **{k: self.manifest[k] for k in ("totals", "resources", "archive")},
        }


def default_backup_name(prefix: str = "backup", now: dt.datetime | None = None) -> str:
    return f"{prefix}-{(now or dt.datetime.now(dt.UTC)):%Y%m%d%H%M%S}"


def prepare_object(obj: KubeObject) -> bytes:
    """The archived form: the whole object with managedFields cut down to who wrote its status (status_writers),
    keys sorted for stable hashes."""
    meta = obj.get("metadata")
    if isinstance(meta, dict):
        writers = status_writers(meta.pop("managedFields", None))
        if writers:
            meta["managedFields"] = writers
    return orjson.dumps(obj, option=orjson.OPT_SORT_KEYS)


def status_writers(entries: Any) -> list[dict[str, Any]]:
    """The managedFields entries of the managers that wrote the status (through /status, or `f:status` in what they
    own), each with only manager, operation, subresource and time: who, not which fields (archive-format.md)."""
    out = []
    for e in entries if isinstance(entries, list) else ():
        if writes_status(e) and e.get("manager"):
            out.append({k: e[k] for k in ("manager", "operation", "subresource", "time") if e.get(k)})
    return out


def _check_namespaces(client: KubeApi, discovery: Discovery, namespaces: tuple[str, ...]) -> None:
    if discovery.by_qualified(NAMESPACES.qualified) is None:
        return  # a server without the core API (a bare CRD server) has no Namespace objects: any name is valid
    for ns in namespaces:
        try:
            if client.get(NAMESPACES, None, ns) is None:
                raise ConfigError(f"namespace {ns!r} does not exist")
        except Forbidden:  # a namespaced ServiceAccount may not read Namespaces: the LIST will tell
            pass


STALE_WRITE_AFTER = 6 * 3600.0  # a write older than this is no backup in progress (the CronJob's deadline)


@dataclasses.dataclass(kw_only=True)
class BackupRequest:
    """One backup, as the CLI, a move (its record) or a watch (a base) asks for it."""

    store: ObjectStore
    name: str
    selection: Selection = dataclasses.field(default_factory=Selection)
    schedule: str = ""  # the schedule (or watch:NAME) the backup belongs to, recorded in its manifest
    # where an imported backup's objects came from (a Velero backup: velero/backups.py), recorded as its importedFrom
    imported_from: dict[str, Any] | None = None
    key: Keys = None  # client-side encryption: a data key of the backup's own, wrapped by each of these keys
    signer: Signer | None = None  # signs the summary manifest (archive/signing.py)
    lock: ObjectLock | None = None  # S3 Object Lock on the archive and the manifest (not on the writer lease)
    page_size: int = 500
    list_concurrency: int = 1  # LIST streams at once (types, namespaces)
    listers: WorkerSettings | None = None  # worker processes that list; None (or one process): this process's threads
    progress: Progress = dataclasses.field(default_factory=NullProgress)
    compresslevel: int = 3
    # what the selected objects need comes with them (backup/closure.py); None: where a project's rules say so
    with_dependencies: bool | None = None
    allow_plaintext_secrets: bool = False  # Secret data may be archived without encryption
    # set to stop the backup before it lands (the controller: its Backup resource was deleted); nothing is kept
    cancel: threading.Event | None = None


class BackupEngine:
    def __init__(self, client: KubeApi, discovery: Discovery, request: BackupRequest):
        self.request = request
        self.keyring = Keyring.of(request.key)
        self.list_concurrency = max(1, request.list_concurrency)
        listers = request.listers
        if listers is not None:  # no more workers than LISTs run at once
            listers = dataclasses.replace(listers, processes=min(listers.processes, self.list_concurrency))
        self.listers = listers if listers is not None and listers.processes > 1 else None  # None: in threads
        self.client = client
        self.discovery = discovery
        self.store = request.store
        self.progress = request.progress

    def run(self) -> BackupResult:
        name, selection = self.request.name, self.request.selection
        validate_backup_name(name)
        started = time.monotonic()
        created_at = dt.datetime.now(dt.UTC)
        types = select_resources(self.discovery, selection, whole_namespaces=True)  # unknown names fail here
        if any(rt.qualified == SECRETS.qualified for rt in types) and self.plaintext_secrets:
            if selection.include_resources:
                raise ConfigError(f"--include-resources names secrets, and {self.plaintext_secrets}")
            secrets = next(rt for rt in types if rt.qualified == SECRETS.qualified)
            types = [rt for rt in types if rt.qualified != SECRETS.qualified]
            if self._used(secrets, selection, unknown=False):  # said only when there are Secrets to leave out
                log.warning("left out the namespace's Secrets: %s", self.plaintext_secrets)
        _check_namespaces(self.client, self.discovery, selection.namespaces)
        for kek in self.keyring.keks:
            kek.ref()  # a KMS key that cannot be found or read fails here, before any write
        if self.request.signer is not None:
            self.request.signer.key_id()  # ... as does a KMS signing key
        backups = BackupStore(self.store, self.request.lock)  # a store that cannot lock fails here, before any write
        with claim(self.store, name) as lease:  # refuses a complete backup or one a live run writes
            swept = sweep_stale_writes(self.store, STALE_WRITE_AFTER)
            if swept:
                log.info("removed %d leftover(s) of backups killed mid-write from %s", swept, self.store.url)
            manifest = self._archive(backups, name, selection, self.request.schedule, types, created_at, lease)
            try:
                self._check_cancel()
                lease.renew()  # still this run's, right before the manifest completes the backup
                backups.complete(name, manifest)
            except LeaseLostError:
                raise  # the name, and what is under it, is the other run's now
            except BaseException:
                backups.discard_archive(name)
                raise
        return BackupResult(name, self.store.url, manifest, time.monotonic() - started)

    def _archive(
        self,
        backups: BackupStore,
        name: str,
        selection: Selection,
        schedule: str,
        types: list[ResourceType],
        created_at: dt.datetime,
        lease: WriterLease,
    ) -> dict[str, Any]:
        """Write the archive (it lands only while the lease is this run's); return the summary manifest."""
        explicit_crds = any(self.discovery.resolve(n).is_crd for n in selection.include_resources)
        whole = selection.whole_namespaces
        defined = {(rt.group, rt.resource) for rt in types if rt.custom and (not whole or self._used(rt, selection))}
        streams = [
            _Stream(
                rt,
                ns,
                selection,
                None if (not rt.is_crd or explicit_crds) else defined,
                optional=whole and not rt.custom,
            )
            for rt in types
            for ns in self._scopes(rt, selection)
        ]
        data_key = Key.generate() if self.keyring else None
        collector = self._collector(types)
        with backups.writing_archive(name) as sink:
            writer = ArchiveWriter(sink, self.request.compresslevel, mtime=created_at.timestamp(), key=data_key)
            try:
                summaries = self._write(writer, streams, lease, collector)
                manifest = self._manifest(name, selection, summaries, writer, created_at)
                manifest["schedule"] = schedule
                if self.request.imported_from:
                    manifest["importedFrom"] = dict(self.request.imported_from)
                if collector is not None and collector.following:
                    manifest["dependencies"] = collector.closure.to_dict()
                if data_key is not None:
                    manifest["formatVersion"] = ENVELOPE_FORMAT_VERSION
                    manifest["encryption"] = data_key.describe()  # the archive's own copy: no wrappings
                size, sha = writer.finish(manifest)
                if data_key is not None:  # wrapped for the summary, bound to the name and the archive's bytes
                    manifest["encryption"] = sealed_field(data_key, self.keyring, context(name, sha, data_key.id))
                lease.renew()  # still this run's, right before the archive lands
            except BaseException:
                writer.abort()
                raise
        manifest.pop("files", None)
        manifest["archive"] = backups.archive_entry(size, sha)
        if self.request.signer is not None:  # last: it covers every field above
            manifest[signing.FIELD] = signing.sign(manifest, signing.BACKUP, self.request.signer)
        return manifest

    def _used(self, rt: ResourceType, sel: Selection, unknown: bool = True) -> bool:
        """Whether a type has an object in the namespaces backed up (one LIST of one name per namespace): a
        namespace backup takes the CRDs of the custom types it takes objects of, not every CRD of the cluster.
        `unknown`: the answer when the server will not say (its LIST then says what is wrong, or the CRD is kept)."""
        try:
            return any(
                next(iter(self.client.list_metadata(rt, ns, sel.label_selector, limit=1)), None) is not None
                for ns in sel.namespaces
            )
        except (Forbidden, NotFound):
            return unknown

    @property
    def plaintext_secrets(self) -> str:
        """Why Secret data may not be archived ("": it may): a backup in clear is read by whoever reads the store."""
        if self.keyring or self.request.allow_plaintext_secrets:
            return ""
        return (
            "the backup is not encrypted: encrypt it (--encryption-key-file or --kms-key-id), or say it may be "
            "stored in clear with --allow-plaintext-secrets"
        )

    def _collector(self, types: list[ResourceType]) -> DependencyCollector | None:
        """What follows the selected objects' dependencies: when asked, or when a project's rules say so for the
        objects of that project the backup meets."""
        wanted = self.request.with_dependencies
        if wanted is False or (wanted is None and not default_on(types)):
            return None
        selected = {rt.qualified for rt in types}
        crds = self.request.selection.include_crds
        return DependencyCollector(
            self.client, self.discovery, selected, PROJECT_RULES, self.plaintext_secrets, wanted is True, crds
        )

    def _scopes(self, rt: ResourceType, sel: Selection) -> list[str | None]:
        """The LIST streams of one type, in archive order: each -n namespace, or the whole cluster; a large
        cluster-wide type is split by namespace when LISTs run in parallel (the same order: etcd's key order)."""
        if rt.namespaced and sel.namespaces:
            return list(sel.namespaces)
        if self.list_concurrency == 1 or not rt.namespaced:
            return [None]
        return split_by_namespace(self.client, rt, "" if rt.is_crd else sel.label_selector)

    def _write(
        self, writer: ArchiveWriter, streams: list[_Stream], lease: WriterLease, deps: DependencyCollector | None
    ) -> list[ResourceSummary]:
        """Every stream's objects into the archive, in order, while later streams are listed ahead (in this
        process's threads, or in worker processes), then their dependencies; stops once another run has taken the
        name over."""
        summaries: dict[str, ResourceSummary] = {}
        with contextlib.ExitStack() as stack:
            produce: Callable[[_Stream, int, Spool], None] = self._list
            if self.listers is not None and streams:
                log.info("listing in %d worker processes", self.listers.processes)
                pool = stack.enter_context(WorkerPool(self.listers, ListJob(stream_pages), role="list"))
                produce = functools.partial(list_in_worker, pool)
            producers = (functools.partial(produce, stream, self.request.page_size) for stream in streams)
            ordered = stack.enter_context(InOrder(producers, self.list_concurrency))
            for n, (stream, records) in enumerate(zip(streams, ordered, strict=True)):
                rt = stream.rt
                summary = summaries.get(rt.qualified)
                if summary is None:
                    summary = summaries[rt.qualified] = ResourceSummary(rt)
                    self.progress.start(rt.qualified)
                for path, data, flags in records:
                    if lease.lost.is_set():
                        raise lease.lost_error()
                    self._check_cancel()
                    writer.add(path, data)
                    if deps is not None:
                        deps.see(rt, data)
                    summary.count += 1
                    summary.with_status += flags & WITH_STATUS
                    summary.terminating += (flags & TERMINATING) >> 1
                    if summary.count % 500 == 0:
                        self.progress.advance(500)
                if n + 1 == len(streams) or streams[n + 1].rt.qualified != rt.qualified:
                    self.progress.advance(summary.count % 500)
                    self.progress.finish()
                    log.info("backed up %d %s", summary.count, rt.qualified)
                    kill_point("backup.type-archived")
        if deps is not None:
            self._write_dependencies(writer, deps, summaries, lease)
        return list(summaries.values())

    def _write_dependencies(
        self,
        writer: ArchiveWriter,
        deps: DependencyCollector,
        summaries: dict[str, ResourceSummary],
        lease: WriterLease,
    ) -> None:
        """The dependencies after the selected objects: each type's objects together, as the archive keeps them."""

        def write(rt: ResourceType, path: str, obj: KubeObject) -> None:
            if lease.lost.is_set():
                raise lease.lost_error()
            self._check_cancel()
            summary = summaries.get(rt.qualified)
            if summary is None:
                summary = summaries[rt.qualified] = ResourceSummary(rt)
            terminating = "deletionTimestamp" in (obj.get("metadata") or {})
            summary.with_status += bool(obj.get("status")) and not rt.is_crd
            writer.add(path, prepare_object(obj))
            summary.count += 1
            summary.terminating += terminating

        if not deps.following:
            return
        if not deps.explicit:
            log.info("following the dependencies of %s objects, as their rules say (--no-with-dependencies: not)",
                     ", ".join(sorted(deps.projects)))  # fmt: skip
        closure = deps.write(write)
        log.info("backed up %d dependencies (%d references to objects that do not exist)",
                 sum(closure.written.values()), len(closure.missing))  # fmt: skip
        kill_point("backup.dependencies-archived")

    def _check_cancel(self) -> None:
        cancel = self.request.cancel
        if cancel is not None and cancel.is_set():
            raise BackupStoppedError(f"backup {self.request.name} stopped on request before it landed: nothing kept")

    def _list(self, stream: _Stream, page_size: int, spool: Spool) -> None:
        """One LIST stream into its spool, in this process."""
        for records in stream_pages(self.client, stream, page_size):
            spool.put_many(records)

    def _manifest(
        self,
        name: str,
        sel: Selection,
        summaries: list[ResourceSummary],
        writer: ArchiveWriter,
        created_at: dt.datetime,
    ) -> dict[str, Any]:
        version = self.client.server_version()
        return {
            "formatVersion": FORMAT_VERSION,
            "tool": {"name": "statusvault", "version": installed_version()},
            "name": name,
            "createdAt": rfc3339.format_seconds(created_at),
            "completedAt": rfc3339.format_seconds(dt.datetime.now(dt.UTC)),
            "server": {"gitVersion": version.get("gitVersion", ""), "host": self.client.server},
            "selection": sel.to_dict(),
            "resources": {s.rt.qualified: s.to_dict() for s in summaries},
            "totals": {
                "objects": sum(s.count for s in summaries),
                "withStatus": sum(s.with_status for s in summaries),
                "terminating": sum(s.terminating for s in summaries),
                "uncompressedBytes": writer.raw_bytes,
            },
        }


LIST_CONCURRENCY = 4  # the CLI's default (docs/development/benchmarks.md: the measurement behind it)
WITH_STATUS, TERMINATING = 1, 2  # record flags
SPLIT_MIN = 5000  # objects of one type before its cluster-wide LIST is split by namespace
SPLIT_PER_NAMESPACE = 100  # ...and only if namespaces hold this many of them on average


@dataclasses.dataclass(frozen=True)
class _Stream:
    rt: ResourceType
    namespace: str | None
    selection: Selection
    crd_filter: set[tuple[str, str]] | None  # CRDs: only those defining a selected resource
    optional: bool = False  # a namespace's built-in type nobody named: a refused LIST leaves it out, with a warning

    @property
    def label(self) -> str:
        return self.rt.qualified + (f" in namespace {self.namespace}" if self.namespace else "")


def stream_pages(client: KubeApi, stream: _Stream, page_size: int) -> Iterator[list[Record]]:
    """One LIST stream, page by page, each object filtered and in its archived form (run in a worker process
    too: module-level, its arguments picklable). A type no longer served (its CRD deleted since discovery, its
    objects with it) ends its stream with a warning: the backup is the cluster as it is, not a failed run."""
    listed = 0
    selector = "" if stream.rt.is_crd else stream.selection.label_selector
    try:
        for page in client.list_pages(stream.rt, stream.namespace, selector, page_size):
            records = _records(stream, page)
            listed += len(records)
            yield records
    except Forbidden as e:
        if not stream.optional:
            raise _refused(stream, e) from e
        log.warning("left out %s: may not list it (%s); grant list on it, or name the types to take with "
                    "--include-resources", stream.label, e.reason)  # fmt: skip
    except NotFound:
        held = f"the {listed} object(s) listed before" if listed else "none of it"
        log.warning("%s is no longer served (its CRD was deleted during the backup?): the backup holds %s",
                    stream.label, held)  # fmt: skip


def _records(stream: _Stream, page: list[KubeObject]) -> list[Record]:
    rt, sel = stream.rt, stream.selection
    records = []
    for obj in page:
        if stream.crd_filter is not None and crd_defines(obj) not in stream.crd_filter:
            continue
        if not rt.is_crd and not name_matches(obj["metadata"].get("name", ""), sel.names):
            continue
        if stream.optional and rt.qualified in CONTROLLED and _controlled(obj):
            continue  # a Deployment's ReplicaSet, a ReplicaSet's Pod: its controller makes it again
        flags = (WITH_STATUS if obj.get("status") and not rt.is_crd else 0) | (
            TERMINATING if "deletionTimestamp" in obj["metadata"] else 0
        )
        records.append((member_path(object_key(rt, obj)), prepare_object(obj), flags))
    return records


def _controlled(obj: KubeObject) -> bool:
    refs = obj["metadata"].get("ownerReferences") or ()
    return any(isinstance(r, dict) and r.get("controller") is True for r in refs)


def _refused(stream: _Stream, e: KubeApiError) -> KubeApiError:
    """A refused LIST as one line: what could not be backed up, the server's words, what to do."""
    said = str(e.status.get("message") or e)
    message = (
        f"cannot back up {stream.label}: the API server refused to list it ({e.code} {e.reason}: {said}); "
        f"grant list on it, or leave it out with --exclude-resources {stream.rt.qualified}"
    )
    return KubeApiError.of(message, e.code, e.reason, e.status)


def split_by_namespace(client: KubeApi, rt: ResourceType, selector: str) -> list[str | None]:
    """Namespaces to LIST a type in, in etcd's key order (`ns/name`: "a-b/" before "a/"), when the type is
    large and its objects are spread over namespaces; else [None] (one cluster-wide LIST)."""
    params: list[tuple[str, str]] = [("limit", "1")] + ([("labelSelector", selector)] if selector else [])
    try:
        probe = client.request_json(Request("GET", rt.path(None), tuple(params)))  # metadata-only lists lack the count
        total = len(probe.get("items") or []) + int((probe.get("metadata") or {}).get("remainingItemCount") or 0)
        if total < SPLIT_MIN:
            return [None]
        namespaces = sorted(client.list_names(NAMESPACES, None), key=lambda ns: ns + "/")
    except (Forbidden, NotFound):  # may not list namespaces (or the type): one cluster-wide LIST
        return [None]
    if not namespaces or len(namespaces) * SPLIT_PER_NAMESPACE > total:
        return [None]
    return list(namespaces)


def crd_defines(crd: KubeObject) -> tuple[str, str]:
    """(group, plural) of the resource a CRD defines."""
    spec = crd.get("spec") or {}
    return spec.get("group", ""), (spec.get("names") or {}).get("plural", "")


def backup_with(request: BackupRequest, *, client: KubeApi, discovery: Discovery) -> BackupResult:
    """Run a typed backup request against the cluster `client` talks to (`discovery`: what it serves); every front
    end (the CLI, the API, the controller, `move`) runs its backups through this."""
    return BackupEngine(client, discovery, request).run()
