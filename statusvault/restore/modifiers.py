"""Restore-time modifiers: rules in Velero's resource-modifier format (RFC 6902 JSON patches, JSON merge
patches), plus statusvault's status patches, applied to each matching object before it is written.

A file is validated as a whole before the first write (every error names the rule and field); applying a
rule never raises for a `test` op that fails (the rule is skipped for that object, as Velero does), and
raises ModifierError for a patch that cannot apply (that object fails)."""

from __future__ import annotations

import copy
import dataclasses
import fnmatch
import hashlib
import json
import re
from collections.abc import Callable, Mapping
from typing import Any

import jsonpatch
import jsonpointer
import yaml

from statusvault.errors import ConfigError, StatusVaultError
from statusvault.restore.configfile import versioned_entries
from statusvault.vocabulary.labels import parse_selector

OPS = ("add", "remove", "replace", "copy", "move", "test")
RULE_KEYS = {"conditions", "patches", "mergePatches", "strategicPatches", "statusPatches", "statusMergePatches"}
CONDITION_KEYS = {"groupResource", "resourceNameRegex", "names", "namespaces", "labelSelector", "matches"}
UNSUPPORTED = {
    "strategicPatches": "strategic merge patches need each built-in type's patch strategy: use patches or mergePatches"
}


class ModifierError(StatusVaultError):
    """A rule's patch could not be applied to one object."""


@dataclasses.dataclass(frozen=True)
class RulesOutcome:
    """What the rules did to one object: rules applied, rules skipped by a failed `test`."""

    applied: tuple[int, ...] = ()
    skipped: tuple[int, ...] = ()


@dataclasses.dataclass(frozen=True)
class Rule:
    index: int
    matches: Callable[[str, Mapping[str, Any], str], bool]  # (resource, object, namespace backed up from)
    patch: jsonpatch.JsonPatch  # patches then statusPatches (status paths checked at load)
    merges: tuple[Any, ...]  # mergePatches then statusMergePatches


@dataclasses.dataclass(frozen=True)
class Modifiers:
    """A validated modifiers file. Only its digest is part of its repr (and of a restore's journal key)."""

    digest: str
    rules: tuple[Rule, ...] = dataclasses.field(repr=False, compare=False)
    text: str = dataclasses.field(default="", repr=False, compare=False)  # the file, to rebuild the rules from
    source: str = dataclasses.field(default="modifiers", repr=False, compare=False)

    def __reduce__(self) -> tuple[Any, tuple[str, str]]:
        """Pickled as its file (a worker process parses it again): the rules hold closures."""
        return load_modifiers, (self.text, self.source)

    def apply(
        self, qualified: str, obj: dict[str, Any], namespace: str | None = None
    ) -> tuple[dict[str, Any], RulesOutcome]:
        """The object after every matching rule, in file order; `obj` (as backed up) is not changed. Rules
        patch it in its target `namespace` (a namespace mapping's), while `conditions.namespaces` matches the
        namespace it was backed up from, as Velero's does."""
        source = str((obj.get("metadata") or {}).get("namespace", ""))
        if namespace is not None:
            obj = {**obj, "metadata": {**(obj.get("metadata") or {}), "namespace": namespace}}
        applied: list[int] = []
        skipped: list[int] = []
        for rule in self.rules:
            if not rule.matches(qualified, obj, source):
                continue
            patched = _apply(rule, obj)
            if patched is None:
                skipped.append(rule.index)
            else:
                obj = patched
                applied.append(rule.index)
        return obj, RulesOutcome(tuple(applied), tuple(skipped))


def load_modifiers(text: str, source: str = "modifiers") -> Modifiers:
    """Parse and validate a modifiers file; a ConfigError names the rule and field of the first problem."""
    raw = versioned_entries(text, source, "resourceModifierRules", _only)
    rules = tuple(_rule(i, r, f"{source}: rule {i + 1} (resourceModifierRules[{i}])") for i, r in enumerate(raw))
    return Modifiers(hashlib.sha256(text.encode()).hexdigest()[:16], rules, text, source)


def _only(d: Mapping[str, Any], allowed: set[str], where: str) -> None:
    unknown = sorted(set(d) - allowed)
    if unknown:
        raise ConfigError(f"{where}: unknown key {unknown[0]!r} (known: {', '.join(sorted(allowed))})")


