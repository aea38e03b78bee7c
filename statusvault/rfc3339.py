"""RFC 3339 times, the one place they are written and read: Kubernetes' `Time` (seconds) and `MicroTime`
(microseconds), always UTC with a `Z` when written; any offset, `Z`/`z` and fractional seconds when read."""

from __future__ import annotations

import datetime as dt

SECONDS = "%Y-%m-%dT%H:%M:%SZ"
MICROSECONDS = "%Y-%m-%dT%H:%M:%S.%fZ"


def format_seconds(t: dt.datetime) -> str:
    """Kubernetes `Time`: 2026-11-22T10:15:00Z."""
    return t.astimezone(dt.UTC).strftime(SECONDS)


def format_micro(t: dt.datetime) -> str:
    """Kubernetes `MicroTime`: 2026-11-22T10:15:00.000000Z."""
    return t.astimezone(dt.UTC).strftime(MICROSECONDS)


def parse(text: str, naive_as_utc: bool = True) -> dt.datetime:
    """An RFC 3339 time, in UTC. ValueError when it is not one, or (naive_as_utc=False) when it has no zone."""
    t = dt.datetime.fromisoformat(str(text).strip().replace("Z", "+00:00").replace("z", "+00:00"))
    if t.tzinfo is None:
        if not naive_as_utc:
            raise ValueError(f"{text!r} has no time zone")
        t = t.replace(tzinfo=dt.UTC)
    return t.astimezone(dt.UTC)


def parse_or_none(text: str | None) -> dt.datetime | None:
    """parse(), or None for an empty or unreadable value (a field some other writer may have left odd)."""
    if not text:
        return None
    try:
        return parse(text)
    except ValueError:
        return None
