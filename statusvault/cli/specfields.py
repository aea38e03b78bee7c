"""The restore command's options as the Restore resource's spec fields: the CRD is generated from the same
click declarations (and option table) as the CLI, so an option added to `restore` becomes a field."""

from __future__ import annotations

from typing import Any

import click

from statusvault.cli.backups import backup as backup_cmd
from statusvault.cli.restore import restore_cmd
from statusvault.controller.crd import (
    NOT_IN_BACKUP_SPEC,
    NOT_IN_SCHEDULE_SPEC,
    NOT_IN_SPEC,
    SpecField,
    backup_crd,
    restore_crd,
    schedule_crd,
)
from statusvault.flagtable import COMMAND_OPTIONS
from statusvault.model import KubeObject

# what a field means in a Restore where it differs from the CLI
DESCRIPTIONS = {
    "modifiers": "A ConfigMap in the controller's namespace holding a modifiers file (its one key, or modifiers.yaml).",
    "storage": "Where the backup is (default: the controller's --storage).",
    "processes": "Worker processes for every wave (default: auto, the CPUs the controller may use).",
    "stream": "true: write objects as the archive is read; false: plan first, after checking every member; "
    "unset: an authenticated (encrypted, or signed and verified) backup of more than 20,000 objects streams.",
}


def _schema(param: click.Option) -> dict[str, Any]:
    kind = param.type
    if param.is_flag:
        one: dict[str, Any] = {"type": "boolean"}
    elif isinstance(kind, click.Choice):
        one = {"type": "string", "enum": [str(c) for c in kind.choices]}
    elif isinstance(kind, click.IntRange):
        one = {"type": "integer", **_bounds(kind)}
    elif isinstance(kind, click.FloatRange):
        one = {"type": "number", **_bounds(kind)}
    else:
        one = {"type": "string"}
    return {"type": "array", "items": one} if param.multiple else one


def _bounds(kind: click.IntRange | click.FloatRange) -> dict[str, Any]:
    return {k: v for k, v in (("minimum", kind.min), ("maximum", kind.max)) if v is not None}


def _help(param: click.Option, name: str) -> str:
    text = DESCRIPTIONS.get(name) or (param.help or "").split(". ")[0].strip()
    return text if not text or text.endswith(".") else text + "."


def fields_of(command: click.Command, offered: frozenset[str], left_out: dict[str, str]) -> list[SpecField]:
    """Every option of `command` the controller honours, in the command's order."""
    fields = []
    for param in command.params:
        if not isinstance(param, click.Option):
            continue
        flag = next((o for o in param.opts if o.startswith("--")), "")
        if flag in offered and flag not in left_out:
            name = flag.lstrip("-")
            fields.append(SpecField(name, _schema(param), _help(param, name)))
    return fields


def restore_fields() -> list[SpecField]:
    return fields_of(restore_cmd, COMMAND_OPTIONS["restore"], NOT_IN_SPEC)


def backup_fields() -> list[SpecField]:
    return fields_of(backup_cmd, COMMAND_OPTIONS["backup"], NOT_IN_BACKUP_SPEC)


def schedule_fields() -> list[SpecField]:
    return fields_of(backup_cmd, COMMAND_OPTIONS["backup"], NOT_IN_SCHEDULE_SPEC)


def crds() -> list[KubeObject]:
    return [restore_crd(restore_fields()), backup_crd(backup_fields()), schedule_crd(schedule_fields())]
