"""The pairwise generator the composition suite runs on (tests/pairwise.py)."""

from __future__ import annotations

import itertools

import pytest

from tests.pairwise import covered, pairwise

PARAMS = {"a": [0, 1, 2], "b": ["x", "y"], "c": [None, "p", "q", "r"], "d": [False, True], "e": [1, 2, 3]}


def every_pair(params, allowed=lambda row: True):
    return {
        (a, i, b, j)
        for a, b in itertools.combinations(list(params), 2)
        for i, j in itertools.product(range(len(params[a])), range(len(params[b])))
        if allowed({a: params[a][i], b: params[b][j]})
    }


def test_every_pair_is_covered_by_far_fewer_rows_than_the_product():
    rows = pairwise(PARAMS)
    assert covered(rows, PARAMS) == every_pair(PARAMS)
    assert 12 <= len(rows) <= 16, "the largest two parameters (4 x 3 values) need 12 rows at least"


def test_the_rows_are_the_same_every_run():
    assert pairwise(PARAMS) == pairwise(PARAMS)


def test_a_refused_pair_never_appears_and_every_other_pair_does():
    def allowed(row):
        return not (row.get("d") and row.get("c") == "q") and not (row.get("a") == 2 and row.get("b") == "y")

    rows = pairwise(PARAMS, allowed)
    assert all(allowed(r) for r in rows)
    assert covered(rows, PARAMS) == every_pair(PARAMS, allowed)


def test_a_need_is_met_by_the_completion():
    """ "c needs d": a partial row without d yet is allowed; d=False then never goes with a c other than None."""

    def allowed(row):
        return "d" not in row or "c" not in row or row["d"] or row["c"] is None

    rows = pairwise(PARAMS, allowed)
    assert all(r["d"] or r["c"] is None for r in rows)
    assert covered(rows, PARAMS) == every_pair(PARAMS, allowed)


def test_an_allowed_pair_that_no_row_can_hold_is_an_error():
    """a=1 goes with any b but with no c: `allowed` broke its promise, and the generator says so."""
    with pytest.raises(ValueError, match="no value of c is allowed"):
        pairwise({"a": [0, 1], "b": [0, 1], "c": [0, 1]}, lambda row: not (row.get("a") == 1 and "c" in row))


def test_a_focus_asks_only_for_the_pairs_of_that_parameter():
    rows = pairwise(PARAMS, focus="c")
    pairs = covered(rows, PARAMS)
    assert {p for p in every_pair(PARAMS) if "c" in (p[0], p[2])} <= pairs
    assert len(rows) == 4 * 3, "c's 4 values, each with the 3 values of a and of e"
