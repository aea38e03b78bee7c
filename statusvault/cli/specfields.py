"""The restore and backup commands' options as the Restore, Backup and BackupSchedule resources' spec fields: the
CRDs are generated from the same click declarations as the CLI (cli/declared.py), so an option added to `restore`
becomes a field unless its declaration leaves it out of the resource, with the reason."""

from __future__ import annotations

from typing import Any

import click

from statusvault.cli.backups import backup as backup_cmd
from statusvault.cli.declared import left_out_of, long_flag
from statusvault.cli.restore import restore_cmd
from statusvault.controller.crd import SpecField, backup_crd, restore_crd, schedule_crd
from statusvault.model import KubeObject

# what a field means in a Restore where it differs from the CLI
DESCRIPTIONS = {
    "modifiers": "A ConfigMap in the controller's namespace holding a modifiers file (its one key, or modifiers.yaml).",
    "storage": "Where the backup is (default: the controller's --storage).",
    "processes": "Worker processes for every wave (default: auto, the CPUs the controller may use).",
    "strict": "A field the server dropped or changed (a schema that prunes it, a mutating webhook), or a write it "
    "answered with a Warning, makes the run Partial instead of Complete; both are reported either way.",
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


def fields_of(command: click.Command, resource: str) -> list[SpecField]:
    """Every option of `command` that `resource` has a field for (all but those it is left out of), in the command's
    order."""
    left_out = left_out_of(command, resource)
    fields = []
    for param in command.params:
        flag = long_flag(param)
        if isinstance(param, click.Option) and flag and flag not in left_out:
            name = flag.lstrip("-")
            fields.append(SpecField(name, _schema(param), _help(param, name)))
    return fields


def restore_fields() -> list[SpecField]:
    return fields_of(restore_cmd, "Restore")


def backup_fields() -> list[SpecField]:
    return fields_of(backup_cmd, "Backup")


def schedule_fields() -> list[SpecField]:
    return fields_of(backup_cmd, "BackupSchedule")


def crds() -> list[KubeObject]:
    return [restore_crd(restore_fields()), backup_crd(backup_fields()), schedule_crd(schedule_fields())]
