"""Key rotation: the data keys of existing backups wrapped by a new key-encryption key, and the old key's wrappings
retired, without re-encrypting any archive (archive/envelope.py).

A run first adds NEW's wrapping to every backup it is given: each summary manifest is rewritten whole, only if it
still holds the version read (a second run, or a `hold` at the same moment, is not overwritten). Only when every one
of them opens with NEW (unwrapped with it to be sure) does `retire` remove OLD's wrappings. So each backup opens
with OLD or NEW throughout, and a run that stopped is finished by running it again: a backup that has NEW's
wrapping is left as it is. A manifest under S3 Object Lock is rewritten as a new version carrying the same lock;
the version before it keeps the old wrappings until its retention ends (docs/user-guide.md)."""

from __future__ import annotations

import dataclasses
import datetime as dt
from collections.abc import Callable
from typing import Any

import orjson

from statusvault.archive.envelope import (
    WRAPPINGS,
    Kek,
    Keyring,
    open_data_key,
    refs,
    with_wrapping,
    without_wrapping,
)
from statusvault.archive.format import MAX_HEAD_BYTES, archive_field
from statusvault.catalog import list_backups, object_locks, parse_manifest
from statusvault.errors import ArchiveError, BackupNotFoundError, ConfigError, StorageError
from statusvault.storage.base import ObjectLock, ObjectStore, manifest_key, put_if, read_versioned

ATTEMPTS = 5  # rewrites of one manifest lost to another writer before the backup is reported as failed


@dataclasses.dataclass(frozen=True)
class Rotated:
    """What a run did to one backup."""

    name: str
    action: str  # wrapped | retired | unchanged | skipped | failed
    detail: str = ""

    def to_dict(self) -> dict[str, str]:
        return {"name": self.name, "action": self.action, "detail": self.detail}


@dataclasses.dataclass(frozen=True)
class Rotation:
    results: list[Rotated]
    not_retired: str = ""  # why the old key was retired from no backup, when retiring was asked for

    @property
    def failed(self) -> list[Rotated]:
        return [r for r in self.results if r.action == "failed"]


def rotate(store: ObjectStore, names: list[str], old: Kek, new: Kek, retire: bool = False) -> Rotation:
    """Wrap each named backup's data key (every complete backup's, when `names` is empty) by `new` as well; then,
    with `retire`, and only once all of them open with `new`, remove `old`'s wrappings."""
    if old.ref() == new.ref():
        raise ConfigError(f"--from and --to name the same key ({new.name})")
    names = names or [b.name for b in list_backups(store) if b.complete]
    added = [_one(store, name, lambda enc, name, sha: _add(enc, name, sha, old, new)) for name in names]
    behind = [r for r in added if r.action == "failed"]
    if not retire or behind:
        why = f"{len(behind)} backup(s) do not open with {new.name} yet" if retire and behind else ""
        return Rotation(added, why)
    return Rotation([_one(store, name, lambda enc, name, sha: _retire(enc, name, sha, old, new)) for name in names])


Field = dict[str, Any]  # a summary manifest's `encryption`
Change = Callable[[Field, str, str], tuple[Field, str]]  # (encryption, name, archive sha256) -> (new field, action)


def _one(store: ObjectStore, name: str, change: Change) -> Rotated:
    """Apply `change` to the backup's encryption field and write the manifest back if it changed; a problem of this
    backup (a key that does not open it, a modified manifest) is its result, not the run's end."""
    try:
        for _ in range(ATTEMPTS):
            current = read_versioned(store, manifest_key(name), MAX_HEAD_BYTES + 1)
            if current is None:
                raise BackupNotFoundError(f"backup {name!r} has no manifest in {store.url} (missing or incomplete)")
            manifest = parse_manifest(current.data, name)
            encryption = manifest.get("encryption")
            if not encryption:
                return Rotated(name, "skipped", "not encrypted")
            updated, action = change(encryption, name, archive_field(manifest)["sha256"])
            if updated == encryption:
                return Rotated(name, "unchanged", action)
            body = orjson.dumps({**manifest, "encryption": updated}, option=orjson.OPT_INDENT_2)
            if put_if(_keeping_lock(store, name), manifest_key(name), body, current.version) is not None:
                return Rotated(name, action)
        raise StorageError(f"the manifest of backup {name!r} changed {ATTEMPTS} times while it was rewritten")
    except (ConfigError, ArchiveError, StorageError) as e:
        return Rotated(name, "failed", str(e))


def _add(encryption: Field, name: str, sha: str, old: Kek, new: Kek) -> tuple[Field, str]:
    if new.ref() in refs(encryption):
        return encryption, f"opens with {new.name} already"
    data_key = open_data_key(encryption, Keyring((old,)), name, sha)
    if WRAPPINGS not in encryption:  # sealed with the key file itself: listed, so that it is known to open it
        encryption = with_wrapping(encryption, data_key, old, name, sha)
    return with_wrapping(encryption, data_key, new, name, sha), "wrapped"


def _retire(encryption: Field, name: str, sha: str, old: Kek, new: Kek) -> tuple[Field, str]:
    if old.ref() not in refs(encryption):
        return encryption, f"{old.name} does not open it"
    open_data_key(encryption, Keyring((new,)), name, sha)  # NEW opens it: else it would be left without a key
    return without_wrapping(encryption, old, name), "retired"


def _keeping_lock(store: ObjectStore, name: str) -> ObjectStore:
    """The store to rewrite the manifest in: in a bucket with Object Lock, one whose write carries the lock of the
    version it replaces (a retention not yet over, a legal hold)."""
    locks = object_locks(store)
    if locks is None:
        return store
    lock = locks.lock_of(manifest_key(name))
    running = lock.until is not None and lock.until > dt.datetime.now(dt.UTC)
    kept = ObjectLock(lock.mode if running else "", lock.until if running else None, lock.legal_hold)
    return locks.with_lock(kept) if kept != ObjectLock() else store
