"""The one declaration of each command-line option is its click declaration: name, type or choices, default, help,
and which commands take it (the commands it decorates). What other front ends make of it is declared there too, as
`left_out`: the resources (Restore, Backup, BackupSchedule) that have no field for it, each with the reason. Every
other front end reads these declarations instead of keeping a list of its own:

- the option table's commands (`command_options`: which long flags each command takes; flagtable.py's conflicts and
  needs are judged over them, and docs/cli.md lists them);
- the Restore, Backup and BackupSchedule CRDs' spec fields (cli/specfields.py: an option is a field unless it is
  left out of that resource);
- the library's keyword arguments (api.py: `command_values` reads them with the command's declarations).
tests/unit/test_declared.py fails on a hand-written copy of a command's flags anywhere in the package."""

from __future__ import annotations

import functools
from collections.abc import Callable, Mapping
from typing import Any, TypeVar

import click

F = TypeVar("F", bound=Callable[..., Any])

RESOURCES = ("Restore", "Backup", "BackupSchedule")  # a BackupSchedule's spec is a Backup's, less what it leaves out
# the commands of the option table (docs/cli.md: their conflicts and needs), by their paths under `statusvault`
TABLE_COMMANDS = ("restore", "unpause", "backup", "move", "watch run", "schedule render", "keys rotate")

CONNECTION = "the store's connection is the controller's (its own flags)"
CONTROLLERS = "the controller's own (its flags and Secrets)"
KEYS = {  # encryption keys
    "Restore": "decryption keys are the controller's (its Secret)",
    "Backup": "backups are encrypted with the controller's key (its Secret)",
}
PRIVILEGED = {
    "Restore": "a Restore writes no privileged type: whoever may create one would write it with the controller's "
    "rights (docs/security.md)"
}
SHARED_CLIENT = {"Restore": "the controller's API client is shared by every restore"}
NOT_YET = "not honoured by the controller yet"


class Declared(click.Option):
    """A click option that also declares the resources it is left out of, and why."""

    def __init__(self, *args: Any, left_out: Mapping[str, str] | None = None, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        unknown = set(left_out or {}) - set(RESOURCES)
        if unknown:
            raise ValueError(f"{sorted(unknown)}: not one of {RESOURCES}")
        self.left_out = dict(left_out or {})


def option(*decls: str, left_out: Mapping[str, str] | None = None, **attrs: Any) -> Callable[[F], F]:
    """click.option, with the resources the option is left out of (`left_out`: resource kind -> why)."""
    return click.option(*decls, cls=Declared, left_out=left_out, **attrs)


def everywhere(why: str) -> dict[str, str]:
    """Left out of every resource, for one reason."""
    return dict.fromkeys(RESOURCES, why)


def long_flag(param: click.Parameter) -> str:
    return next((o for o in param.opts if o.startswith("--")), "")


def long_flags(command: click.Command) -> frozenset[str]:
    """The long flags of a command's options (its --help aside)."""
    return frozenset(long_flag(p) for p in command.params if isinstance(p, click.Option) and long_flag(p))


def command(path: str) -> click.Command:
    """A command by its path under `statusvault` ("restore", "watch run"), loaded as --help would load it."""
    from statusvault.cli.main import cli

    found: click.Command = cli
    ctx = click.Context(cli)
    for word in path.split():
        assert isinstance(found, click.Group), path
        sub = found.get_command(ctx, word)
        if sub is None:
            raise KeyError(path)
        found = sub
    return found


@functools.cache
def command_options() -> dict[str, frozenset[str]]:
    """Which long flags each command of the option table takes, read from their declarations."""
    return {path: long_flags(command(path)) for path in TABLE_COMMANDS}


def left_out_of(command_: click.Command, resource: str) -> dict[str, str]:
    """The command's options `resource` has no field for, and why (a BackupSchedule: a Backup's, and its own)."""
    kinds = ("Backup", resource) if resource == "BackupSchedule" else (resource,)
    out = {}
    for param in command_.params:
        if isinstance(param, Declared):
            why = next((param.left_out[k] for k in reversed(kinds) if k in param.left_out), "")
            if why:
                out[long_flag(param)] = why
    return out
