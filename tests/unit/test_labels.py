from __future__ import annotations

import pytest

from statusvault.errors import ConfigError
from statusvault.vocabulary.labels import parse_selector

LABELS = {"env": "prod", "team": "a", "tier": "db"}


@pytest.mark.parametrize(
    ("selector", "matches"),
    [
        ("", True),
        ("env=prod", True),
        ("env==prod", True),
        ("env=dev", False),
        ("env!=dev", True),
        ("env!=prod", False),
        ("team in (a,b)", True),
        ("team in (b, c)", False),
        ("team notin (b)", True),
        ("team notin (a)", False),
        ("tier", True),
        ("missing", False),
        ("!missing", True),
        ("!tier", False),
        ("env=prod,team in (a),!missing", True),
        ("env=prod,team=b", False),
        ("gone!=x", True),
    ],
)
def test_selector(selector, matches):
    assert parse_selector(selector)(LABELS) is matches


@pytest.mark.parametrize("bad", ["env=(", "a b c", "!x in (a)"])
def test_invalid_selector(bad):
    with pytest.raises(ConfigError):
        parse_selector(bad)
