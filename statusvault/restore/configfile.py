"""The header both restore config files share (--modifiers, --order): YAML, a mapping, `version: v1`, and one
non-empty list of entries."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import yaml

from statusvault.errors import ConfigError

Only = Callable[[Mapping[str, Any], set[str], str], None]  # refuses keys outside the allowed set, in its own words


def versioned_entries(text: str, source: str, key: str, only: Only) -> list[Any]:
    """The file's `key` list, after checking the header; a ConfigError names `source` and the problem."""
    try:
        doc = yaml.safe_load(text)
    except yaml.YAMLError as e:
        raise ConfigError(f"{source}: not valid YAML: {e}".replace("\n", " ")) from None
    if not isinstance(doc, dict):
        raise ConfigError(f"{source}: expected a mapping with version and {key}")
    only(doc, {"version", key}, source)
    if doc.get("version") != "v1":
        raise ConfigError(f"{source}: version must be v1, not {doc.get('version')!r}")
    raw = doc.get(key)
    if not isinstance(raw, list) or not raw:
        raise ConfigError(f"{source}: {key} must be a non-empty list")
    return raw
