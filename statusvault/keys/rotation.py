"""Key rotation: the data keys of existing backups wrapped by a new key-encryption key, and the old key's wrappings
retired, without re-encrypting any archive (archive/envelope.py).

A run first adds NEW's wrapping to every backup it is given: each summary manifest is rewritten whole, only if it
still holds the version read (a second run, or a `hold` at the same moment, is not overwritten). Only when every one
of them opens with NEW (unwrapped with it to be sure) does `retire` remove OLD's wrappings. So each backup opens
with OLD or NEW throughout, and a run that stopped is finished by running it again: a backup that has NEW's
wrapping is left as it is. A manifest under S3 Object Lock is rewritten as a new version carrying the same lock;
the version before it keeps the old wrappings until its retention ends (docs/how-to/encrypt-and-rotate-keys.md)."""

from __future__ import annotations

import dataclasses
import enum
from collections.abc import Callable
from typing import Any

from statusvault.archive.envelope import (
    WRAPPINGS,
    Kek,
    Keyring,
    open_data_key,
    refs,
    with_wrapping,
    without_wrapping,
)
from statusvault.archive.format import archive_field
from statusvault.errors import ArchiveError, ConfigError, StorageError
from statusvault.storage.base import ObjectStore
from statusvault.store.backups import BackupStore
from statusvault.store.catalog import list_backups


class RotationAction(enum.StrEnum):
    """What a run did to one backup."""

    WRAPPED = "wrapped"  # its data key is wrapped by the new key as well
    RETIRED = "retired"  # the old key's wrapping is removed
    UNCHANGED = "unchanged"  # nothing to do: the detail says why
    SKIPPED = "skipped"  # not encrypted
    FAILED = "failed"  # the detail says why; the run goes on with the next backup


@dataclasses.dataclass(frozen=True)
class Rotated:
    """What a run did to one backup."""

    name: str
    action: RotationAction
    detail: str = ""

    def to_dict(self) -> dict[str, str]:
        return {"name": self.name, "action": self.action, "detail": self.detail}


@dataclasses.dataclass(frozen=True)
class Rotation:
    results: list[Rotated]
    not_retired: str = ""  # why the old key was retired from no backup, when retiring was asked for

    @property
    def failed(self) -> list[Rotated]:
        return [r for r in self.results if r.action is RotationAction.FAILED]


def rotate(store: ObjectStore, names: list[str], old: Kek, new: Kek, retire: bool = False) -> Rotation:
    """Wrap each named backup's data key (every complete backup's, when `names` is empty) by `new` as well; then,
    with `retire`, and only once all of them open with `new`, remove `old`'s wrappings."""
    if old.ref() == new.ref():
        raise ConfigError(f"--from and --to name the same key ({new.name})")
    names = names or [b.name for b in list_backups(store) if b.complete]
    added = [_one(store, name, lambda enc, name, sha: _add(enc, name, sha, old, new)) for name in names]
    behind = [r for r in added if r.action is RotationAction.FAILED]
    if not retire or behind:
        why = f"{len(behind)} backup(s) do not open with {new.name} yet" if retire and behind else ""
        return Rotation(added, why)
    return Rotation([_one(store, name, lambda enc, name, sha: _retire(enc, name, sha, old, new)) for name in names])


Field = dict[str, Any]  # a summary manifest's `encryption`
# (encryption, name, archive sha256) -> (the new field, what was done: WRAPPED or RETIRED; UNCHANGED, and why)
Change = Callable[[Field, str, str], tuple[Field, RotationAction, str]]


def _one(store: ObjectStore, name: str, change: Change) -> Rotated:
    """Apply `change` to the backup's encryption field and write the manifest back if it changed; a problem of this
    backup (a key that does not open it, a modified manifest) is its result, not the run's end."""
    done = Rotated(name, RotationAction.SKIPPED, "not encrypted")

    def changed(manifest: dict[str, Any]) -> dict[str, Any]:
        nonlocal done
        encryption = manifest.get("encryption")
        if not encryption:
            done = Rotated(name, RotationAction.SKIPPED, "not encrypted")
            return manifest
        updated, action, why = change(encryption, name, archive_field(manifest)["sha256"])
        done = Rotated(name, action, why)
        return {**manifest, "encryption": updated}

    try:
        BackupStore(store).rewrite_manifest(name, changed)
    except (ConfigError, ArchiveError, StorageError) as e:
        return Rotated(name, RotationAction.FAILED, str(e))
    return done


def _add(encryption: Field, name: str, sha: str, old: Kek, new: Kek) -> tuple[Field, RotationAction, str]:
    if new.ref() in refs(encryption):
        return encryption, RotationAction.UNCHANGED, f"opens with {new.name} already"
    data_key = open_data_key(encryption, Keyring((old,)), name, sha)
    if WRAPPINGS not in encryption:  # sealed with the key file itself: listed, so that it is known to open it
        encryption = with_wrapping(encryption, data_key, old, name, sha)
    return with_wrapping(encryption, data_key, new, name, sha), RotationAction.WRAPPED, ""


def _retire(encryption: Field, name: str, sha: str, old: Kek, new: Kek) -> tuple[Field, RotationAction, str]:
    if old.ref() not in refs(encryption):
        return encryption, RotationAction.UNCHANGED, f"{old.name} does not open it"
    open_data_key(encryption, Keyring((new,)), name, sha)  # NEW opens it: else it would be left without a key
    return without_wrapping(encryption, old, name), RotationAction.RETIRED, ""
