"""The ObjectStore protocol and the one place backup keys are named."""

from __future__ import annotations

import dataclasses
import datetime as dt
import hashlib
from collections.abc import Iterable, Iterator
from contextlib import AbstractContextManager
from pathlib import Path
from typing import Protocol, runtime_checkable

from statusvault import rfc3339
from statusvault.errors import ConfigError

ARCHIVE_FILE = "archive.tar.gz"
MANIFEST_FILE = "manifest.json"  # written last: its presence marks a backup complete
WRITER_FILE = "writer.json"  # the lease of the run writing the backup (statusvault/store/writerlease.py)
BACKUPS_DIR = "backups"


@dataclasses.dataclass(frozen=True)
class S3Options:
    endpoint_url: str | None = None
    region: str | None = None
    addressing_style: str = "auto"  # auto | path | virtual
    ca_bundle: str | None = None
    insecure_skip_tls_verify: bool = False
    sse: str | None = None  # AES256 | aws:kms
    kms_key_id: str | None = None
    checksum: str = "when_supported"  # when_supported | when_required
    profile: str | None = None


@dataclasses.dataclass(frozen=True)
class StoredObject:
    key: str
    size: int
    modified: dt.datetime


class Writer(Protocol):
    def write(self, data: bytes, /) -> int: ...


class ObjectStore(Protocol):
    """A flat blob store: five verbs on whole objects, and the two streams an archive needs.

    Keys use '/' separators and come from the helpers below; nothing that takes an ObjectStore learns which
    backend it is."""

    url: str

    def put(self, key: str, data: bytes) -> None: ...

    def get(self, key: str, limit: int = -1) -> bytes:
        """The object's bytes, at most `limit` of them when limit >= 0; StorageError when there is none."""
        ...

    def exists(self, key: str) -> bool: ...

    def list(self, prefix: str) -> Iterator[StoredObject]:
        """Every object whose key starts with `prefix`, in no set order. StorageError when the store cannot be
        read (a missing bucket, bad credentials, a denial): a listing is also how a store is checked."""
        ...

    def delete(self, key: str) -> None: ...

    def open_write(self, key: str) -> AbstractContextManager[Writer]:
        """A writer for an object too big for memory; it appears under `key` only when the block exits cleanly."""
        ...

    def local_file(self, key: str) -> AbstractContextManager[Path]:
        """A local file holding the object, for readers that read it more than once: the stored file itself when
        the store is a directory, else a download removed on exit."""
        ...


@runtime_checkable
class SweepsStaleWrites(Protocol):
    """A store whose interrupted writes leave something behind (a directory's partial files, S3's multipart
    uploads) that it can find and remove."""

    def sweep(self, older_than: float) -> int:
        """Remove what writes interrupted more than `older_than` seconds ago left behind; returns how many."""
        ...


def sweep_stale_writes(store: ObjectStore, older_than: float) -> int:
    """What killed writers left in `store` more than `older_than` seconds ago, removed (0 when it keeps none)."""
    return store.sweep(older_than) if isinstance(store, SweepsStaleWrites) else 0


@dataclasses.dataclass(frozen=True)
class Versioned:
    """A small object as read for a conditional write: its bytes, a token that changes with every write of it,
    and its age: the store's clock now minus its modified time by the same clock (never this machine's)."""

    data: bytes
    version: str
    age: float


@runtime_checkable
class WritesConditionally(Protocol):
    """A store that writes a key only if it is absent or still holds the version read (S3's If-None-Match and
    If-Match; a directory's exclusive link, or a replace under a lock): of two racing writers one wins."""

    def read_versioned(self, key: str, limit: int = -1) -> Versioned | None:
        """The object (at most `limit` bytes of it when limit >= 0), or None when there is none."""
        ...

    def put_if(self, key: str, data: bytes, version: str | None) -> str | None:
        """Write `key` only if it is absent (version None) or still holds `version`; the new version, or None
        when the condition failed."""
        ...


def read_versioned(store: ObjectStore, key: str, limit: int = -1) -> Versioned | None:
    """`store.read_versioned`, or for a store without conditional writes the object with its content's hash as
    version and an age by this machine's clock."""
    if isinstance(store, WritesConditionally):
        return store.read_versioned(key, limit)
    found = next((o for o in store.list(key) if o.key == key), None)
    if found is None:
        return None
    data = store.get(key, limit)
    age = (dt.datetime.now(dt.UTC) - found.modified).total_seconds()
    return Versioned(data, hashlib.sha256(data).hexdigest(), age)


