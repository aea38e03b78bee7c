"""Backup resources (statusvault.dev/v1alpha1): a one-off backup asked for declaratively. Its spec as a
`BackupIntent`, and running it with the same engine as `statusvault backup`."""

from __future__ import annotations

import dataclasses
import datetime as dt
import logging
import threading
from typing import Any

from statusvault.archive.envelope import Keys
from statusvault.archive.signing import Signer
from statusvault.backup import BackupRequest, backup_with
from statusvault.backup.listers import default_list_processes
from statusvault.controller import crd
from statusvault.controller.conditions import Reason
from statusvault.controller.restores import spec_digest
from statusvault.controller.runs import Run
from statusvault.errors import BackupExistsError, BackupStoppedError, ConfigError, StatusVaultError
from statusvault.flagtable import check_options, flag_value, value_key
from statusvault.kube.api import KubeApi
from statusvault.kube.discovery import Discovery
from statusvault.model import KubeObject, Selection, split_csv
from statusvault.processes import WorkerSettings
from statusvault.storage.base import ObjectLock, ObjectStore, locking, relock, validate_backup_name
from statusvault.store.retention import asked_lock, parse_duration

log = logging.getLogger(__name__)
DEFAULT_LIST_CONCURRENCY = 4
LOCK_MODES = ("governance", "compliance")


@dataclasses.dataclass(frozen=True)
class LockLimits:
    """The Object Lock a Backup or BackupSchedule may ask for (`controller run --lock-modes`, `--max-lock-for`).
    A legal hold is always allowed: whoever may s3:PutObjectLegalHold lifts it."""

    modes: tuple[str, ...] = ("governance",)  # compliance, which nobody can undo, is allowed on purpose only
    max_for: str = ""  # the longest lock-for, as the administrator wrote it ("": no maximum)

    def __post_init__(self) -> None:
        unknown = [m for m in self.modes if m not in LOCK_MODES]
        if unknown:
            raise ConfigError(
                f"--lock-modes: {unknown[0][:50]!r} is not a lock mode (give {', '.join(LOCK_MODES)} or none)"
            )
        if self.max_for:
            try:
                parse_duration(self.max_for)
            except ConfigError as e:
                raise ConfigError(f"--max-lock-for: {e}") from e

    def check(self, mode: str, lock_for: str) -> None:
        """Refuse a spec's lock-mode or lock-for beyond these limits: ConfigError naming the field, what it asks and
        what this controller allows."""
        if mode and mode.lower() not in self.modes:
            allowed = ", ".join(self.modes) or "none"
            raise ConfigError(f"spec.lock-mode {mode} is not allowed by this controller (allowed: {allowed})")
        if lock_for and self.max_for and parse_duration(lock_for) > parse_duration(self.max_for):
            raise ConfigError(
                f"spec.lock-for {lock_for} is longer than this controller allows (at most {self.max_for})"
            )


def lock_modes(text: str) -> tuple[str, ...]:
    """--lock-modes' value: comma-separated modes; "" or "none" allows none."""
    return () if text.strip().lower() == "none" else tuple(dict.fromkeys(split_csv(text.lower())))


@dataclasses.dataclass(frozen=True)
class BackupIntent:
    backup: str  # the name it is written under
    storage: str | None
    selection: Selection
    schedule: str
    page_size: int
    list_concurrency: int
    processes: int
    digest: str
    service_account: str = ""  # spec.serviceAccountName: whom the controller acts as ("": its default)
    with_dependencies: bool | None = None  # spec.with-dependencies (None: where a project's rules say so)
    allow_plaintext_secrets: bool = False  # spec.allow-plaintext-secrets
    lock_mode: str = ""  # spec.lock-mode, lock-for, legal-hold: S3 Object Lock on the backup, as --lock-mode ...
    lock_for: str = ""
    legal_hold: bool = False

    def lock(self, now: dt.datetime) -> ObjectLock | None:
        """The Object Lock the backup is written with, from `now` (its start), or None."""
        return asked_lock(self.lock_mode, self.lock_for, self.legal_hold, now)


