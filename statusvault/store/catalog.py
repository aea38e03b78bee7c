"""The commands on a store's backups: list, describe, verify, download, prune (statusvault/store/backups.py owns
where their files live and the operations on them)."""

from __future__ import annotations

import contextlib
import dataclasses
import datetime as dt
import shutil
from pathlib import Path
from typing import Any

from statusvault import rfc3339
from statusvault.archive import ArchiveReader, VerifyReport, file_sha256, signing
from statusvault.archive.envelope import RETIRED, Keys, refs
from statusvault.archive.format import archive_field
from statusvault.errors import ArchiveError
from statusvault.storage.base import (
    ObjectLock,
    ObjectStore,
    unlocked_files,
)
from statusvault.store.backups import BackupStore
from statusvault.store.opening import authenticate, data_key_of, decrypted
from statusvault.store.retention import Candidate, Decision, RetentionPolicy, decide
from statusvault.store.writerlease import live_writer


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
        data_key = data_key_of(name, manifest, keys) if keys or not manifest.get("encryption") else None
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
            with decrypted(path, data_key) as plain:
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
