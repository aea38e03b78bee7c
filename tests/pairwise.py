"""A small pairwise (all-pairs) generator: rows that together hold every allowed pair of values of any two
parameters. Greedy and deterministic (the same rows every run, so a failing row keeps its id), in the manner
of AETG: each row starts from a pair not yet covered and takes, parameter by parameter, the allowed value that
covers the most pairs still uncovered (ties: the value listed first, so list the cheap default first)."""

from __future__ import annotations

import itertools
import random
from collections.abc import Callable, Mapping, Sequence
from typing import Any

Row = dict[str, Any]
Pair = tuple[tuple[str, int], tuple[str, int]]


def pairwise(
    params: Mapping[str, Sequence[Any]], allowed: Callable[[Row], bool] = lambda row: True, focus: str = ""
) -> list[Row]:
    """Rows over `params` (name -> values). `allowed(partial_row)` says whether values may go together; it must
    refuse a partial row only when no completion of it is allowed (a pair it refuses is never asked for). With a
    `focus`, only the pairs of that parameter's values with the others' are asked for."""
    names = list(params)
    uncovered = {
        ((a, i), (b, j))
        for a, b in itertools.combinations(names, 2)
        if not focus or focus in (a, b)
        for i, j in itertools.product(range(len(params[a])), range(len(params[b])))
        if allowed({a: params[a][i], b: params[b][j]})
    }
    rows: list[Row] = []
    while uncovered:
        (a, i), (b, j) = min(uncovered, key=lambda p: (names.index(p[0][0]), p[0][1], names.index(p[1][0]), p[1][1]))
        chosen = {a: i, b: j}
        for name in names:
            if name not in chosen:
                chosen[name] = _best(name, chosen, params, uncovered, allowed)
        row = {n: params[n][chosen[n]] for n in names}
        if not allowed(row):
            raise ValueError(f"no allowed row completes {a}={params[a][i]!r}, {b}={params[b][j]!r}")
        uncovered -= _pairs(chosen, names)
        rows.append(row)
    return rows


def _best(
    name: str,
    chosen: dict[str, int],
    params: Mapping[str, Sequence[Any]],
    uncovered: set[Pair],
    allowed: Callable[[Row], bool],
) -> int:
    """The allowed value of `name` that covers the most uncovered pairs with the values chosen so far."""
    names = list(params)
    best, gain = -1, -1
    for i, value in enumerate(params[name]):
        partial = {n: params[n][v] for n, v in chosen.items()} | {name: value}
        if not allowed(partial):
            continue
        new = sum(_key(name, i, other, v, names) in uncovered for other, v in chosen.items())
        if new > gain:
            best, gain = i, new
    if best < 0:
        raise ValueError(f"no value of {name} is allowed with {chosen}")
    return best


def _key(a: str, i: int, b: str, j: int, names: list[str]) -> Pair:
    return ((a, i), (b, j)) if names.index(a) < names.index(b) else ((b, j), (a, i))


def _pairs(chosen: dict[str, int], names: list[str]) -> set[Pair]:
    return {_key(a, chosen[a], b, chosen[b], names) for a, b in itertools.combinations(names, 2)}


def sampled(params: Mapping[str, Sequence[Any]], allowed: Callable[[Row], bool], count: int, seed: int) -> list[Row]:
    """`count` allowed rows drawn at random (reproducibly from `seed`): to look past pairs, on demand."""
    rng = random.Random(seed)
    rows: list[Row] = []
    while len(rows) < count:
        row = {n: rng.choice(list(values)) for n, values in params.items()}
        if allowed(row):
            rows.append(row)
    return rows


def covered(rows: list[Row], params: Mapping[str, Sequence[Any]]) -> set[tuple[str, int, str, int]]:
    """Every pair of values (by index) that some row holds: for tests of the generator."""
    out = set()
    for row in rows:
        idx = {n: list(params[n]).index(row[n]) for n in params}
        for a, b in itertools.combinations(list(params), 2):
            out.add((a, idx[a], b, idx[b]))
    return out