def parse_backup(obj: KubeObject, locks: LockLimits) -> BackupIntent:
    """The backup a Backup's spec asks for, its lock within `locks`; ConfigError names what is wrong."""
    spec: dict[str, Any] = obj.get("spec") or {}
    values: dict[str, Any] = {value_key(f"--{k}"): tuple(v) if isinstance(v, list) else v for k, v in spec.items()}
    check_options(values)
    backup = validate_backup_name(str(spec.get("backup") or obj["metadata"]["name"]))
    schedule = str(spec.get("schedule") or "")
    if schedule:
        validate_backup_name(schedule)
    selection = Selection.from_values(values, include_crds=True)
    concurrency = int(spec.get("list-concurrency") or DEFAULT_LIST_CONCURRENCY)
    lock = (str(spec.get("lock-mode") or ""), str(spec.get("lock-for") or ""))
    legal_hold = bool(flag_value(spec.get("legal-hold"), "spec.legal-hold"))
    asked_lock(*lock, legal_hold, dt.datetime.now(dt.UTC))  # a lock-for that is not a duration: refused now
    locks.check(*lock)
    return BackupIntent(
        backup,
        str(spec.get("storage") or "").strip() or None,
        selection,
        schedule,
        int(spec.get("page-size") or 500),
        concurrency,
        int(spec.get("processes") or 0) or default_list_processes(concurrency),
        spec_digest(obj),
        str(spec.get(crd.SERVICE_ACCOUNT) or "").strip(),
        flag_value(spec.get("with-dependencies"), "spec.with-dependencies"),
        bool(flag_value(spec.get("allow-plaintext-secrets"), "spec.allow-plaintext-secrets")),
        *lock,
        legal_hold,
    )


def run_backup(
    client: KubeApi,
    discovery: Discovery,
    store: ObjectStore,
    key: Keys,
    intent: BackupIntent,
    workers: WorkerSettings,
    cancel: threading.Event | None = None,
    signer: Signer | None = None,
) -> Run:
    """The backup, its outcome whatever happens (an error is recorded, never raised); `cancel` stops it before it
    lands. A backup asked to be locked is refused before anything is read when the store cannot lock (a directory,
    a bucket without Object Lock); one a killed run of it left unlocked has its locks repaired, as the CLI does."""
    lock = intent.lock(dt.datetime.now(dt.UTC))
    request = BackupRequest(
        store=store,
        name=intent.backup,
        selection=intent.selection,
        schedule=intent.schedule,
        key=key,
        signer=signer,
        page_size=intent.page_size,
        list_concurrency=intent.list_concurrency,
        listers=dataclasses.replace(workers, processes=intent.processes),
        with_dependencies=intent.with_dependencies,
        allow_plaintext_secrets=intent.allow_plaintext_secrets,
        cancel=cancel,
        lock=lock,
    )
    try:
        if lock is not None:
            locking(store)
        result = backup_with(request, client=client, discovery=discovery)
    except BackupExistsError as e:
        if lock is None or not (relocked := relock(store, intent.backup, lock)):
            return Run(False, True, f"backup {intent.backup} failed: {e}", Reason.BACKUP_FAILED)
        message = f"backup {intent.backup}: written by a run that stopped; {len(relocked)} file(s) locked now"
        return Run(True, False, message, Reason.COMPLETED)
    except BackupStoppedError as e:  # deleted mid-run, or the Lease was lost: nothing landed
        return Run(False, False, str(e), Reason.INTERRUPTED, interrupted=True)
    except StatusVaultError as e:  # a bad selection is this Backup's own problem; anything else may be an outage
        run_wide = not isinstance(e, ConfigError)
        return Run(False, run_wide, f"backup {intent.backup} failed: {e}", Reason.BACKUP_FAILED)
    except Exception as e:  # a bug or the disk: recorded and backed off like any failure, never a hot loop
        log.exception("backup %s", intent.backup)
        return Run(False, False, f"backup {intent.backup} failed: {type(e).__name__}: {e}", Reason.BACKUP_FAILED)
    totals = result.manifest["totals"]
    message = (
        f"backup {result.name}: {totals['objects']} objects ({totals['withStatus']} with status) "
        f"in {result.duration:.1f}s -> {result.storage}"
    )
    counts = {"objects": str(totals["objects"]), "withStatus": str(totals["withStatus"])}
    return Run(True, False, message, Reason.COMPLETED, counts=counts)
