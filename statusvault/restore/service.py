"""Restore a named backup from a store: fetch, verify, plan, execute."""

from __future__ import annotations

import dataclasses
import fcntl
import hashlib
import logging
import os
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

from statusvault.archive import ArchiveReader, file_sha256
from statusvault.catalog import read_manifest, readable_archive
from statusvault.crypto import Key
from statusvault.errors import ArchiveError, KubeApiError, StatusVaultError
from statusvault.kube.client import KubeClient
from statusvault.kube.discovery import Discovery
from statusvault.model import ResourceType
from statusvault.progress import Progress
from statusvault.restore.execute import RestoreEngine
from statusvault.restore.pause import Pauser, resolve_workloads
from statusvault.restore.plan import NAMESPACE_TYPE, RestoreOptions, build_plan
from statusvault.restore.planstore import RestorePlan, new_manager
from statusvault.restore.results import RestoreReport
from statusvault.restore.writes import written_by
from statusvault.storage.base import ObjectStore

log = logging.getLogger(__name__)


class ExistenceIndex:
    """Which objects already exist, from one metadata-only LIST per (resource, namespace).

    Objects this restore wrote (an earlier attempt, before --restart) do not count: the run creates them
    again, meets AlreadyExists and knows them as its own by their field manager."""

    def __init__(self, client: KubeClient, manager: str):
        self.client = client
        self.manager = manager
        self._names: dict[tuple[str, str], set[str]] = {}
        self._lock = threading.Lock()

    def __call__(self, rt: ResourceType, namespace: str, name: str) -> bool:
        key = (rt.path(namespace or None), namespace)
        with self._lock:
            names = self._names.get(key)
            if names is None:
                names = self._list(rt, namespace)
                self._names[key] = names
        if names is _UNLISTABLE:
            return self._namespace_exists(name)
        return name in names

    def _list(self, rt: ResourceType, namespace: str) -> set[str]:
        if not rt.version:
            return set()
        try:
            metas = self.client.list_metadata(rt, namespace or None)
            return {m.get("name", "") for m in metas if not written_by(m, self.manager)}
        except KubeApiError as e:
            if e.code != 403 or rt.path(None) != NAMESPACE_TYPE.path(None):
                raise
            return _UNLISTABLE  # a namespace admin may not list namespaces: ask for each one

    def _namespace_exists(self, name: str) -> bool:
        """One GET; a user not allowed even that cannot create the namespace either, so it is taken as there."""
        try:
            return self.client.get(NAMESPACE_TYPE, None, name) is not None
        except KubeApiError as e:
            if e.code != 403:
                raise
            log.info("not allowed to read namespace %s: assuming it exists", name)
            return True


_UNLISTABLE: set[str] = set()


@contextmanager
def open_backup(store: ObjectStore, name: str, key: Key | None = None) -> Iterator[ArchiveReader]:
    """A reader over the backup's archive after checking it is complete and its checksum matches (decrypted
    with key when the backup is encrypted)."""
    manifest = read_manifest(store, name)
    with readable_archive(store, name, manifest, key) as path:
        stored = (manifest.get("archive") or {}).get("sha256") or file_sha256(path)
        reader = ArchiveReader(path, sha256=stored)
        if manifest.get("encryption") and reader.head().get("name") != name:  # the authenticated inner name
            raise ArchiveError(
                f"the encrypted archive stored as {name!r} belongs to backup {reader.head().get('name')!r}"
            )
        yield reader


def journal_path(state_dir: Path, backup: str, identity: tuple[str, ...], opts: RestoreOptions) -> Path:
    """Where the journal of a restore lives: one per backup (store, name, content), target cluster and options."""
    key = repr((backup, *identity, dataclasses.replace(opts, dry_run="none")))
    return state_dir / "restores" / f"{backup}-{hashlib.sha256(key.encode()).hexdigest()[:16]}.sqlite"


@contextmanager
def planned(
    client: KubeClient,
    discovery: Discovery,
    reader: ArchiveReader,
    name: str,
    opts: RestoreOptions,
    journal: Path | None = None,
    restart: bool = False,
) -> Iterator[RestorePlan]:
    """The plan: checks every object file and changes nothing.

    With a journal, the plan of an earlier run of the same restore that did not finish is resumed
    (unless restart), and the journal is held locked while the plan is in use."""
    if journal is not None and opts.dry_run == "none":
        try:
            journal.parent.mkdir(parents=True, exist_ok=True)
        except OSError as e:
            log.warning("cannot keep a restore journal (%s): this restore cannot be resumed", e)
            journal = None
    manager = new_manager()
    if journal is None or opts.dry_run != "none":
        with build_plan(reader, opts, discovery, ExistenceIndex(client, manager), name, manager) as plan:
            yield plan
        return
    with _locked(journal, name):
        if journal.exists() and not restart:
            plan = RestorePlan.reopen(journal)
            log.info("resuming an earlier restore of %s: %d objects were already done", name, plan.resumed)
        else:
            manager = _earlier_manager(journal) or manager
            exists = ExistenceIndex(client, manager)
            plan = build_plan(reader, opts, discovery, exists, name, manager, journal=journal)
        with plan:
            yield plan


def _earlier_manager(journal: Path) -> str:
    """The identity of the attempt that --restart discards: what it created is still this restore's own."""
    if not journal.exists():
        return ""
    try:
        with RestorePlan.reopen(journal) as earlier:
            return earlier.manager
    except StatusVaultError:
        return ""  # unreadable: its objects count as existing


@contextmanager
def _locked(journal: Path, name: str) -> Iterator[None]:
    """An exclusive flock on <journal>.lock. The lock file is removed with the journal, so after locking
    check that the file locked is still the one at that path (else a remover won the race: try again)."""
    lock = journal.with_suffix(".lock")
    while True:
        with open(lock, "a") as f:
            try:
                fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                raise StatusVaultError(
                    f"another restore of {name} with the same options is running (it holds {lock})"
                ) from None
            try:
                current = os.stat(lock).st_ino
            except FileNotFoundError:
                continue
            if current != os.fstat(f.fileno()).st_ino:
                continue
            try:
                yield
            finally:
                if not journal.exists():
                    lock.unlink(missing_ok=True)
            return


def run_restore(
    client: KubeClient,
    discover: Callable[[bool], Discovery],
    store: ObjectStore,
    name: str,
    opts: RestoreOptions,
    state_dir: Path | None,
    restart: bool = False,
    progress: Progress | None = None,
    parallel: int = 8,
    key: Key | None = None,
    cancel: threading.Event | None = None,
) -> RestoreReport:
    """Fetch and check the backup, plan (or resume its journal under state_dir), and restore.

    discover(refresh) gives the cluster's resource types; refresh=True re-reads them after CRDs."""
    workloads = resolve_workloads(opts.scale_down, discover(False))  # a bad name fails before anything
    pauser = Pauser(client)
    for w in workloads:
        pauser.get(w)
    with open_backup(store, name, key) as reader:
        journal = None
        if state_dir is not None:
            journal = journal_path(state_dir, name, (store.url, reader.sha256, client.transport.host), opts)
        with planned(client, discover(False), reader, name, opts, journal, restart) as plan:
            engine = RestoreEngine(client, discover(False), lambda: discover(True), progress, parallel, cancel=cancel)
            if opts.dry_run != "none" or not workloads:
                return engine.run(reader, plan, opts)
            if not plan.pending():  # an earlier run restored everything but died before scaling back
                for w in workloads:
                    pauser.scale_back(w)
                return engine.run(reader, plan, opts)
            with pauser.paused(workloads):
                return engine.run(reader, plan, opts)
