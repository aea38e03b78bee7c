"""What both restore config files share (--modifiers, --order): how they are read (UTF-8, or UTF-16 with its
byte-order mark, as PowerShell's `>` writes), and their header: YAML, a mapping, `version: v1`, and one non-empty
list of entries."""

from __future__ import annotations

import codecs
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import yaml

from statusvault.errors import ConfigError

Only = Callable[[Mapping[str, Any], set[str], str], None]  # refuses keys outside the allowed set, in its own words


def read_config(path: str, what: str) -> str:
    """The text of a config file the user names; a one-line ConfigError when it cannot be read or is not text."""
    try:
        data = Path(path).read_bytes()
    except OSError as e:
        raise ConfigError(f"cannot read {what} {path}: {e.strerror}") from None
    encoding = "utf-16" if data.startswith((codecs.BOM_UTF16_LE, codecs.BOM_UTF16_BE)) else "utf-8-sig"
    try:
        return data.decode(encoding)
    except UnicodeDecodeError as e:
        raise ConfigError(
            f"{what} {path} is not {encoding.upper().removesuffix('-SIG')} text (byte {e.start}): save it as UTF-8"
        ) from None


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
