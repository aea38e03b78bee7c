"""Each command's callback gets its values as one typed dataclass (cli/flags.py:pass_args), built from what click
passes by name: the dataclass has a field for each of the command's parameters."""

from __future__ import annotations

import dataclasses

import click

from statusvault.cli.backups import BackupArgs, DeleteArgs, DescribeArgs, DownloadArgs, ImportArgs, ListArgs, VerifyArgs
from statusvault.cli.completion import CompletionArgs
from statusvault.cli.controller import ControllerInstallArgs, ControllerRenderArgs, ControllerRunArgs
from statusvault.cli.keys import GenerateKeyArgs, HoldArgs, RotateArgs
from statusvault.cli.main import COMMAND_MODULES, cli, load_commands
from statusvault.cli.move import MoveArgs
from statusvault.cli.restore import RestoreArgs
from statusvault.cli.schedule import PruneArgs, ScheduleRenderArgs
from statusvault.cli.version import VersionArgs
from statusvault.cli.watch import WatchRenderArgs, WatchRunArgs

ARGS = {
    "backup": BackupArgs,
    "list": ListArgs,
    "describe": DescribeArgs,
    "verify": VerifyArgs,
    "download": DownloadArgs,
    "delete": DeleteArgs,
    "restore": RestoreArgs,
    "unpause": RestoreArgs,
    "move": MoveArgs,
    "schedule render": ScheduleRenderArgs,
    "prune": PruneArgs,
    "watch run": WatchRunArgs,
    "watch render": WatchRenderArgs,
    "controller run": ControllerRunArgs,
    "controller render": ControllerRenderArgs,
    "controller install": ControllerInstallArgs,
    "hold set": HoldArgs,
    "hold release": HoldArgs,
    "keys rotate": RotateArgs,
    "keys generate-signing-key": GenerateKeyArgs,
    "import-velero": ImportArgs,
    "version": VersionArgs,
    "completion": CompletionArgs,
}


def leaves(group: click.Group, prefix: str = "") -> dict[str, click.Command]:
    out: dict[str, click.Command] = {}
    for name, command in group.commands.items():
        path = f"{prefix}{name}"
        out.update(leaves(command, path + " ") if isinstance(command, click.Group) else {path: command})
    return out


def all_commands() -> dict[str, click.Command]:
    """Every command by its path ("controller run"), each module's commands loaded (the CLI loads them lazily)."""
    for module in set(COMMAND_MODULES.values()):
        load_commands(module)
    return leaves(cli)


def test_every_command_has_a_field_for_each_of_its_parameters():
    commands = all_commands()
    assert set(commands) == {*ARGS, "cluster-info"}
    for path, cls in ARGS.items():
        params = {p.name for p in commands[path].params}
        fields = {f.name: f for f in dataclasses.fields(cls)}
        assert params - set(fields) == set(), path
        unset = [n for n, f in fields.items() if n not in params and f.default is dataclasses.MISSING]
        assert unset == [], f"{path}: fields no parameter fills"


def parsed(path: str, argv: list[str]) -> dict[str, object]:
    """A command's values as click passes them (under the group's settings: a command caches its help option)."""
    parent = click.Context(cli, info_name="statusvault", **cli.context_settings)
    return all_commands()[path].make_context(path, argv, parent=parent).params


def test_a_command_reads_its_values_as_click_gives_them():
    """Defaults and all: the values click parses build the dataclass, and the selection reads them."""
    params = parsed("backup", ["-n", "a,b", "-n", "c", "--no-include-crds", "-l", "app=x"])
    selection = BackupArgs(**params).selection()
    assert (selection.namespaces, selection.include_crds, selection.label_selector) == (("a", "b", "c"), False, "app=x")
    params = parsed("schedule render", ["n", "--schedule", "@daily", "-n", "a"])
    assert ScheduleRenderArgs(**params).selection().include_crds is False, "on unless -n is given"
