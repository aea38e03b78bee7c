"""The backups in one store: where each backup's files live, and every operation that reads or writes them.

A backup NAME is `backups/NAME/archive.tar.gz` (the archive), `backups/NAME/manifest.json` (its summary manifest) and,
while a run writes it, `backups/NAME/writer.json` (that run's lease, statusvault/store/writerlease.py). The manifest is
written last: its presence marks the backup complete, so `complete` is the one place a backup becomes usable, and
`delete` removes the manifest first. Nothing outside this module and the lease names these files; the commands above it
(catalog, backup, keys, move, watch, the controller) go through a `BackupStore`."""

from __future__ import annotations

import contextlib
import dataclasses
import datetime as dt
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import orjson

from statusvault.archive.format import MAX_HEAD_BYTES, check_json_size, check_summary, json_object
from statusvault.errors import ArchiveError, BackupHeldError, BackupNotFoundError, StorageError
from statusvault.storage.base import (
    ARCHIVE_FILE,
    BACKUPS_DIR,
    MANIFEST_FILE,
    WRITER_FILE,
    LocksObjects,
    ObjectLock,
    ObjectStore,
    Writer,
    archive_key,
    backup_name_of,
    backup_prefix,
    locked_store,
    locking,
    manifest_key,
    put_if,
    read_versioned,
    report_key,
    writer_key,
)
from statusvault.store.writerlease import live_writer

Manifest = dict[str, Any]
REWRITE_ATTEMPTS = 5  # rewrites of one manifest lost to another writer before the rewrite is given up


def parse_manifest(data: bytes, name: str) -> Manifest:
    """A summary manifest's bytes, held to the format's rules (at most MAX_HEAD_BYTES + 1 of them read)."""
    if len(data) > MAX_HEAD_BYTES:
        raise ArchiveError(f"manifest of backup {name!r} is larger than the limit ({MAX_HEAD_BYTES:,} bytes)")
    check_json_size(f"manifest of backup {name!r}", data)
    manifest = json_object(f"manifest of backup {name!r}", data)
    check_summary(manifest)
    return manifest


def object_locks(store: ObjectStore) -> LocksObjects | None:
    """The store, when it keeps object versions under S3 Object Lock; else None (nothing there is ever held)."""
    return store if isinstance(store, LocksObjects) and store.object_lock_enabled() else None


@dataclasses.dataclass
class Stored:
    """What the store holds under one backup's name, as listed."""

    name: str
    files: set[str]
    size: int  # of the backup's files (the writer's lease is not the backup's)
    modified: dt.datetime  # the earliest file's

    @property
    def complete(self) -> bool:
        return {ARCHIVE_FILE, MANIFEST_FILE} <= self.files

    @property
    def leased(self) -> bool:
        """A run holds, or held, the writer lease of this backup."""
        return WRITER_FILE in self.files


