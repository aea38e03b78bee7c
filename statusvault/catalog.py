"""The commands on a store's backups: list, describe, verify, download, prune (statusvault/backupstore.py owns
where their files live and the operations on them)."""

from __future__ import annotations

import contextlib
import dataclasses
import datetime as dt
import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from statusvault import rfc3339
from statusvault.archive import ArchiveReader, VerifyReport, file_sha256, signing
from statusvault.archive.crypto import ALGORITHM, Key, decrypt_file
from statusvault.archive.envelope import RETIRED, Keyring, Keys, open_data_key, refs
from statusvault.archive.format import archive_field
from statusvault.backupstore import BackupStore
from statusvault.errors import ArchiveError, ConfigError
from statusvault.retention import Candidate, Decision, RetentionPolicy, decide
from statusvault.storage.base import (
    ObjectLock,
    ObjectStore,
    unlocked_files,
)
from statusvault.writerlease import live_writer


@dataclasses.dataclass
class BackupInfo:
    name: str
    complete: bool
    size: int
    created: str
    objects: int | None = None
    schedule: str = ""
    with_status: int | None = None
    resources: dict[str, Any] = dataclasses.field(default_factory=dict)
    writer: str = ""  # the live run writing a backup not yet complete (host, pid, since when)
    lock: ObjectLock | None = None  # S3 Object Lock on its archive and manifest, in a bucket with Object Lock

    @property
    def phase(self) -> str:
        return "Completed" if self.complete else "Writing" if self.writer else "Incomplete"

    def to_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "phase": self.phase,
            "created": self.created,
            "schedule": self.schedule,
            "objects": self.objects,
            "withStatus": self.with_status,
            "sizeBytes": self.size,
            "writer": self.writer or None,
            "lock": self.lock.to_dict() if self.lock else None,
        }


def list_backups(store: ObjectStore) -> list[BackupInfo]:
    out = []
    backups = BackupStore(store)
    for stored in backups.stored():
        info = BackupInfo(stored.name, stored.complete, stored.size, rfc3339.format_seconds(stored.modified))
        info.lock = backups.lock(stored.name, stored.files)
        if stored.complete:
            with contextlib.suppress(ArchiveError):
                _fill(info, backups.manifest(stored.name))
        elif stored.leased and (writer := live_writer(store, stored.name)) is not None:
            info.writer = writer.who
        out.append(info)
    return sorted(out, key=lambda b: (b.created, b.name))


def _fill(info: BackupInfo, manifest: dict[str, Any]) -> None:
    info.created = manifest.get("createdAt", info.created)
    totals = manifest.get("totals") or {}
    info.objects = totals.get("objects")
    info.with_status = totals.get("withStatus")
    info.resources = manifest.get("resources") or {}
    info.schedule = manifest.get("schedule") or ""


def describe(store: ObjectStore, name: str) -> dict[str, Any]:
    backups = BackupStore(store)
    manifest = backups.manifest(name)
    fields = ("createdAt", "completedAt", "formatVersion", "tool", "server", "selection", "resources", "totals")
    lock = backups.lock(name)
    encryption = manifest.get("encryption")
    return {
        "name": name,
        "phase": "Completed",
        "storage": store.url,
        **{k: manifest.get(k) for k in (*fields, "archive")},
        "lock": lock.to_dict() if lock else None,
        "encryption": _keys_of(encryption) if encryption else None,
        "signature": signing.describe(manifest),
        "dependencies": manifest.get("dependencies"),
        "importedFrom": manifest.get("importedFrom"),
    }


def _keys_of(encryption: dict[str, Any]) -> dict[str, Any]:
    """What describe shows of the encryption: the keys that open the backup, and those retired from it."""
    retired = encryption.get(RETIRED) or []
    return {"algorithm": encryption["algorithm"], "keys": refs(encryption), "retiredKeys": retired}


@contextlib.contextmanager
def readable_archive(store: ObjectStore, name: str, manifest: dict[str, Any], keys: Keys) -> Iterator[Path]:
    """The archive as a local tar.gz: its stored bytes checked against the manifest, decrypted when encrypted.

    An archive whose size differs from the manifest's is refused before it is downloaded (temp disk stays
    within the size the manifest states), and an encrypted one the keys do not open before it is downloaded."""
    archive = archive_field(manifest)
    encryption = manifest.get("encryption")
    data_key = _data_key(name, manifest, keys)
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
        with _decrypted(path, data_key) as plain:
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


def _data_key(name: str, manifest: dict[str, Any], keys: Keys) -> Key | None:
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
def _decrypted(path: Path, key: Key) -> Iterator[Path]:
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


def verify(store: ObjectStore, name: str, keys: Keys = None) -> VerifyReport:
    """The one judge of a stored backup (the CLI, the API and a Velero backup's import go through it): the stored
    archive's size and SHA-256, then (decrypting it when needed) every file's hash, and in a store with Object Lock
    that every file holds the lock its others hold.

    An encrypted backup verified without a key gets the first check only (`objects_unchecked`); given keys, its
    wrapped data key must unwrap (bound to the backup's name and archive) before anything else."""
    report = _checked(store, name, keys)
    if not report.error:
        report.unlocked = unlocked_files(store, name)
    return report