def _rule(index: int, raw: Any, where: str) -> Rule:
    if not isinstance(raw, dict):
        raise ConfigError(f"{where}: expected a mapping")
    _only(raw, RULE_KEYS, where)
    for key, why in UNSUPPORTED.items():
        if key in raw:
            raise ConfigError(f"{where}.{key}: not supported ({why})")
    if not any(raw.get(k) for k in RULE_KEYS - {"conditions"}):
        raise ConfigError(f"{where}: no patches, mergePatches, statusPatches or statusMergePatches")
    ops = _ops(raw.get("patches"), f"{where}.patches", status_only=False)
    ops += _ops(raw.get("statusPatches"), f"{where}.statusPatches", status_only=True)
    merges = _merges(raw.get("mergePatches"), f"{where}.mergePatches", status_only=False)
    merges += _merges(raw.get("statusMergePatches"), f"{where}.statusMergePatches", status_only=True)
    return Rule(index + 1, _conditions(raw.get("conditions"), f"{where}.conditions"), jsonpatch.JsonPatch(ops), merges)


def _conditions(raw: Any, where: str) -> Callable[[str, Mapping[str, Any], str], bool]:
    if not isinstance(raw, dict) or not isinstance(raw.get("groupResource"), str) or not raw["groupResource"]:
        raise ConfigError(f"{where}.groupResource: required (resource.group, wildcards allowed, '*' for all)")
    _only(raw, CONDITION_KEYS, where)
    resource = raw["groupResource"]
    regex = _regex(raw.get("resourceNameRegex"), f"{where}.resourceNameRegex")
    names = _strings(raw.get("names"), f"{where}.names")
    namespaces = _strings(raw.get("namespaces"), f"{where}.namespaces")
    labels = parse_selector(_selector(raw.get("labelSelector"), f"{where}.labelSelector"))
    tests = _matches(raw.get("matches"), f"{where}.matches")

    def matches(qualified: str, obj: Mapping[str, Any], source_namespace: str) -> bool:
        meta = obj.get("metadata") or {}
        name = str(meta.get("name", ""))
        return (
            fnmatch.fnmatchcase(qualified, resource)
            and (regex is None or regex.search(name) is not None)
            and (not names or any(fnmatch.fnmatchcase(name, n) for n in names))
            and (not namespaces or any(fnmatch.fnmatchcase(source_namespace, n) for n in namespaces))
            and labels(meta.get("labels") or {})
            and all(_holds(obj, pointer, value) for pointer, value in tests)
        )

    return matches


def _regex(raw: Any, where: str) -> re.Pattern[str] | None:
    if raw is None or raw == "":
        return None
    try:
        return re.compile(str(raw))
    except re.error as e:
        raise ConfigError(f"{where}: invalid regular expression {raw!r}: {e}") from None


def _strings(raw: Any, where: str) -> tuple[str, ...]:
    if raw is None:
        return ()
    if not isinstance(raw, list) or not all(isinstance(s, str) for s in raw):
        raise ConfigError(f"{where}: expected a list of strings")
    return tuple(raw)


def _selector(raw: Any, where: str) -> str:
    """A metav1.LabelSelector (matchLabels, matchExpressions) as a selector string."""
    if raw is None:
        return ""
    if not isinstance(raw, dict):
        raise ConfigError(f"{where}: expected matchLabels and/or matchExpressions")
    _only(raw, {"matchLabels", "matchExpressions"}, where)
    terms = [f"{k}={v}" for k, v in (raw.get("matchLabels") or {}).items()]
    for i, e in enumerate(raw.get("matchExpressions") or []):
        op, key, values = (e or {}).get("operator"), (e or {}).get("key"), (e or {}).get("values") or []
        forms = {"In": f"{key} in ({','.join(values)})", "NotIn": f"{key} notin ({','.join(values)})"}
        forms.update(Exists=f"{key}", DoesNotExist=f"!{key}")
        if not key or op not in forms:
            raise ConfigError(
                f"{where}.matchExpressions[{i}]: needs a key and an operator In, NotIn, Exists or DoesNotExist"
            )
        terms.append(forms[op])
    selector = ",".join(terms)
    try:
        parse_selector(selector)
    except ConfigError as e:
        raise ConfigError(f"{where}: {e}") from None
    return selector


def _matches(raw: Any, where: str) -> list[tuple[str, Any]]:
    if raw is None:
        return []
    if not isinstance(raw, list):
        raise ConfigError(f"{where}: expected a list of {{path, value}}")
    out = []
    for i, m in enumerate(raw):
        if not isinstance(m, dict) or "path" not in m:
            raise ConfigError(f"{where}[{i}]: expected path and value")
        _only(m, {"path", "value"}, f"{where}[{i}]")
        out.append((_pointer(m["path"], f"{where}[{i}].path"), velero_value(m.get("value"))))
    return out


