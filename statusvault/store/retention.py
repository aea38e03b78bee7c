"""Retention: which backups a policy deletes. Pure decisions over (name, created, complete) records."""

from __future__ import annotations

import dataclasses
import datetime as dt
import re

from statusvault.errors import ConfigError
from statusvault.storage.base import ObjectLock

_DURATION = re.compile(r"(\d+)([wdhms])")
_UNITS = {"w": 604800, "d": 86400, "h": 3600, "m": 60, "s": 1}


def asked_lock(mode: str | None, lock_for: str | None, legal_hold: bool, now: dt.datetime) -> ObjectLock | None:
    """The S3 Object Lock a backup starting `now` is written with (--lock-mode, --lock-for, --legal-hold, or a
    Backup's lock-mode, lock-for, legal-hold), or None; ConfigError for a retention that ends before it starts."""
    until = (now + parse_duration(lock_for)).replace(microsecond=0) if mode and lock_for else None
    if until is not None and until <= now:
        raise ConfigError("lock-for must be longer than zero")
    if until is None and not legal_hold:
        return None
    return ObjectLock(mode.upper() if mode and until is not None else "", until, legal_hold)


def parse_duration(text: str) -> dt.timedelta:
    """`720h`, `30d`, `2w`, `1h30m` -> timedelta."""
    text = text.strip().lower()
    parts = _DURATION.findall(text)
    if not text or "".join(n + u for n, u in parts) != text:
        raise ConfigError(f"invalid duration {text!r}: use e.g. 720h, 30d, 2w or 1h30m")
    return dt.timedelta(seconds=sum(int(n) * _UNITS[u] for n, u in parts))


@dataclasses.dataclass(frozen=True)
class RetentionPolicy:
    keep_last: int | None = None
    ttl: dt.timedelta | None = None
    keep_daily: int | None = None
    keep_weekly: int | None = None
    incomplete_grace: dt.timedelta = dt.timedelta(hours=6)

    def __post_init__(self) -> None:
        if self.keep_last is None and self.ttl is None and self.keep_daily is None and self.keep_weekly is None:
            raise ConfigError("a retention policy needs --keep-last, --ttl, --keep-daily or --keep-weekly")

    def to_dict(self) -> dict[str, object]:
        return {
            "keepLast": self.keep_last,
            "ttl": str(self.ttl) if self.ttl else None,
            "keepDaily": self.keep_daily,
            "keepWeekly": self.keep_weekly,
            "incompleteGrace": str(self.incomplete_grace),
        }


@dataclasses.dataclass(frozen=True)
class Candidate:
    name: str
    created: dt.datetime
    complete: bool
    writing: bool = False  # not complete, and a live run holds its writer lease


@dataclasses.dataclass(frozen=True)
class Decision:
    name: str
    delete: bool
    reason: str
    held: bool = False  # kept because S3 Object Lock holds it (see statusvault/store/catalog.py: held_back)
    held_until: dt.datetime | None = None  # when its retention ends (None with a legal hold alone)


def _newest_per_bucket(complete: list[Candidate], count: int, bucket: str) -> set[str]:
    """Names of the newest backup in each of the last `count` days/weeks that have one."""
    kept: dict[str, str] = {}
    for c in complete:  # newest first
        key = c.created.strftime("%Y-%m-%d") if bucket == "day" else "{}-W{:02d}".format(*c.created.isocalendar()[:2])
        if key not in kept:
            if len(kept) == count:
                break
            kept[key] = c.name
    return set(kept.values())


def decide(backups: list[Candidate], policy: RetentionPolicy, now: dt.datetime) -> list[Decision]:
    """Keep what any keep-* rule or the TTL protects; never delete the newest complete backup.

    Unprotected complete backups are deleted (with --ttl: only those older than it). Incomplete backups are
    deleted once older than the grace period (a younger one may still be running), never while being written.
    """
    # newest first; of two made in the same second, the later name (a schedule's names end in their time)
    complete = sorted((b for b in backups if b.complete), key=lambda b: (b.created, b.name), reverse=True)
    keep: dict[str, str] = {}
    if complete:
        keep[complete[0].name] = "newest complete backup"
    if policy.keep_last:
        for c in complete[: policy.keep_last]:
            keep.setdefault(c.name, f"within the last {policy.keep_last}")
    if policy.keep_daily:
        for name in _newest_per_bucket(complete, policy.keep_daily, "day"):
            keep.setdefault(name, "daily")
    if policy.keep_weekly:
        for name in _newest_per_bucket(complete, policy.keep_weekly, "week"):
            keep.setdefault(name, "weekly")
    out = []
    for b in sorted(backups, key=lambda b: (b.created, b.name)):
        age = now - b.created
        if b.writing:
            out.append(Decision(b.name, False, "being written"))
        elif not b.complete:
            old = age > policy.incomplete_grace
            out.append(Decision(b.name, old, "incomplete, past the grace period" if old else "incomplete, recent"))
        elif b.name in keep:
            out.append(Decision(b.name, False, keep[b.name]))
        elif policy.ttl is not None and age <= policy.ttl:
            out.append(Decision(b.name, False, "younger than the TTL"))
        else:
            out.append(Decision(b.name, True, "older than the TTL" if policy.ttl is not None else "not kept by policy"))
    return out