def verdict_line(name: str, report: VerifyReport) -> str:
    """What a verify says of the backup, one line."""
    if report.unlocked and dataclasses.replace(report, unlocked=[]).ok:  # its content is sound: only the locks lack
        return f"Backup {name}: FAILED: {_unlocked(report)}: run the same backup command again to lock it"
    if not report.ok:
        return f"Backup {name}: FAILED: {describe_problems(report)}"
    if report.objects_unchecked:
        return f"Backup {name}: archive checksum OK; encrypted: pass --encryption-key-file to check every object"
    signed = f"; signature verified with key {report.signed_by}" if report.signed_by else ""
    return f"Backup {name}: OK ({report.files_checked} files checked{signed})"


def _checked(store: ObjectStore, name: str, keys: Keys) -> VerifyReport:
    backups = BackupStore(store)
    manifest = backups.manifest(name)
    archive = archive_field(manifest)
    try:
        data_key = _data_key(name, manifest, keys) if keys or not manifest.get("encryption") else None
        signed_by = authenticate(name, manifest, keys, data_key is not None)
    except ArchiveError as e:
        return VerifyReport(error=str(e))
    with backups.local_archive(name) as path:
        stored_ok = path.stat().st_size == archive["size"] and file_sha256(path) == archive["sha256"]
        if not manifest.get("encryption"):
            report = ArchiveReader(path, summary=manifest).verify()
        elif data_key is None or stored_ok is False:
            return VerifyReport(archive_sha_ok=stored_ok, objects_unchecked=data_key is None, signed_by=signed_by or "")
        else:
            with _decrypted(path, data_key) as plain:
                report = ArchiveReader(plain, summary=manifest).verify()
    report.archive_sha_ok = stored_ok
    report.signed_by = signed_by or ""
    return report


def describe_problems(report: VerifyReport) -> str:
    if report.error:
        return report.error
    parts = []
    if report.archive_sha_ok is False:
        parts.append("archive checksum differs from its manifest")
    if report.mismatched:
        parts.append(f"{len(report.mismatched)} file(s) with a wrong checksum, e.g. {report.mismatched[0]}")
    if report.missing:
        parts.append(f"{len(report.missing)} file(s) missing, e.g. {report.missing[0]}")
    if report.misordered:
        parts.append(f"{len(report.misordered)} file(s) out of the manifest's order, e.g. {report.misordered[0]}")
    if report.unexpected:
        parts.append(f"{len(report.unexpected)} unexpected member(s), e.g. {report.unexpected[0]}")
    if report.unlocked:
        parts.append(_unlocked(report))
    return "; ".join(parts)


def _unlocked(report: VerifyReport) -> str:
    files = ", ".join(key.rsplit("/", 1)[-1] for key in report.unlocked)
    return f"{files} lack(s) the Object Lock its other files hold (a run stopped before locking it)"


def download(store: ObjectStore, name: str, dest: Path) -> int:
    """Copy a complete backup's archive, as stored, to `dest`; its size."""
    backups = BackupStore(store)
    backups.manifest(name)
    with backups.local_archive(name) as path:
        shutil.copyfile(path, dest)
    return dest.stat().st_size


def held_back(decision: Decision, lock: ObjectLock | None) -> Decision:
    """A decision to delete a backup S3 Object Lock holds, made a keep that says until when: never tried."""
    if not decision.delete or lock is None:
        return decision
    return Decision(decision.name, False, f"held by Object Lock: {lock.describe()}", True, lock.until)


def _created(info: BackupInfo) -> dt.datetime:
    return rfc3339.parse(info.created)


def prune(
    store: ObjectStore,
    policy: RetentionPolicy,
    schedule: str = "",
    dry_run: bool = False,
    now: dt.datetime | None = None,
) -> list[Decision]:
    """Apply a retention policy to the backups of one schedule (or all backups); return every decision."""
    infos = [
        b
        for b in list_backups(store)
        if (not schedule and not b.schedule.startswith("watch:"))  # a watch's bases: `prune --watch` only
        or (schedule and b.schedule == schedule)
        or (schedule and not b.complete and b.name.startswith(f"{schedule}-"))
    ]
    candidates = [Candidate(b.name, _created(b), b.complete, writing=bool(b.writer)) for b in infos]
    now = now or dt.datetime.now(dt.UTC)
    locks = {b.name: b.lock for b in infos if b.lock is not None and b.lock.held(now)}
    decisions = [held_back(d, locks.get(d.name)) for d in decide(candidates, policy, now)]
    if not dry_run:
        for d in decisions:
            if d.delete:
                BackupStore(store).delete(d.name)
    return decisions
