"""controller run --lock-modes and --max-lock-for (controller/backups.py LockLimits): the Object Lock a Backup or
BackupSchedule may ask for, and how `controller render` passes the limits to the controller it renders."""

from __future__ import annotations

import click
import pytest

from statusvault.cli.controller import render_cmd, run_cmd
from statusvault.controller.backups import LOCK_MODES, LockLimits, lock_modes, parse_backup
from statusvault.controller.install import ControllerSpec, deployment, lock_limit_args
from statusvault.errors import ConfigError

BOTH = LockLimits(LOCK_MODES)


@pytest.mark.parametrize(
    ("limits", "mode", "lock_for"),
    [
        (LockLimits(), "governance", "3650d"),  # no maximum by default
        (LockLimits(), "", ""),  # no lock asked
        (BOTH, "compliance", "30d"),
        (LockLimits(("compliance",)), "compliance", "1d"),
        (LockLimits(max_for="30d"), "governance", "30d"),  # the maximum itself
        (LockLimits(max_for="720h"), "governance", "4w"),  # compared as durations, whatever their units
        (LockLimits(max_for="1h30m"), "governance", "90m"),
    ],
)
def test_what_the_limits_allow_passes(limits, mode, lock_for):
    limits.check(mode, lock_for)


@pytest.mark.parametrize(
    ("limits", "mode", "lock_for", "refusal"),
    [
        (LockLimits(), "compliance", "1d",
         "spec.lock-mode compliance is not allowed by this controller (allowed: governance)"),
        (LockLimits(("compliance",)), "governance", "1d",
         "spec.lock-mode governance is not allowed by this controller (allowed: compliance)"),
        (LockLimits(()), "governance", "1d",
         "spec.lock-mode governance is not allowed by this controller (allowed: none)"),
        (LockLimits(max_for="30d"), "governance", "31d",
         "spec.lock-for 31d is longer than this controller allows (at most 30d)"),
        (LockLimits(BOTH.modes, "720h"), "compliance", "30d1s",
         "spec.lock-for 30d1s is longer than this controller allows (at most 720h)"),
    ],
)  # fmt: skip
def test_a_mode_not_allowed_or_a_lock_longer_than_the_maximum_is_refused_in_one_line(limits, mode, lock_for, refusal):
    with pytest.raises(ConfigError) as refused:
        limits.check(mode, lock_for)
    assert str(refused.value) == refusal


def backup(**spec: object) -> dict[str, object]:
    return {"metadata": {"name": "b", "namespace": "sv"}, "spec": spec}


def test_a_legal_hold_alone_is_always_allowed():
    """Whoever may s3:PutObjectLegalHold lifts it: no limit keeps a Backup from asking for one."""
    intent = parse_backup(backup(**{"legal-hold": True}), LockLimits((), "1s"))
    assert intent.legal_hold and not intent.lock_mode


def test_a_backup_asking_for_more_is_refused_when_its_spec_is_read():
    with pytest.raises(ConfigError, match=r"^spec.lock-mode compliance is not allowed by this controller"):
        parse_backup(backup(**{"lock-mode": "compliance", "lock-for": "1d", "legal-hold": True}), LockLimits())
    allowed = parse_backup(backup(**{"lock-mode": "governance", "lock-for": "1d"}), LockLimits(max_for="7d"))
    assert (allowed.lock_mode, allowed.lock_for) == ("governance", "1d")


@pytest.mark.parametrize(
    ("text", "modes"),
    [
        ("governance", ("governance",)),
        ("governance,compliance", ("governance", "compliance")),
        (" Compliance , governance,compliance", ("compliance", "governance")),
        ("", ()),
        ("none", ()),
        ("NONE", ()),
    ],
)
def test_lock_modes_is_a_comma_separated_list_and_none_or_empty_allows_none(text, modes):
    assert lock_modes(text) == modes


@pytest.mark.parametrize(
    ("modes", "max_for", "refusal"),
    [
        (("governance", "legal-hold"), "", "--lock-modes: 'legal-hold' is not a lock mode"),
        (("governance", "none"), "", "--lock-modes: 'none' is not a lock mode"),
        (("governance",), "a month", "--max-lock-for: invalid duration 'a month'"),
    ],
)
def test_limits_the_administrator_mistyped_are_refused(modes, max_for, refusal):
    with pytest.raises(ConfigError, match=f"^{refusal}"):
        LockLimits(modes, max_for)


def default_of(command: click.Command, name: str) -> str:
    (param,) = [p for p in command.params if p.name == name]
    return str(param.default)


@pytest.mark.parametrize("command", [run_cmd, render_cmd], ids=["run", "render"])
def test_the_commands_defaults_are_the_limits_defaults_governance_and_no_maximum(command):
    given = LockLimits(lock_modes(default_of(command, "lock_modes")), default_of(command, "max_lock_for"))
    assert given == LockLimits() == LockLimits(("governance",), "")


@pytest.mark.parametrize(
    ("limits", "args"),
    [
        (LockLimits(), []),
        (BOTH, ["--lock-modes", "governance,compliance"]),
        (LockLimits(()), ["--lock-modes", "none"]),
        (LockLimits(max_for="90d"), ["--max-lock-for", "90d"]),
    ],
)
def test_the_rendered_controller_runs_with_the_limits_given_to_render(limits, args):
    assert lock_limit_args(limits) == args
    container = deployment(ControllerSpec("sv", "s3://b/p", locks=limits))["spec"]["template"]["spec"]["containers"][0]
    rendered = container["command"]
    assert rendered[len(rendered) - len(args) :] == args, "last, after every other option"
    assert ("--lock-modes" in rendered, "--max-lock-for" in rendered) == (
        "--lock-modes" in args,
        "--max-lock-for" in args,
    )
