"""RFC 3339 times: written in one form, read in every form servers and users send; nowhere else by hand."""

from __future__ import annotations

import datetime as dt
from pathlib import Path

import pytest

from statusvault import rfc3339

T = dt.datetime(2026, 11, 22, 10, 15, 0, 123456, tzinfo=dt.UTC)


@pytest.mark.parametrize(
    "text, expected",
    [
        ("2026-11-22T10:15:00Z", T.replace(microsecond=0)),
        ("2026-11-22T10:15:00z", T.replace(microsecond=0)),
        ("2026-11-22T10:15:00.123456Z", T),
        ("2026-11-22T11:15:00.123456+01:00", T),
        (" 2026-11-22T10:15:00Z ", T.replace(microsecond=0)),
        ("2026-11-22T10:15:00", T.replace(microsecond=0)),  # naive: UTC
    ],
)
def test_parse_reads_every_form(text, expected):
    assert rfc3339.parse(text) == expected
    assert rfc3339.parse(text).tzinfo == dt.UTC


def test_a_time_without_a_zone_can_be_refused():
    with pytest.raises(ValueError, match="no time zone"):
        rfc3339.parse("2026-11-22T10:15:00", naive_as_utc=False)


@pytest.mark.parametrize("text", ["", None, "yesterday", "2026-13-01T00:00:00Z"])
def test_parse_or_none(text):
    assert rfc3339.parse_or_none(text) is None


def test_formats_are_utc_with_z_and_round_trip():
    local = T.astimezone(dt.timezone(dt.timedelta(hours=-5)))
    assert rfc3339.format_seconds(local) == "2026-11-22T10:15:00Z"
    assert rfc3339.format_micro(local) == "2026-11-22T10:15:00.123456Z"
    assert rfc3339.parse(rfc3339.format_micro(T)) == T


def test_no_other_module_formats_or_parses_rfc3339_by_hand():
    package = Path(rfc3339.__file__).parent
    offenders = [
        str(p.relative_to(package))
        for p in package.rglob("*.py")
        if p.name != "rfc3339.py"
        and "testing" not in p.parts
        and ("%Y-%m-%dT" in (t := p.read_text()) or "fromisoformat" in t)
    ]
    assert offenders == []
