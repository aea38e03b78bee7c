"""The option table: it matches the commands' real options, and every conflict it lists is refused in one line."""

from __future__ import annotations

import click
import pytest

from statusvault.cli.main import cli
from statusvault.errors import ConfigError
from statusvault.flagtable import COMMAND_OPTIONS, CONFLICTS, NEEDS, check_options
from statusvault.model import DryRun
from statusvault.restore.options import restore_options


def command(path: str) -> click.Command:
    cmd: click.Command = cli
    for part in path.split():
        assert isinstance(cmd, click.Group)
        with click.Context(cmd) as ctx:
            sub = cmd.get_command(ctx, part)
        assert sub is not None, path
        cmd = sub
    return cmd


def long_flags(cmd: click.Command) -> set[str]:
    return {next(o for o in p.opts if o.startswith("--")) for p in cmd.params if isinstance(p, click.Option)}


@pytest.mark.parametrize("path", sorted(COMMAND_OPTIONS))
def test_the_table_lists_exactly_each_commands_options(path):
    assert COMMAND_OPTIONS[path] == long_flags(command(path))


def test_every_conflict_and_need_names_options_some_command_has():
    assert all(c.commands() for c in CONFLICTS), "a conflict no command can meet"
    assert all(n.commands() for n in NEEDS)


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
    for path in conflict.commands():
        values = {**given(conflict.first), **given(conflict.second)}
        for need in NEEDS:  # satisfied, so that only the conflict can be what is refused
            if need.option in (conflict.first, conflict.second):
                values.update(given(need.any_of[0]))
        with pytest.raises(ConfigError, match=f"{conflict.first} and {conflict.second} cannot be combined") as e:
            check_options(path, values)
        assert "\n" not in str(e.value)


@pytest.mark.parametrize("need", NEEDS, ids=lambda n: n.option)
def test_an_option_without_the_one_it_needs_is_refused(need):
    for path in need.commands():
        with pytest.raises(ConfigError, match=f"{need.option} needs"):
            check_options(path, given(need.option))
        check_options(path, {**given(need.option), **given(need.any_of[0])})


def test_defaults_and_a_single_option_pass():
    check_options("restore", {"dry_run": "none", "pause": "none", "no_status": False, "status_include_resources": ()})
    check_options("restore", {"no_status": True})


def test_a_mode_given_as_its_enum_member_is_off_at_its_off_value():
    """The CLI hands --dry-run over as a DryRun member: none is off, so --restart beside it passes; client is on."""
    check_options("restore", {"dry_run": DryRun.NONE, "restart": True})
    with pytest.raises(ConfigError, match="--dry-run and --restart cannot be combined"):
        check_options("restore", {"dry_run": DryRun.CLIENT, "restart": True})


def test_a_restore_intent_is_held_to_the_same_table():
    with pytest.raises(ConfigError, match="--no-status and --status-include-resources cannot be combined"):
        restore_options({"no_status": "true", "status_include_resources": "widgets.example.com"})
    restore_options({"no_status": "false", "status_include_resources": "widgets.example.com"})