class BackupStore:
    """One store's backups (see the module's docstring for the layout)."""

    def __init__(self, objects: ObjectStore, lock: ObjectLock | None = None) -> None:
        """`lock`: the S3 Object Lock every archive and manifest written through this object carries; a store
        that cannot lock is refused here, before anything is written."""
        self.objects = objects
        self._writes = locked_store(objects, lock) if lock is not None else objects

    @property
    def url(self) -> str:
        return self.objects.url

    # -- reading --------------------------------------------------------------------------------------------------

    def stored(self) -> list[Stored]:
        """Every backup the store holds something of, complete or not, by name."""
        found: dict[str, Stored] = {}
        for obj in self.objects.list(f"{BACKUPS_DIR}/"):
            name = backup_name_of(obj.key)
            if name is None:
                continue
            entry = found.setdefault(name, Stored(name, set(), 0, obj.modified))
            file = obj.key.rsplit("/", 1)[1]
            entry.files.add(file)
            entry.size += obj.size if file != WRITER_FILE else 0
            entry.modified = min(entry.modified, obj.modified)
        return [found[name] for name in sorted(found)]

    def files(self, name: str) -> set[str]:
        """The file names stored under the backup (an unusable store fails here, not with "not found")."""
        return {o.key.rsplit("/", 1)[1] for o in self.objects.list(backup_prefix(name))}

    def is_complete(self, name: str) -> bool:
        return self.objects.exists(manifest_key(name))

    def manifest(self, name: str) -> Manifest:
        """The summary manifest of a complete backup; a missing, incomplete or still-written one is a clear error."""
        stored = self.files(name)
        if MANIFEST_FILE not in stored:
            if not stored:
                raise BackupNotFoundError(f"backup {name!r} not found in {self.url}")
            writer = live_writer(self.objects, name) if WRITER_FILE in stored else None
            if writer is not None:
                raise ArchiveError(f"backup {name!r} is being written by another run ({writer.who}): it cannot be "
                                   "used until it completes")  # fmt: skip
            raise ArchiveError(
                f"backup {name!r} is incomplete (no manifest): it cannot be used; a run that stopped left it (the "
                "same backup command replaces it, `delete` removes it)"
            )
        return parse_manifest(self.objects.get(manifest_key(name), MAX_HEAD_BYTES + 1), name)

    def archive_size(self, name: str) -> int:
        """The size of the backup's archive as stored (read before anything is downloaded)."""
        key = archive_key(name)
        size = next((o.size for o in self.objects.list(backup_prefix(name)) if o.key == key), None)
        if size is None:
            raise BackupNotFoundError(f"archive of backup {name!r} not found in {self.url}")
        return size

    @contextlib.contextmanager
    def local_archive(self, name: str) -> Iterator[Path]:
        """A local file of the backup's archive: the stored file itself, or a temporary download (the store's
        choice)."""
        key = archive_key(name)
        if not self.objects.exists(key):
            raise BackupNotFoundError(f"archive of backup {name!r} not found in {self.url}")
        with self.objects.local_file(key) as path:
            yield path

    # -- writing a backup: the archive, then the manifest that completes it --------------------------------------

    @contextlib.contextmanager
    def writing_archive(self, name: str) -> Iterator[Writer]:
        """A sink for the backup's archive; it lands when the block ends without an error."""
        with self._writes.open_write(archive_key(name)) as sink:
            yield sink

    @staticmethod
    def archive_entry(size: int, sha256: str) -> dict[str, Any]:
        """The manifest's `archive` field: which file of the backup is its archive, its size and checksum."""
        return {"file": ARCHIVE_FILE, "size": size, "sha256": sha256}

    def complete(self, name: str, manifest: Manifest) -> None:
        """Write the manifest: from here on the backup is complete and usable."""
        self._writes.put(manifest_key(name), orjson.dumps(manifest, option=orjson.OPT_INDENT_2))

    def discard_archive(self, name: str) -> None:
        """Remove the archive of a backup that will not be completed."""
        self.objects.delete(archive_key(name))

    def rewrite_manifest(self, name: str, change: Callable[[Manifest], Manifest]) -> bool:
        """Write `change(manifest)` over a complete backup's manifest, only over the version it was read from (a
        rewrite lost to another writer is read and changed again), keeping the lock that version holds; False
        when the change left it as it was (nothing written)."""
        for _ in range(REWRITE_ATTEMPTS):
            current = read_versioned(self.objects, manifest_key(name), MAX_HEAD_BYTES + 1)
            if current is None:
                raise BackupNotFoundError(f"backup {name!r} has no manifest in {self.url} (missing or incomplete)")
            manifest = parse_manifest(current.data, name)
            updated = change(manifest)
            if updated == manifest:
                return False
            body = orjson.dumps(updated, option=orjson.OPT_INDENT_2)
            if put_if(self._keeping_lock(name), manifest_key(name), body, current.version) is not None:
                return True
        raise StorageError(f"the manifest of backup {name!r} changed {REWRITE_ATTEMPTS} times while it was rewritten")

    def _keeping_lock(self, name: str) -> ObjectStore:
        """The store to rewrite the manifest in: in a bucket with Object Lock, one whose write carries the lock of
        the version it replaces (a retention not yet over, a legal hold)."""
        locks = object_locks(self.objects)
        if locks is None:
            return self.objects
        lock = locks.lock_of(manifest_key(name))
        running = lock.until is not None and lock.until > dt.datetime.now(dt.UTC)
        kept = ObjectLock(lock.mode if running else "", lock.until if running else None, lock.legal_hold)
        return locks.with_lock(kept) if kept != ObjectLock() else self.objects

    # -- locks and deletion ---------------------------------------------------------------------------------------

    def lock(self, name: str, files: set[str] | None = None) -> ObjectLock | None:
        """The lock on the backup: the longer retention and any legal hold of its archive and manifest (None: none,
        or a store without Object Lock). `files`: the backup's file names, when already listed."""
        locks = object_locks(self.objects)
        if locks is None:
            return None
        names = self.files(name) if files is None else files
        found = [locks.lock_of(f"{backup_prefix(name)}{f}") for f in (ARCHIVE_FILE, MANIFEST_FILE) if f in names]
        longest = max(found, key=lambda lock: lock.until or dt.datetime.min.replace(tzinfo=dt.UTC), default=None)
        if longest is None:
            return None
        lock = ObjectLock(longest.mode, longest.until, any(f.legal_hold for f in found))
        return lock if lock != ObjectLock() else None

    def hold(self, name: str, now: dt.datetime | None = None) -> ObjectLock | None:
        """The lock that keeps the backup from being deleted now, or None when nothing holds it."""
        lock = self.lock(name)
        return lock if lock is not None and lock.held(now or dt.datetime.now(dt.UTC)) else None

    def set_legal_hold(self, name: str, on: bool) -> int:
        """Set (or release) the legal hold on every version of a complete backup's archive and manifest; how many
        versions."""
        locks = locking(self.objects)
        self.manifest(name)  # a complete backup, or a clear error
        return sum(locks.set_legal_hold(key, on) for key in (archive_key(name), manifest_key(name)))

    def delete(self, name: str) -> list[str]:
        """Delete the backup, its manifest first; refused while a live run writes it or Object Lock holds it."""
        keys = [o.key for o in self.objects.list(backup_prefix(name))]
        if not keys:
            raise BackupNotFoundError(f"backup {name!r} not found in {self.url}")
        if manifest_key(name) not in keys and writer_key(name) in keys and (writer := live_writer(self.objects, name)):
            raise writer.refusal(self.objects, name, "it can be deleted once that run has ended")
        held = self.hold(name)
        if held is not None:  # a delete would only hide it behind a delete marker: S3 keeps the locked versions
            release = "until its legal hold is released (`statusvault hold release`)"
            until = release if held.legal_hold else "before then"
            raise BackupHeldError(
                f"backup {name!r} is held by S3 Object Lock ({held.describe()}): it cannot be deleted {until}"
            )
        # the manifest goes first, so a half-finished delete leaves an incomplete backup, never a broken one
        keys.sort(key=lambda k: not k.endswith(f"/{MANIFEST_FILE}"))
        for key in keys:
            self.objects.delete(key)
        return keys

    # -- the controller's restore reports, beside the backups ----------------------------------------------------

    def put_report(self, kind: str, namespace: str, name: str, digest: str, report: dict[str, Any]) -> str:
        """Keep a Restore attempt's full report; its location (the caller decides what a refusal means)."""
        key = report_key(kind, namespace, name, digest)
        self.objects.put(key, orjson.dumps(report))
        return f"{self.url.rstrip('/')}/{key}"
