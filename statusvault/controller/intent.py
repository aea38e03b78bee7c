"""Restore intents: a ConfigMap in Git says which backup should be restored; its status ConfigMap says what was done.

Pure functions only: parsing an intent, and deciding what a reconcile does given the intent, its status and the
time. The loop in controller/loop.py does the I/O.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import enum
import hashlib
import posixpath
from collections.abc import Mapping
from typing import Any

from statusvault import rfc3339
from statusvault.errors import ConfigError
from statusvault.flagtable import flag_value
from statusvault.restore.options import PARALLEL, RESTORE_VALUES, FenceMode, RestoreOptions, restore_options
from statusvault.storage.base import validate_backup_name

INTENT_LABEL = "statusvault.io/restore-intent"  # value "true" on the intent ConfigMaps the controller reconciles
STATUS_LABEL = "statusvault.io/restore-status-of"  # on the status ConfigMap, naming its intent
STATUS_SUFFIX = "-status"

# The restore options an intent does not take, and why: every other option restore_options reads (RESTORE_VALUES,
# its own declaration) is an intent key, under the CLI's long name.
NOT_IN_INTENT = {
    "dry_run": "an intent restores; preview with `statusvault restore --dry-run`",
    "allow_privileged_resources": "an intent writes no privileged type: whoever may write the intent would write it "
    "with the controller's rights (docs/security.md)",
}


def option_key(value: str) -> str:
    """An option's value name as its intent key (the CLI's long option name); `_option` reads it back."""
    return "name" if value == "names" else value.replace("_", "-")


RESTORE_KEYS = frozenset(option_key(v) for v in RESTORE_VALUES if v not in NOT_IN_INTENT)
# request: free text, change it to re-run; modifiers: a ConfigMap in the controller's namespace holding the file
INTENT_KEYS = RESTORE_KEYS | {
    "backup",
    "storage",
    "parallel",
    "processes",
    "request",
    "modifiers",
    "serviceAccountName",
    "from-velero",  # "true": `backup` is a Velero backup of `storage` (a Velero backup storage location)
}
MAX_INTENT_PROCESSES = 64

RETRY_BASE = 30.0  # seconds before the first retry of a failed restore; doubles per attempt
RETRY_MAX = 3600.0


class Phase(enum.StrEnum):
    IN_PROGRESS = "InProgress"
    COMPLETE = "Complete"
    FAILED = "Failed"  # will be retried after nextAttemptAt
    INVALID = "Invalid"  # the intent cannot be acted on until it changes


@dataclasses.dataclass(frozen=True)
class Intent:
    name: str
    namespace: str
    uid: str
    backup: str
    storage: str | None
    options: RestoreOptions
    parallel: int
    digest: str  # of the intent's data: a change means a new desired state
    modifiers: str = ""  # name of the ConfigMap holding a modifiers file
    processes: int = 0  # worker processes; 0: as many as the controller's CPUs (cgroup-aware), for large waves
    stream: bool | None = None  # restore --stream / --no-stream; None: by the backup's size (runner.STREAM_ABOVE)
    service_account: str = ""  # spec.serviceAccountName: whom the controller acts as ("": its default)
    from_velero: bool = False  # `backup` is a Velero backup in `storage` (a Velero backup storage location)
    # spec.verify-key-file / spec.verify-kms-key-id: the backup must be signed by one of these (key files among the
    # controller's own --verify-key-file; KMS keys read with its credentials)
    verify_key_files: tuple[str, ...] = ()
    verify_kms_key_ids: tuple[str, ...] = ()
    strict: bool = False  # spec.strict: a field the server dropped or changed, or a warning, is a shortfall
    at: str = ""  # spec.at: `backup` is a watch, restored as it was at this moment (`latest` or RFC 3339)

    @property
    def status_name(self) -> str:
        return self.name + STATUS_SUFFIX


def digest_of(data: Mapping[str, str]) -> str:
    text = "\n".join(f"{k}={data[k]}" for k in sorted(data))
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def parse_intent(cm: Mapping[str, Any]) -> Intent:
    """The intent a ConfigMap states; ConfigError names the first thing wrong with it."""
    meta = cm.get("metadata") or {}
    data: dict[str, str] = dict(cm.get("data") or {})
    unknown = sorted(set(data) - INTENT_KEYS)
    refused = [f"{k}: {NOT_IN_INTENT[_option(k)]}" for k in unknown if _option(k) in NOT_IN_INTENT]
    if refused:
        raise ConfigError(f"not taken by an intent: {'; '.join(refused)}")
    if unknown:
        raise ConfigError(f"unknown key(s) {', '.join(unknown)}; known: {', '.join(sorted(INTENT_KEYS))}")
    backup = data.get("backup", "").strip()
    if not backup:
        raise ConfigError("data.backup is missing: name the backup to restore")
    validate_backup_name(backup)
    try:
        parallel = int(data.get("parallel", str(PARALLEL)))
    except ValueError:
        raise ConfigError(f"parallel must be a number, not {data['parallel']!r}") from None
    if not 1 <= parallel <= 128:
        raise ConfigError("parallel must be between 1 and 128")
    processes = _processes(data.get("processes", "auto").strip())
    options = restore_options({_option(k): v for k, v in data.items() if k in RESTORE_KEYS}, files=False)
    if options.fence == FenceMode.REPORT:
        raise ConfigError("fence report plans the fencing and writes nothing, and an intent restores: preview the "
                          "plan with `statusvault restore BACKUP --fence report`")  # fmt: skip
    return Intent(
        meta.get("name", ""),
        meta.get("namespace", ""),
        meta.get("uid", ""),
        backup,
        data.get("storage", "").strip() or None,
        options,
        parallel,
        digest_of(data),
        data.get("modifiers", "").strip(),
        processes,
        service_account=data.get("serviceAccountName", "").strip(),
        from_velero=bool(flag_value(data.get("from-velero"), "from-velero")),
    )


def _processes(value: str) -> int:
    if value == "auto":
        return 0
    if not value.isdigit() or not 1 <= int(value) <= MAX_INTENT_PROCESSES:
        raise ConfigError(f"processes must be auto or a number from 1 to {MAX_INTENT_PROCESSES}, not {value!r}")
    return int(value)


def _option(key: str) -> str:
    """An intent key (the CLI's long option name) as the option's value name."""
    return "names" if key == "name" else key.replace("-", "_")


@dataclasses.dataclass(frozen=True)
class NextStep:
    act: bool
    reason: str
    attempt: int = 0  # the attempt number this run is, when act


def next_step(digest: str, status: Mapping[str, str], now: dt.datetime) -> NextStep:
    """What a reconcile does for an intent whose data has `digest`, given its status ConfigMap's data."""
    if status.get("appliedDigest") == digest:
        return NextStep(False, "already restored")
    same = status.get("digest") == digest
    phase = status.get("phase", "")
    if same and phase == Phase.INVALID:
        return NextStep(False, "invalid until the intent changes")
    attempt = int(status.get("attempts") or 0) + 1 if same else 1
    if same and phase == Phase.FAILED:
        due = rfc3339.parse_or_none(status.get("nextAttemptAt"))
        if due is not None and now < due:
            return NextStep(False, f"retrying after {status['nextAttemptAt']}")
    return NextStep(True, "resuming" if same and phase == Phase.IN_PROGRESS else "new intent", attempt)


def retry_delay(attempt: int) -> float:
    """Exponential backoff between attempts of one intent: 30 s, 60 s, 120 s, ... capped at an hour."""
    return float(min(RETRY_BASE * 2 ** max(attempt - 1, 0), RETRY_MAX))


def check_storage(storage: str, allowed: tuple[str, ...]) -> None:
    """Refuse a store a Restore, Backup or intent names (`storage`) that is not one of the administrator's
    --allowed-storage locations or under one (the same location, or a path below it); no list: any store.
    ConfigError: that one resource's problem, recorded on it; nothing is read or written."""
    if not allowed or any(_within(storage, a) for a in allowed):
        return
    listed = ", ".join(allowed)
    raise ConfigError(
        f"storage {storage[:200]!r} is not one the controller may use (--allowed-storage: {listed}): ask its "
        "administrator"
    )


def _within(storage: str, allowed: str) -> bool:
    if "://" not in storage and "://" not in allowed:  # directories: compared once . and .. are resolved
        storage, allowed = posixpath.normpath(storage), posixpath.normpath(allowed)
    storage, allowed = storage.rstrip("/"), allowed.rstrip("/")
    return storage == allowed or (storage.startswith(allowed + "/") and "/../" not in f"{storage}/")
