"""--order: dependency groups restored one after another, with a readiness gate between them.

An order comes from a file or a profile (a file shipped in statusvault/restore/ordering/profiles/). Only the groups'
membership (resources and selectors) is part of its repr, and so of a restore's journal key: a re-run with
another gate timeout or condition resumes where the earlier run stopped."""

from __future__ import annotations

import dataclasses
import fnmatch
import hashlib
import re
from collections.abc import Callable, Mapping
from importlib import resources
from pathlib import Path
from typing import Any

from statusvault.errors import ConfigError
from statusvault.restore.configfile import read_config, versioned_entries
from statusvault.restore.core.pausemarkers import Marker, MarkerKind
from statusvault.restore.ordering.expr import Expression, parse_expression
from statusvault.vocabulary.labels import Matcher, parse_selector

# Crossplane's two-phase restore of managed resources: created observing (the provider reads the external resource
# instead of creating one), given their status, then their saved managementPolicies put back (as a pause is undone).
OBSERVE = Marker(MarkerKind.FIELD, "/spec/managementPolicies", ["Observe"])
DEFAULT_CONDITION = "Ready"
DEFAULT_TIMEOUT = 300.0
ON_TIMEOUT = ("fail", "continue")
ALIASES = {"capi": "cluster-api", "cloudnative-pg": "cnpg"}
_DURATION = re.compile(r"(\d+(?:\.\d+)?)(ms|s|m|h)?")
_UNITS = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0, None: 1.0}


@dataclasses.dataclass(frozen=True)
class Gate:
    """Wait until every restored object of the group satisfies `condition` (a condition type that must be True,
    or "Current", kstatus's rule) or `expression`."""

    condition: str = DEFAULT_CONDITION
    expression: Expression | None = None
    timeout: float = DEFAULT_TIMEOUT
    on_timeout: str = "fail"

    def describe(self) -> str:
        what = f"JSONPath {self.expression.text}" if self.expression else f"condition {self.condition}"
        return f"{what}, timeout {self.timeout:g}s, on timeout {self.on_timeout}"


@dataclasses.dataclass(frozen=True)
class Group:
    name: str
    resources: tuple[str, ...]  # resource.group patterns (fnmatch wildcards)
    selector: str = ""
    gate: Gate | None = dataclasses.field(default=None, compare=False)
    observe_first: bool = dataclasses.field(default=False, compare=False)  # Crossplane two-phase (managementPolicies)
    matcher: Matcher = dataclasses.field(default=lambda labels: True, repr=False, compare=False)

    def holds(self, qualified: str, labels: Mapping[str, str]) -> bool:
        return any(fnmatch.fnmatchcase(qualified, p) for p in self.resources) and self.matcher(labels)


@dataclasses.dataclass(frozen=True)
class Order:
    """Validated groups, in order. Group numbers start at 1; 0 is every object no group names."""

    digest: str
    source: str = dataclasses.field(repr=False, compare=False)
    groups: tuple[Group, ...] = dataclasses.field(repr=False, compare=False)
    text: str = dataclasses.field(default="", repr=False, compare=False)
    profile: bool = dataclasses.field(default=False, compare=False)  # shipped: names resources a backup may lack

    def __reduce__(self) -> tuple[Any, tuple[Any, ...]]:
        """Pickled as its file (a worker process parses it again): the selectors are closures."""
        return _rebuilt, (self.text, self.source, self.profile, [g.resources for g in self.groups])

    def resolved(self, names: Callable[[str, tuple[str, ...]], tuple[str, ...]]) -> Order:
        """An order file's resource names as qualified names (names: an option's name reader, raising on one that
        matches nothing); a profile's patterns stay as they are."""
        if self.profile:
            return self
        groups = tuple(
            dataclasses.replace(g, resources=names(f"--order {self.source}: group {g.name}:", g.resources))
            for g in self.groups
        )
        return dataclasses.replace(self, groups=groups)

    def group_of(self, qualified: str, labels: Mapping[str, str]) -> int:
        return next((i for i, g in enumerate(self.groups, 1) if g.holds(qualified, labels)), 0)

    def observes(self, qualified: str, labels: Mapping[str, str]) -> bool:
        """Whether objects of this type and labels are created in Observe mode first (observeFirst)."""
        group = self.group(self.group_of(qualified, labels))
        return group is not None and group.observe_first

    def group(self, number: int) -> Group | None:
        return self.groups[number - 1] if 0 < number <= len(self.groups) else None


def profile_names() -> list[str]:
    return sorted(p.name.removesuffix(".yaml") for p in resources.files(__package__).joinpath("profiles").iterdir()
                  if p.name.endswith(".yaml"))  # fmt: skip


