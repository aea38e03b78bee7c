from __future__ import annotations

import datetime as dt

import pytest

from statusvault.errors import ConfigError
from statusvault.store.retention import Candidate, RetentionPolicy, decide, parse_duration

NOW = dt.datetime(2026, 3, 15, 12, 0, tzinfo=dt.UTC)


def daily(n, *, incomplete=(), hour=2):
    """One backup a day at 02:00 for n days back (b0 is today's)."""
    return [Candidate(f"b{i}", (NOW - dt.timedelta(days=i)).replace(hour=hour), i not in incomplete) for i in range(n)]


def deleted(backups, **policy):
    return sorted(
        (d.name for d in decide(backups, RetentionPolicy(**policy), NOW) if d.delete), key=lambda n: int(n[1:])
    )


@pytest.mark.parametrize(
    ("text", "seconds"), [("720h", 720 * 3600), ("30d", 30 * 86400), ("2w", 14 * 86400), ("1h30m", 5400), ("45s", 45)]
)
def test_parse_duration(text, seconds):
    assert parse_duration(text).total_seconds() == seconds


@pytest.mark.parametrize("bad", ["", "10", "h", "1x", "1h 30m", "-1h"])
def test_parse_duration_rejects(bad):
    with pytest.raises(ConfigError):
        parse_duration(bad)


def test_a_policy_is_required():
    with pytest.raises(ConfigError):
        RetentionPolicy()


def test_keep_last():
    assert deleted(daily(10), keep_last=3) == [f"b{i}" for i in range(3, 10)]


def test_ttl_only():
    # b3 is 3 days 10 hours old, b4 4 days 10 hours
    assert deleted(daily(10), ttl=dt.timedelta(days=4)) == ["b4", "b5", "b6", "b7", "b8", "b9"]


def test_keep_last_and_ttl_keep_the_union():
    assert deleted(daily(10), keep_last=2, ttl=dt.timedelta(days=4)) == ["b4", "b5", "b6", "b7", "b8", "b9"]
    assert deleted(daily(10), keep_last=7, ttl=dt.timedelta(days=4)) == ["b7", "b8", "b9"]


def test_never_deletes_the_newest_complete_backup():
    old = [Candidate("b0", NOW - dt.timedelta(days=90), True), Candidate("b1", NOW - dt.timedelta(days=91), True)]
    assert deleted(old, ttl=dt.timedelta(days=30)) == ["b1"]
    assert deleted(daily(5, incomplete=(0, 1)), keep_last=1) == ["b0", "b1", "b3", "b4"]


def test_incomplete_backups_have_a_grace_period():
    recent = [Candidate("b0", NOW - dt.timedelta(minutes=5), False), Candidate("b1", NOW - dt.timedelta(days=1), True)]
    assert deleted(recent, keep_last=5) == []
    stale = [Candidate("b0", NOW - dt.timedelta(hours=7), False), Candidate("b1", NOW - dt.timedelta(days=1), True)]
    assert deleted(stale, keep_last=5) == ["b0"]


def test_keep_daily_keeps_the_newest_of_each_day():
    backups = [Candidate(f"b{i}", NOW - dt.timedelta(hours=6 * i), True) for i in range(12)]  # 4 a day, 3 days
    kept = {d.name for d in decide(backups, RetentionPolicy(keep_daily=2), NOW) if not d.delete}
    # 12:00 (b0) is today's newest; yesterday's newest is 18:00 (b3)
    assert kept == {"b0", "b3"}


def test_keep_weekly():
    backups = daily(30)
    kept = {d.name for d in decide(backups, RetentionPolicy(keep_weekly=3), NOW) if not d.delete}
    # 2026-03-15 is a Sunday: b0 is week 11's newest, b7 week 10's, b14 week 9's
    assert kept == {"b0", "b7", "b14"}


def test_reasons_are_reported():
    decisions = {d.name: d.reason for d in decide(daily(4), RetentionPolicy(keep_last=2), NOW)}
    assert decisions == {
        "b0": "newest complete backup",
        "b1": "within the last 2",
        "b2": "not kept by policy",
        "b3": "not kept by policy",
    }