def put_if(store: ObjectStore, key: str, data: bytes, version: str | None) -> str | None:
    """`store.put_if`; a store without conditional writes is read, compared and written, which narrows the race
    between two writers to a moment but cannot close it."""
    if isinstance(store, WritesConditionally):
        return store.put_if(key, data, version)
    current = read_versioned(store, key)
    if (current.version if current else None) != version:
        return None
    store.put(key, data)
    return hashlib.sha256(data).hexdigest()


LOCK_MODES = ("GOVERNANCE", "COMPLIANCE")


@dataclasses.dataclass(frozen=True)
class ObjectLock:
    """S3 Object Lock on one object version: a retention (mode and retain-until date) and a legal hold; written
    with a backup's objects, read back to tell whether they may be deleted."""

    mode: str = ""  # GOVERNANCE | COMPLIANCE; "" without a retention
    until: dt.datetime | None = None
    legal_hold: bool = False

    def __post_init__(self) -> None:
        if self.mode not in ("", *LOCK_MODES) or bool(self.mode) != (self.until is not None):
            raise ConfigError(f"an Object Lock retention is a mode ({' or '.join(LOCK_MODES)}) and a date")

    def held(self, now: dt.datetime) -> bool:
        """Whether S3 refuses to delete the version now."""
        return self.legal_hold or (self.until is not None and self.until > now)

    def covers(self, wanted: ObjectLock) -> bool:
        """Whether this lock protects at least as much, and as long, as `wanted`."""
        strong = self.mode == wanted.mode or self.mode == "COMPLIANCE"
        lasts = wanted.until is None or (self.until is not None and strong and self.until >= wanted.until)
        return lasts and (self.legal_hold or not wanted.legal_hold)

    def describe(self) -> str:
        """ "governance until 2026-01-02T03:04:05Z, legal hold"; "" for no lock."""
        parts = [f"{self.mode.lower()} until {rfc3339.format_seconds(self.until)}"] if self.until is not None else []
        return ", ".join(parts + (["legal hold"] if self.legal_hold else []))

    def to_dict(self) -> dict[str, object]:
        until = rfc3339.format_seconds(self.until) if self.until is not None else None
        return {"mode": self.mode or None, "retainUntil": until, "legalHold": self.legal_hold}


@runtime_checkable
class LocksObjects(Protocol):
    """A store that keeps object versions S3 Object Lock protects from deletion (a directory cannot)."""

    def object_lock_enabled(self) -> bool:
        """Whether the bucket has Object Lock enabled (it is set when a bucket is created)."""
        ...

    def with_lock(self, lock: ObjectLock) -> ObjectStore:
        """The same store, whose writes (put, put_if, open_write) carry `lock`."""
        ...

    def lock_of(self, key: str) -> ObjectLock:
        """The lock on the object's current version (ObjectLock() when none)."""
        ...

    def set_legal_hold(self, key: str, on: bool) -> int:
        """Set or release the legal hold on every version of the object; returns how many versions."""
        ...

    def ensure_lock(self, key: str) -> bool:
        """Give the object's current version the lock of this store's writes (with_lock) when it lacks it; whether
        it had to. A store that still does not report it raises StorageError."""
        ...


def relock(store: ObjectStore, name: str, lock: ObjectLock) -> tuple[str, ...]:
    """The files of an existing backup without the lock its other files hold (a run killed between writing its
    manifest and locking it, on a store that drops lock headers), given that lock now (`lock`, the one asked for,
    when none holds any); the keys it had to lock. Files already locked are left as they are."""
    held = _locks(store, name)
    reference = _strongest(held.values(), lock)
    locked = locking(locking(store).with_lock(reference))
    return tuple(key for key, h in held.items() if not h.covers(reference) and locked.ensure_lock(key))


def unlocked_files(store: ObjectStore, name: str) -> list[str]:
    """The files of a locked backup (one of its files holds a lock) without the lock its others hold; none for a
    store that cannot lock or a backup without any lock."""
    if not isinstance(store, LocksObjects) or not store.object_lock_enabled():
        return []
    held = _locks(store, name)
    if not any(h.until is not None or h.legal_hold for h in held.values()):
        return []
    reference = _strongest(held.values(), ObjectLock())
    return [key for key, h in held.items() if not h.covers(reference)]


def _locks(store: ObjectStore, name: str) -> dict[str, ObjectLock]:
    """The lock of each file of the backup (its writer lease aside: it is never locked)."""
    keys = sorted(o.key for o in store.list(backup_prefix(name)) if o.key != writer_key(name))
    return {key: locking(store).lock_of(key) for key in keys}