def read_order(value: str, files: bool = True) -> Order:
    """A profile's name, or (`files`: the CLI's own user) the path of an order file; a one-line ConfigError for
    anything else. A Restore or intent names a profile only: what its author names is read by the controller, whose
    files are not theirs to read, and an order file's errors quote it."""
    name = ALIASES.get(value, value)
    if name in profile_names():
        text = resources.files(__package__).joinpath("profiles", f"{name}.yaml").read_text()
        return dataclasses.replace(load_order(text, f"profile {name}"), profile=True)
    if not files:
        raise ConfigError(f"unknown order profile {value[:100]!r}: one of {', '.join(profile_names())} (a Restore "
                          "names a profile, never a file)")  # fmt: skip
    path = Path(value)
    if "/" not in value and not value.endswith((".yaml", ".yml")) and not path.exists():
        raise ConfigError(f"unknown --order profile {value!r}: one of {', '.join(profile_names())}, or a file")
    return load_order(read_config(value, "order file"), value)


def load_order(text: str, source: str = "order") -> Order:
    """Parse and validate an order file; a ConfigError names the group and field of the first problem."""
    raw = versioned_entries(text, source, "groups", _only)
    groups = tuple(_group(g, f"{source}: group {i + 1} (groups[{i}])") for i, g in enumerate(raw))
    names = [g.name for g in groups]
    if len(set(names)) != len(names):
        raise ConfigError(f"{source}: group names must be unique")
    membership = repr([(g.resources, g.selector) for g in groups])
    return Order(hashlib.sha256(membership.encode()).hexdigest()[:16], source, groups, text)


def _rebuilt(text: str, source: str, profile: bool, resolved: list[tuple[str, ...]]) -> Order:
    order = load_order(text, source)
    groups = tuple(dataclasses.replace(g, resources=r) for g, r in zip(order.groups, resolved, strict=True))
    return dataclasses.replace(order, groups=groups, profile=profile)


def _group(raw: Any, where: str) -> Group:
    if not isinstance(raw, dict):
        raise ConfigError(f"{where}: expected a mapping")
    _only(raw, {"name", "resources", "selector", "gate", "observeFirst"}, where)
    name = raw.get("name")
    if not isinstance(name, str) or not name:
        raise ConfigError(f"{where}: name must be a non-empty string")
    res = raw.get("resources")
    if not isinstance(res, list) or not res or not all(isinstance(r, str) and r for r in res):
        raise ConfigError(f"{where}: resources must be a non-empty list of resource.group names")
    selector = raw.get("selector") or ""
    if not isinstance(selector, str):
        raise ConfigError(f"{where}: selector must be a label selector string")
    try:
        matcher = parse_selector(selector)
    except ConfigError as e:
        raise ConfigError(f"{where}: {e}") from None
    gate = _gate(raw["gate"], f"{where}: gate") if "gate" in raw else None
    observe = raw.get("observeFirst", False)
    if not isinstance(observe, bool):
        raise ConfigError(f"{where}: observeFirst must be true or false")
    return Group(name, tuple(res), selector, gate, observe, matcher)


def _gate(raw: Any, where: str) -> Gate:
    if raw is None:
        return Gate()
    if not isinstance(raw, dict):
        raise ConfigError(f"{where}: expected a mapping (condition or expression, timeout, onTimeout)")
    _only(raw, {"condition", "expression", "timeout", "onTimeout"}, where)
    if "condition" in raw and "expression" in raw:
        raise ConfigError(f"{where}: give a condition or an expression, not both")
    condition = raw.get("condition", DEFAULT_CONDITION)
    if not isinstance(condition, str) or not re.fullmatch(r"[A-Za-z][A-Za-z0-9_.-]*", condition):
        raise ConfigError(f"{where}: condition must be a condition type (or Current), not {condition!r}")
    expression = None
    if "expression" in raw:
        if not isinstance(raw["expression"], str):
            raise ConfigError(f"{where}: expression must be a string")
        try:
            expression = parse_expression(raw["expression"])
        except ConfigError as e:
            raise ConfigError(f"{where}: {e}") from None
    on_timeout = raw.get("onTimeout", "fail")
    if on_timeout not in ON_TIMEOUT:
        raise ConfigError(f"{where}: onTimeout must be fail or continue, not {on_timeout!r}")
    return Gate(condition, expression, _duration(raw.get("timeout", DEFAULT_TIMEOUT), where), on_timeout)


def _duration(raw: Any, where: str) -> float:
    if isinstance(raw, (int, float)) and not isinstance(raw, bool) and raw > 0:
        return float(raw)
    m = _DURATION.fullmatch(str(raw)) if isinstance(raw, str) else None
    if not m or float(m.group(1)) <= 0:
        raise ConfigError(f"{where}: timeout must be a positive duration such as 90s or 5m, not {raw!r}")
    return float(m.group(1)) * _UNITS[m.group(2)]


def _only(d: Mapping[str, Any], allowed: set[str], where: str) -> None:
    unknown = sorted(set(d) - allowed)
    if unknown:
        raise ConfigError(f"{where}: unknown field {unknown[0]!r} (allowed: {', '.join(sorted(allowed))})")
