"""The managedFields helpers: every restore writes under a field manager of its own (named in its journal), so an
object's managedFields say whether this restore, another statusvault restore or another writer (its operator) wrote
it, and its status, last."""

from __future__ import annotations

import secrets
from collections.abc import Mapping
from typing import Any

from statusvault import rfc3339
from statusvault.model import writes_status

MANAGER_PREFIX = "statusvault-restore-"  # every restore's field manager, in every release since 0.1


def new_manager() -> str:
    """A field manager name unique to one restore (kept in its journal, so its resumed runs share it)."""
    return f"{MANAGER_PREFIX}{secrets.token_hex(8)}"


def written_by(meta: dict[str, Any], manager: str) -> bool:
    """Whether `manager` has written the object: it is named in managedFields, whatever else changed."""
    return any(isinstance(e, dict) and e.get("manager") == manager for e in meta.get("managedFields") or [])


def abandoned(meta: dict[str, Any]) -> bool:
    """Whether a statusvault restore (any run, any release: each has a field manager of its own under one prefix)
    created the object and no writer has written a status since: a run killed between its two passes whose state
    this run cannot resume (another release's, or lost). Finishing it is this restore's job, whatever the policy:
    left alone it would lack its saved status while the report counted it as kept."""
    entries = [e for e in meta.get("managedFields") or [] if isinstance(e, dict)]
    if not entries or not all(str(e.get("manager", "")).startswith(MANAGER_PREFIX) for e in entries):
        return False
    return not status_written(meta)


def status_written(meta: dict[str, Any]) -> bool:
    """Whether any writer has written the object's status, as its managedFields say (an entry of its own from
    Kubernetes 1.22; the status fields in the writer's entry on 1.20)."""
    return any(writes_status(e) for e in meta.get("managedFields") or [])


def status_writers_since(meta: Mapping[str, Any], manager: str) -> list[str]:
    """The other field managers that wrote status fields at or after `manager`'s last status write (every one
    that owns status fields, when `manager` owns none any more: they took all of them over)."""
    entries = [e for e in meta.get("managedFields") or [] if writes_status(e)]
    mine = [_time(e) for e in entries if e.get("manager") == manager]
    since = max(mine) if mine else None
    return sorted(
        {
            str(e.get("manager") or "(no manager)")
            for e in entries
            if e.get("manager") != manager and (since is None or _time(e) >= since)
        }
    )


def _time(entry: Mapping[str, Any]) -> float:
    parsed = rfc3339.parse_or_none(str(entry.get("time") or ""))
    return parsed.timestamp() if parsed is not None else 0.0
