"""Which pairs of command-line flags (click's options) conflict, and which flag needs another: the one table that
the CLI, restore intents, the CLI reference (docs/cli.md) and the pairwise tests read. Which flags each command
takes is read from the commands' own declarations (cli/declared.py: `command_options`), never listed here. (The
words: a *flag* is what a command line says, cli/flags.py parses them; a restore's *options* are what they mean,
restore/options.py's RestoreOptions.)

Options are named by their long flag. Every pair of a command's options not listed as a conflict must work
together; the pairwise suite (tests/integration/test_compose.py) holds the restore to that. A conflict is
refused with one line before anything is read or written.
"""

from __future__ import annotations

import dataclasses
import enum
from collections.abc import Mapping
from typing import Any

from statusvault.errors import ConfigError

CommandOptions = Mapping[str, frozenset[str]]  # a command's path -> its long flags (cli/declared.py reads them)


@dataclasses.dataclass(frozen=True)
class OptionConflict:
    first: str
    second: str
    why: str

    def commands(self, table: CommandOptions) -> list[str]:
        return [c for c, opts in table.items() if self.first in opts and self.second in opts]


@dataclasses.dataclass(frozen=True)
class Needs:
    option: str
    any_of: tuple[str, ...]
    why: str

    def commands(self, table: CommandOptions) -> list[str]:
        return [c for c, opts in table.items() if self.option in opts]


CONFLICTS = (
    OptionConflict(
        "--no-status", "--status-include-resources", "--no-status restores no status for a filter to choose"
    ),
    OptionConflict(
        "--no-status", "--status-exclude-resources", "--no-status restores no status for a filter to choose"
    ),
    OptionConflict("--pause-annotation", "--pause-field", "an object is created with one generic pause marker"),
    OptionConflict("--all-namespaces", "--namespace", "-A takes every namespace, -n only the ones named"),
    OptionConflict(
        "--dry-run", "--restart", "--restart discards an unfinished restore's journal, a dry run changes nothing"
    ),
    OptionConflict("--abort", "--delete-source", "--abort gives the move up, --delete-source finishes it"),
    OptionConflict("--signing-key-file", "--signing-kms-key-id", "a backup is signed by one key"),
    OptionConflict("--at", "--from-velero", "--at names a watch's moment, --from-velero a Velero backup"),
)

NEEDS = (
    Needs("--pause-resources", ("--pause-annotation", "--pause-field"), "they name what the generic marker pauses"),
    Needs("--pause-annotation", ("--pause-resources",), "the generic marker applies to the resources named"),
    Needs("--pause-field", ("--pause-resources",), "the generic marker applies to the resources named"),
    Needs("--keep-paused", ("--pause", "--pause-annotation", "--pause-field"), "only what was paused stays paused"),
    Needs("--fence-exclude", ("--fence",), "it names workloads --fence would otherwise fence"),
    Needs("--yes", ("--delete-source",), "it confirms --delete-source"),
    Needs("--lock-mode", ("--lock-for",), "a retention is a mode and how long it lasts"),
    Needs("--lock-for", ("--lock-mode",), "a retention is a mode and how long it lasts"),
)

_UNSET: tuple[Any, ...] = (None, False, "", (), [], "none", 0)


_KEYS = {"--namespace": "namespaces", "--name": "names", "--modifiers": "modifiers_file"}  # click's names


def _key(flag: str) -> str:
    return _KEYS.get(flag) or flag.lstrip("-").replace("-", "_")


def _given(values: Mapping[str, Any], flag: str) -> bool:
    """Whether the user gave the option (a value other than its 'off' default)."""
    value = values.get(_key(flag))
    if isinstance(value, (tuple, list)):
        return any(v for v in value)
    if isinstance(value, enum.Enum):  # a mode (DryRun, ...): its value says whether it is off
        value = value.value
    return not any(value is u or (type(value) is type(u) and value == u) for u in _UNSET)


def check_options(values: Mapping[str, Any]) -> None:
    """Refuse, with one line, a conflicting pair or an option given without the one it needs. `values` are a
    command's option values by long name (dashes as underscores), as click passes them or an intent holds them: an
    option the command does not take is never given."""
    for c in CONFLICTS:
        if _given(values, c.first) and _given(values, c.second):
            raise ConfigError(f"{c.first} and {c.second} cannot be combined: {c.why}")
    for n in NEEDS:
        if _given(values, n.option) and not any(_given(values, o) for o in n.any_of):
            raise ConfigError(f"{n.option} needs {' or '.join(n.any_of)}: {n.why}")


def markdown(table: CommandOptions) -> str:
    """The tables for docs/cli.md."""
    rows = [f"| `{c.first}` | `{c.second}` | {', '.join(c.commands(table))} | {c.why} |" for c in CONFLICTS]
    needs = [f"| `{n.option}` | {' or '.join(f'`{o}`' for o in n.any_of)} | {n.why} |" for n in NEEDS]
    return "\n".join(
        [
            "## Options that cannot be combined",
            "",
            "Refused with one line before anything is read or written; every other pair of a command's options "
            "works together (the pairwise suite tests it).",
            "",
            "| option | conflicts with | commands | why |",
            "|---|---|---|---|",
            *rows,
            "",
            "| option | needs | why |",
            "|---|---|---|",
            *needs,
            "",
        ]
    )


def flag_value(raw: Any, name: str) -> bool | None:
    """A boolean option's value as the CLI, an intent or a spec gives it: a bool, "true"/"false" (any case), or None
    when absent; anything else is a ConfigError naming `name`."""
    if raw is None or isinstance(raw, bool):
        return raw
    if str(raw).lower() not in ("true", "false"):
        raise ConfigError(f"{name} must be true or false, not {raw!r}")
    return str(raw).lower() == "true"


def value_key(flag: str) -> str:
    """The name an option's value goes by in click's values, restore_options and the like."""
    return _key(flag)
