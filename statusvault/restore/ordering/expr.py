"""A small, exact JSONPath condition language for readiness gates (parsed once, never eval'd).

    expression := term ( "&&" term )*
    term       := path [ ("==" | "!=") literal ]     a bare path: present and not false, null or ""
    path       := step+
    step       := "." NAME  |  "[" INTEGER "]"  |  "[?(@." NAME "==" literal ")]"   (the first element matching)
    literal    := a JSON string ("..."), number, true, false or null

For example `.status.phase == "Ready"` or `.status.conditions[?(@.type=="Ready")].status == "True"`.
"""

from __future__ import annotations

import dataclasses
import functools
import json
import re
from collections.abc import Callable
from typing import Any

from statusvault.errors import ConfigError

_ABSENT = object()
_LITERAL = r'"(?:[^"\\]|\\.)*"|-?\d+(?:\.\d+)?|true|false|null'
_NAME = r"[A-Za-z_][A-Za-z0-9_-]*"
_STEP = re.compile(rf"\.({_NAME})|\[(\d+)\]|\[\?\(@\.({_NAME})\s*==\s*({_LITERAL})\)\]")
_COMPARE = re.compile(rf"\s*(==|!=)\s*({_LITERAL})")

Step = Callable[[Any], Any]


@dataclasses.dataclass(frozen=True)
class Expression:
    """A parsed expression: `holds(obj)` says whether the object satisfies it."""

    text: str
    terms: tuple[tuple[tuple[Step, ...], str, Any], ...] = dataclasses.field(repr=False, compare=False)

    def holds(self, obj: Any) -> bool:
        return all(_term(steps, op, want, obj) for steps, op, want in self.terms)


def parse_expression(text: str) -> Expression:
    """Parse; a ConfigError names the part that is not in the grammar."""
    terms = []
    pos = 0
    while True:
        steps, pos = _path(text, _skip(text, pos))
        m = _COMPARE.match(text, pos)
        op, want = "", None
        if m:
            op, want, pos = m.group(1), json.loads(m.group(2)), m.end()
        terms.append((steps, op, want))
        pos = _skip(text, pos)
        if pos == len(text):
            return Expression(text, tuple(terms))
        if not text.startswith("&&", pos):
            raise ConfigError(f"JSONPath expression {text!r}: cannot read {text[pos:]!r} (expected == LITERAL or &&)")
        pos += 2


def _skip(text: str, pos: int) -> int:
    while pos < len(text) and text[pos].isspace():
        pos += 1
    return pos


def _path(text: str, pos: int) -> tuple[tuple[Step, ...], int]:
    steps: list[Step] = []
    while m := _STEP.match(text, pos):
        name, index, field, literal = m.groups()
        if name is not None:
            steps.append(functools.partial(_field, name=name))
        elif index is not None:
            steps.append(functools.partial(_index, index=int(index)))
        else:
            steps.append(functools.partial(_first, field=field, want=json.loads(literal)))
        pos = m.end()
    if not steps:
        raise ConfigError(f"JSONPath expression {text!r}: expected a path such as .status.phase at {text[pos:]!r}")
    return tuple(steps), pos


def _field(value: Any, name: str) -> Any:
    return value.get(name, _ABSENT) if isinstance(value, dict) else _ABSENT


def _index(value: Any, index: int) -> Any:
    return value[index] if isinstance(value, list) and index < len(value) else _ABSENT


def _first(value: Any, field: str, want: Any) -> Any:
    if not isinstance(value, list):
        return _ABSENT
    return next((e for e in value if isinstance(e, dict) and e.get(field, _ABSENT) == want), _ABSENT)


def _term(steps: tuple[Step, ...], op: str, want: Any, obj: Any) -> bool:
    value = obj
    for step in steps:
        value = step(value)
        if value is _ABSENT:
            break
    if op == "==":
        return value is not _ABSENT and _same(value, want)
    if op == "!=":
        return value is _ABSENT or not _same(value, want)
    return value is not _ABSENT and value not in (None, False, "")


def _same(value: Any, want: Any) -> bool:
    """Equal and of the same JSON type (true is not 1, "1" is not 1)."""
    return value == want and isinstance(value, bool) == isinstance(want, bool)
