"""One --dry-run shape for every command that has one: kubectl's --dry-run=none|client|server, the modes
the command has; the old bare --dry-run still means client, with a deprecation line."""

from __future__ import annotations

import json

import click

from statusvault.cli.flags import DRY_RUNS, DryRunMode
from statusvault.cli.main import cli, main


def commands(group: click.Group, prefix: str = "") -> dict[str, click.Command]:
    """Every command of the (lazily loaded) CLI, by its full name."""
    out: dict[str, click.Command] = {}
    ctx = click.Context(group)
    for name in group.list_commands(ctx):
        command = group.get_command(ctx, name)
        assert command is not None
        if isinstance(command, click.Group):
            out |= commands(command, f"{prefix}{name} ")
        else:
            out[prefix + name] = command
    return out


def test_every_dry_run_option_has_kubectls_shape():
    shapes = {
        name: param.type.modes
        for name, command in commands(cli).items()
        for param in command.params
        if "--dry-run" in getattr(param, "opts", ()) and isinstance(param.type, DryRunMode)
    }
    wrong = [n for n, c in commands(cli).items() for p in c.params
             if "--dry-run" in getattr(p, "opts", ()) and not isinstance(p.type, DryRunMode)]  # fmt: skip
    assert wrong == []
    assert {"restore", "unpause", "prune", "controller install", "schedule render"} <= set(shapes)
    assert all(modes[0] == "none" and set(modes) <= set(DRY_RUNS) for modes in shapes.values()), shapes


def test_a_bare_dry_run_still_means_client_and_says_it_is_deprecated(tmp_path, capsys):
    code = main(["prune", "--storage", str(tmp_path), "--keep-last", "1", "--dry-run", "-o", "json"])
    out, err = capsys.readouterr()
    assert code == 0 and json.loads(out)["dryRun"] is True
    assert "--dry-run without a value is deprecated: give --dry-run=client" in err

    assert main(["prune", "--storage", str(tmp_path), "--keep-last", "1", "--dry-run=client"]) == 0
    assert "deprecated" not in capsys.readouterr().err
    assert main(["prune", "--storage", str(tmp_path), "--keep-last", "1", "--dry-run", "server"]) == 2
    assert "'server' is not one of none, client" in capsys.readouterr().err