def _ops(raw: Any, where: str, status_only: bool) -> list[dict[str, Any]]:
    if raw is None:
        return []
    if not isinstance(raw, list):
        raise ConfigError(f"{where}: expected a list of operations")
    ops = []
    for i, p in enumerate(raw):
        at = f"{where}[{i}]"
        if not isinstance(p, dict):
            raise ConfigError(f"{at}: expected operation, path and value")
        _only(p, {"operation", "op", "path", "value", "from"}, at)
        op = p.get("operation", p.get("op"))
        if op not in OPS:
            raise ConfigError(f"{at}.operation: unknown operation {op!r} (one of {', '.join(OPS)})")
        entry: dict[str, Any] = {"op": op, "path": _pointer(p.get("path"), f"{at}.path", status_only)}
        if op in ("copy", "move"):
            entry["from"] = _pointer(p.get("from"), f"{at}.from", status_only)
        if op in ("add", "replace", "test"):
            if "value" not in p:
                raise ConfigError(f"{at}.value: required for {op}")
            entry["value"] = velero_value(p["value"])
        ops.append(entry)
    return ops


def _merges(raw: Any, where: str, status_only: bool) -> tuple[Any, ...]:
    if raw is None:
        return ()
    if not isinstance(raw, list):
        raise ConfigError(f"{where}: expected a list of {{patchData}}")
    out = []
    for i, m in enumerate(raw):
        if not isinstance(m, dict) or "patchData" not in m:
            raise ConfigError(f"{where}[{i}].patchData: required")
        _only(m, {"patchData"}, f"{where}[{i}]")
        data = m["patchData"]
        try:
            patch = yaml.safe_load(data) if isinstance(data, str) else data
        except yaml.YAMLError as e:
            raise ConfigError(f"{where}[{i}].patchData: not valid JSON or YAML: {e}".replace("\n", " ")) from None
        if not isinstance(patch, dict):
            raise ConfigError(f"{where}[{i}].patchData: a merge patch is an object")
        if status_only and set(patch) != {"status"}:
            raise ConfigError(f"{where}[{i}].patchData: a status merge patch holds only status")
        out.append(patch)
    return tuple(out)


def _pointer(raw: Any, where: str, status_only: bool = False) -> str:
    if not isinstance(raw, str) or (raw and not raw.startswith("/")):
        raise ConfigError(f"{where}: a JSON pointer starting with '/' is required, not {raw!r}")
    try:
        jsonpointer.JsonPointer(raw)
    except jsonpointer.JsonPointerException as e:
        raise ConfigError(f"{where}: invalid JSON pointer {raw!r}: {e}") from None
    if status_only and raw != "/status" and not raw.startswith("/status/"):
        raise ConfigError(f"{where}: a status patch path starts with /status, not {raw!r}")
    return raw


def velero_value(value: Any) -> Any:
    """A patch or match value as Velero reads it: its values are strings, and a string that is a JSON
    literal (true, false, null, a number, an object or a list) is that value; "\"x\"" is the string x.
    Values that are not strings (YAML numbers, maps, lists) are taken as they are."""
    if not isinstance(value, str):
        return value
    if len(value) >= 2 and value[0] == value[-1] == '"':
        return value[1:-1]
    if value.lower() in ("true", "false"):
        return value.lower() == "true"
    try:
        parsed = json.loads(value)
    except ValueError:
        return value
    return parsed if parsed is None or isinstance(parsed, (int, float, dict, list)) else value


def _holds(obj: Mapping[str, Any], pointer: str, value: Any) -> bool:
    try:
        return bool(jsonpointer.resolve_pointer(obj, pointer) == value)
    except jsonpointer.JsonPointerException:
        return False


def _apply(rule: Rule, obj: dict[str, Any]) -> dict[str, Any] | None:
    """The object with the rule's patches applied; None when one of its `test` ops fails."""
    try:
        patched: dict[str, Any] = rule.patch.apply(obj) if rule.patch.patch else copy.deepcopy(obj)
    except jsonpatch.JsonPatchTestFailed:
        return None
    except (jsonpatch.JsonPatchException, jsonpointer.JsonPointerException) as e:
        raise ModifierError(f"modifier rule {rule.index} cannot be applied: {e}") from None
    for merge in rule.merges:
        patched = merge_patch(patched, merge)
    return patched


def merge_patch(target: Any, patch: Any) -> Any:
    """RFC 7386 JSON merge patch: objects merge, null removes, anything else replaces."""
    if not isinstance(patch, dict):
        return copy.deepcopy(patch)
    out = dict(target) if isinstance(target, dict) else {}
    for key, value in patch.items():
        if value is None:
            out.pop(key, None)
        else:
            out[key] = merge_patch(out.get(key), value)
    return out