def _strongest(held: Iterable[ObjectLock], fallback: ObjectLock) -> ObjectLock:
    locks = list(held)
    dated = [h for h in locks if h.until is not None]
    strongest = max(dated, key=lambda h: h.until or dt.datetime.min) if dated else fallback
    return dataclasses.replace(strongest, legal_hold=any(h.legal_hold for h in locks) or fallback.legal_hold)


def locking(store: ObjectStore) -> LocksObjects:
    """`store` as one that locks objects; ConfigError when it cannot (a directory, a bucket without Object Lock)."""
    if not isinstance(store, LocksObjects):
        raise ConfigError(
            f"{store.url} cannot lock backups: Object Lock (--lock-mode, --legal-hold) needs an S3 bucket created "
            "with Object Lock enabled; files in a directory can be deleted by whoever can write it"
        )
    if not store.object_lock_enabled():
        raise ConfigError(
            f"{store.url}: the bucket does not have Object Lock enabled (--lock-mode, --legal-hold need one created "
            "with it, e.g. `aws s3api create-bucket --object-lock-enabled-for-bucket`)"
        )
    return store


def locked_store(store: ObjectStore, lock: ObjectLock) -> ObjectStore:
    """`store` with every write carrying `lock`; ConfigError, before anything is written, when it cannot."""
    return locking(store).with_lock(lock)


def validate_backup_name(name: str) -> str:
    """Backup names become keys and object names: DNS-1123-ish, no path tricks, and ASCII only (a Cyrillic letter
    would make a look-alike of another backup's name)."""
    ok = name and len(name) <= 200 and all(c.isascii() and (c.isalnum() or c in "-_.") for c in name)
    if not ok or name.startswith(".") or not name[0].isalnum():
        raise ConfigError(f"invalid backup name {name!r}: use ASCII letters, digits, '-', '_' and '.'")
    return name


def archive_key(name: str) -> str:
    return f"{BACKUPS_DIR}/{validate_backup_name(name)}/{ARCHIVE_FILE}"


def manifest_key(name: str) -> str:
    return f"{BACKUPS_DIR}/{validate_backup_name(name)}/{MANIFEST_FILE}"


def writer_key(name: str) -> str:
    return f"{BACKUPS_DIR}/{validate_backup_name(name)}/{WRITER_FILE}"


REPORTS_DIR = "reports"  # the controller's restore reports, outside the backups layout


def report_key(kind: str, namespace: str, name: str, digest: str) -> str:
    """Where the controller keeps the full report of a declarative restore's attempt at one spec."""
    return f"{REPORTS_DIR}/{kind}/{namespace}/{name}-{digest}.json"


def fence_key(key: str) -> str:
    """Where a restore keeps the replica counts of the workloads it scaled to 0 (restore/quiet/scaledown.py's ledger),
    under the restore's state key."""
    return f"fences/{key}.json"


def backup_prefix(name: str) -> str:
    return f"{BACKUPS_DIR}/{validate_backup_name(name)}/"


def backup_name_of(key: str) -> str | None:
    """The backup a key belongs to, or None for keys outside the backups layout."""
    parts = key.split("/")
    if len(parts) == 3 and parts[0] == BACKUPS_DIR:
        return parts[1]
    return None


WATCHES_DIR = "watches"
WATCH_HEAD_FILE = "head.json"  # the writer's latest flush: how far the record reaches, where to resume
CHAIN_FILE = "chain.json"  # written once its base is complete: the chain's first restorable moment


def watch_prefix(watch: str) -> str:
    return f"{WATCHES_DIR}/{validate_backup_name(watch)}/"


def watch_head_key(watch: str) -> str:
    return f"{watch_prefix(watch)}{WATCH_HEAD_FILE}"


def chain_prefix(watch: str, base: str) -> str:
    return f"{watch_prefix(watch)}chains/{validate_backup_name(base)}/"


def chain_key(watch: str, base: str) -> str:
    return f"{chain_prefix(watch, base)}{CHAIN_FILE}"


def segment_key(watch: str, base: str, seq: int) -> str:
    """A segment's compressed JSON Lines; its manifest is the same key ending in `.json`."""
    return f"{chain_prefix(watch, base)}{seq:010d}.jsonl.gz"


def segment_manifest_key(watch: str, base: str, seq: int) -> str:
    return f"{chain_prefix(watch, base)}{seq:010d}.json"


def chain_of(key: str, watch: str) -> tuple[str, str] | None:
    """(base, file name) of a key under a watch's chains, or None."""
    parts = key[len(watch_prefix(watch)) :].split("/") if key.startswith(watch_prefix(watch)) else []
    if len(parts) == 3 and parts[0] == "chains":
        return parts[1], parts[2]
    return None
