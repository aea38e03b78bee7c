"""The option table: it reads the commands' own declarations, and every conflict it lists is refused in one line."""

from __future__ import annotations

import click
import pytest

from statusvault.cli.declared import TABLE_COMMANDS, command, command_options, long_flags
from statusvault.errors import ConfigError
from statusvault.flagtable import CONFLICTS, NEEDS, check_options
from statusvault.model import DryRun
from statusvault.restore.options import restore_options


@pytest.mark.parametrize("path", TABLE_COMMANDS)
def test_the_table_reads_each_commands_own_declarations(path):
    flags = command_options()[path]
    assert flags == long_flags(command(path))
    assert "--help" not in flags and all(f.startswith("--") for f in flags)


def test_an_option_added_to_a_command_is_in_its_table_at_once():
    cmd = command("restore")
    added = click.Option(["--brand-new"], is_flag=True)
    cmd.params.append(added)
    try:
        assert "--brand-new" in long_flags(cmd)
    finally:
        cmd.params.remove(added)


def test_every_conflict_and_need_names_options_some_command_has():
    table = command_options()
    assert all(c.commands(table) for c in CONFLICTS), "a conflict no command can meet"
    assert all(n.commands(table) for n in NEEDS)


def given(flag: str) -> dict[str, object]:
    """A value the user gives for `flag`, under click's name for it."""
    key = {"--namespace": "namespaces", "--name": "names", "--modifiers": "modifiers_file"}.get(flag)
    key = key or flag.lstrip("-").replace("-", "_")
    values: dict[str, object] = {
        "no_status": True, "dry_run": "client", "restart": True, "all_namespaces": True, "abort": True,
        "delete_source": True, "yes": True, "pause": "auto",
    }  # fmt: skip
    return {key: values.get(key, ("x",))}


@pytest.mark.parametrize("conflict", CONFLICTS, ids=lambda c: f"{c.first} {c.second}")
def test_each_conflicting_pair_is_refused_in_one_line_by_every_command_that_has_both(conflict):
    for _path in conflict.commands(command_options()):
        values = {**given(conflict.first), **given(conflict.second)}
        for need in NEEDS:  # satisfied, so that only the conflict can be what is refused
            if need.option in (conflict.first, conflict.second):
                values.update(given(need.any_of[0]))
        with pytest.raises(ConfigError, match=f"{conflict.first} and {conflict.second} cannot be combined") as e:
            check_options(values)
        assert "\n" not in str(e.value)


@pytest.mark.parametrize("need", NEEDS, ids=lambda n: n.option)
def test_an_option_without_the_one_it_needs_is_refused(need):
    for _path in need.commands(command_options()):
        with pytest.raises(ConfigError, match=f"{need.option} needs"):
            check_options(given(need.option))
        check_options({**given(need.option), **given(need.any_of[0])})


def test_defaults_and_a_single_option_pass():
    check_options({"dry_run": "none", "pause": "none", "no_status": False, "status_include_resources": ()})
    check_options({"no_status": True})


def test_a_mode_given_as_its_enum_member_is_off_at_its_off_value():
    """The CLI hands --dry-run over as a DryRun member: none is off, so --restart beside it passes; client is on."""
    check_options({"dry_run": DryRun.NONE, "restart": True})
    with pytest.raises(ConfigError, match="--dry-run and --restart cannot be combined"):
        check_options({"dry_run": DryRun.CLIENT, "restart": True})


def test_a_restore_intent_is_held_to_the_same_table():
    with pytest.raises(ConfigError, match="--no-status and --status-include-resources cannot be combined"):
        restore_options({"no_status": "true", "status_include_resources": "widgets.example.com"})
    restore_options({"no_status": "false", "status_include_resources": "widgets.example.com"})
