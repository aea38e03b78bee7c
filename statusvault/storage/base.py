"""The ObjectStore protocol and the one place backup keys are named."""

from __future__ import annotations

import dataclasses
import datetime as dt
from collections.abc import Iterator
from contextlib import AbstractContextManager
from pathlib import Path
from typing import BinaryIO, Protocol

from statusvault.errors import ConfigError

ARCHIVE_FILE = "archive.tar.gz"
MANIFEST_FILE = "manifest.json"  # written last: its presence marks a backup complete
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
    """A flat key/value blob store; keys use '/' separators and come from the helpers below."""

    url: str

    def check(self) -> None:
        """Fail fast (StorageError) when the store is missing, unreachable or denies access."""
        ...

    def sweep(self, older_than: float) -> int:
        """Remove what writes interrupted more than `older_than` seconds ago left behind (a killed backup's
        partial file, an S3 multipart upload never completed nor aborted); returns how many."""
        ...

    def put(self, key: str, data: bytes) -> None: ...

    def open_write(self, key: str) -> AbstractContextManager[Writer]:
        """A writer whose content becomes visible under `key` only when the block exits cleanly."""
        ...

    def get(self, key: str) -> bytes: ...

    def fetch(self, key: str, dest: Path) -> None:
        """Copy the object to a local file (streamed)."""
        ...

    def open_read(self, key: str) -> AbstractContextManager[BinaryIO]: ...

    def exists(self, key: str) -> bool: ...

    def list(self, prefix: str) -> Iterator[StoredObject]: ...

    def delete(self, key: str) -> None: ...


def validate_backup_name(name: str) -> str:
    """Backup names become keys and object names: DNS-1123-ish, no path tricks."""
    ok = name and len(name) <= 200 and all(c.isalnum() or c in "-_." for c in name)
    if not ok or name.startswith(".") or not name[0].isalnum():
        raise ConfigError(f"invalid backup name {name!r}: use letters, digits, '-', '_' and '.'")
    return name


def archive_key(name: str) -> str:
    return f"{BACKUPS_DIR}/{validate_backup_name(name)}/{ARCHIVE_FILE}"


def manifest_key(name: str) -> str:
    return f"{BACKUPS_DIR}/{validate_backup_name(name)}/{MANIFEST_FILE}"


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
