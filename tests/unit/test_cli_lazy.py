"""The CLI imports a command's module only when that command runs; its table of modules stays complete."""

from __future__ import annotations

import subprocess
import sys

import click

from statusvault.cli.main import COMMAND_MODULES, cli, load_commands


def test_every_command_module_registers_exactly_the_commands_the_table_names():
    for module in set(COMMAND_MODULES.values()):
        names = {c.name for c in load_commands(module)}
        assert names == {n for n, m in COMMAND_MODULES.items() if m == module}, module
    with click.Context(cli) as ctx:
        assert cli.list_commands(ctx) == sorted({*COMMAND_MODULES, "cluster-info"})
        assert all(isinstance(cli.get_command(ctx, n), click.Command) for n in COMMAND_MODULES)


def test_a_restore_does_not_import_the_controller_or_the_watcher():
    code = (
        "import sys; from statusvault.cli.main import main\n"
        "main(['restore', '--help'])\n"
        "print(sorted(m for m in sys.modules if m.startswith(('statusvault.controller', 'statusvault.watch',"
        " 'statusvault.cli.controller', 'statusvault.cli.watch', 'prometheus_client'))))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.splitlines()[-1] == "[]"
