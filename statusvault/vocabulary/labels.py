"""Kubernetes label selectors, parsed and matched locally (for filtering objects read from an archive)."""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping

from statusvault.errors import ConfigError

Matcher = Callable[[Mapping[str, str]], bool]
_SET = re.compile(r"^\s*(!?)([\w./-]+)\s*(?:(in|notin)\s*\(([^)]*)\))?\s*$")
_EQ = re.compile(r"^\s*([\w./-]+)\s*(==|=|!=)\s*([\w./-]*)\s*$")


def _split(selector: str) -> list[str]:
    """Split on commas that are not inside parentheses."""
    parts, depth, cur = [], 0, ""
    for ch in selector:
        depth += ch == "("
        depth -= ch == ")"
        if ch == "," and depth == 0:
            parts.append(cur)
            cur = ""
        else:
            cur += ch
    parts.append(cur)
    return [p for p in parts if p.strip()]


def _requirement(expr: str) -> Matcher:
    m = _EQ.match(expr)
    if m:
        key, op, value = m.groups()
        if op == "!=":
            return lambda labels: labels.get(key) != value
        return lambda labels: labels.get(key) == value
    m = _SET.match(expr)
    if m:
        neg, key, op, values = m.groups()
        if op:
            if neg:
                raise ConfigError(f"invalid label selector term {expr.strip()!r}")
            allowed = {v.strip() for v in values.split(",") if v.strip()}
            if op == "in":
                return lambda labels: labels.get(key) in allowed
            return lambda labels: labels.get(key) not in allowed
        if neg:
            return lambda labels: key not in labels
        return lambda labels: key in labels
    raise ConfigError(f"invalid label selector term {expr.strip()!r}")


def parse_selector(selector: str) -> Matcher:
    """Parse `a=b,c!=d,e in (x,y),!f`; the empty selector matches everything."""
    reqs = [_requirement(p) for p in _split(selector or "")]
    if not reqs:
        return lambda labels: True
    return lambda labels: all(r(labels) for r in reqs)
