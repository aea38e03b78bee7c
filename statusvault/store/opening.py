"""A backup's archive opened for reading: its stored bytes checked against its summary manifest, its signature
checked with the verification keys given, and decrypted (into a private temporary directory that no run outlives)
when encrypted. The restore, verify and the watch's segments read archives through here."""

from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from statusvault.archive import file_sha256, signing
from statusvault.archive.crypto import ALGORITHM, Key, decrypt_file
from statusvault.archive.envelope import Keyring, Keys, open_data_key
from statusvault.archive.format import archive_field
from statusvault.errors import ArchiveError, ConfigError
from statusvault.storage.base import ObjectStore
from statusvault.store.backups import BackupStore


@contextlib.contextmanager
def readable_archive(store: ObjectStore, name: str, manifest: dict[str, Any], keys: Keys) -> Iterator[Path]:
    """The archive as a local tar.gz: its stored bytes checked against the manifest, decrypted when encrypted.

    An archive whose size differs from the manifest's is refused before it is downloaded (temp disk stays
    within the size the manifest states), and an encrypted one the keys do not open before it is downloaded."""
    archive = archive_field(manifest)
    encryption = manifest.get("encryption")
    data_key = data_key_of(name, manifest, keys)
    authenticate(name, manifest, keys, data_key is not None)
    backups = BackupStore(store)
    if backups.archive_size(name) != archive["size"]:
        raise ArchiveError(f"backup {name!r} was modified: the archive's size differs from its manifest")
    with backups.local_archive(name) as path:
        if file_sha256(path) != archive["sha256"]:
            raise ArchiveError(f"backup {name!r} was modified: the archive checksum differs from its manifest")
        if not encryption or data_key is None:
            yield path
            return
        with decrypted(path, data_key) as plain:
            yield plain


def authenticate(name: str, manifest: dict[str, Any], keys: Keys, sealed: bool) -> str | None:
    """Check the backup's signature with the verification keys given (archive/signing.py); the ID of the key that
    signed it, or None when no verification key was given. `sealed`: a key given opens it (its wrapped data key
    unwrapped, bound to its name and archive), which authenticates it as a signature would. A signed manifest
    names its backup: one stored under another name (a replay of another backup) is refused."""
    signed_by = signing.authenticate(manifest, signing.BACKUP, f"backup {name!r}", Keyring.of(keys).verifiers, sealed)
    if signed_by is not None and manifest.get("name") != name:
        raise ArchiveError(
            f"backup {name!r} is a copy of backup {str(manifest.get('name'))[:128]!r}, signed under that name: "
            "refusing it"
        )
    return signed_by


def data_key_of(name: str, manifest: dict[str, Any], keys: Keys) -> Key | None:
    """The key that decrypts the backup's archive (None: it is not encrypted); refuses a plaintext backup met with
    a key (else whoever can write the bucket could swap in a plaintext archive), and keys that do not open it."""
    encryption = manifest.get("encryption")
    if not encryption:
        if keys:
            raise ConfigError(f"backup {name!r} is not encrypted, but an encryption key was given: refusing it")
        return None
    algorithm = encryption["algorithm"][:64]
    if algorithm != ALGORITHM:
        raise ArchiveError(f"backup {name!r} is encrypted with {algorithm!r}, which this statusvault cannot read")
    return open_data_key(encryption, keys, name, archive_field(manifest)["sha256"])


DECRYPTED_PREFIX = "statusvault-plain-"  # then the pid of the process that decrypted into it, and a suffix


@contextlib.contextmanager
def decrypted(path: Path, key: Key) -> Iterator[Path]:
    """The decrypted archive in a private (0700) temporary directory, removed afterwards; what a killed earlier
    run left (kill -9 skips the removal) is swept first, so no plaintext outlives the process that needed it."""
    sweep_decrypted()
    with tempfile.TemporaryDirectory(prefix=f"{DECRYPTED_PREFIX}{os.getpid()}-") as tmp:
        plain = Path(tmp) / "archive.tar.gz"
        with open(plain, "wb") as f:
            decrypt_file(path, f, key)
        yield plain


def sweep_decrypted(root: Path | None = None) -> int:
    """Remove the decrypted archives of statusvault processes that no longer run; returns how many."""
    swept = 0
    for leftover in Path(root or tempfile.gettempdir()).glob(f"{DECRYPTED_PREFIX}*"):
        pid = leftover.name.removeprefix(DECRYPTED_PREFIX).split("-", 1)[0]
        if not pid.isdigit() or _running(int(pid)) or not leftover.is_dir() or leftover.stat().st_uid != os.getuid():
            continue
        shutil.rmtree(leftover, ignore_errors=True)
        swept += 1
    return swept


def _running(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True
