"""One declaration per option (cli/declared.py): no module keeps a hand-written copy of a command's flags, and what
each front end takes is read from the declarations."""

from __future__ import annotations

import ast
import re
from pathlib import Path

from statusvault.cli.declared import TABLE_COMMANDS, command, command_options, left_out_of
from statusvault.controller.intent import NOT_IN_INTENT, RESTORE_KEYS
from statusvault.restore.options import RESTORE_VALUES

PKG = Path(__file__).resolve().parents[2] / "statusvault"
FLAG = re.compile(r"^--[a-z0-9][a-z0-9-]*$")
COPY = 4  # this many long flags and nothing else in one literal: a list of a command's options


def flag_lists(source: str) -> list[tuple[int, list[str]]]:
    """The tuple, list, set and dict literals in `source` made of long flags only (a dict: its keys), COPY or more."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Tuple | ast.List | ast.Set):
            elements = [e for e in node.elts if not isinstance(e, ast.Starred)]
        elif isinstance(node, ast.Dict):
            elements = [k for k in node.keys if k is not None]
        else:
            continue
        flags = [e.value for e in elements if isinstance(e, ast.Constant) and isinstance(e.value, str)]
        if len(flags) >= COPY and len(flags) == len(elements) and all(FLAG.match(f) for f in flags):
            found.append((node.lineno, flags))
    return found


def test_the_check_finds_a_hand_written_list_of_flags():
    assert flag_lists('_RESTORE = ("--storage", "--namespace", "--selector", "--name")')
    assert flag_lists('NOT_IN_SPEC = {"--a": "x", "--b": "y", "--c": "z", "--d": "w"}')
    assert not flag_lists('argv = ["restore", "b1", "--namespace", "a", "--parallel", "4", "--fence", "auto"]')


def test_no_module_keeps_a_hand_written_copy_of_a_commands_flags():
    """The option table, the CRDs' fields and the API's keywords are read from the click declarations; a list of
    flags written out again drifts from them (as the option table, NOT_IN_SPEC and the API's lists once did).
    Command lines the testing modules run are not declarations: they hold values between the flags."""
    copies = [
        f"{path.relative_to(PKG)}:{line}: {flags[:4]}..."
        for path in sorted(PKG.rglob("*.py"))
        for line, flags in flag_lists(path.read_text())
    ]
    assert copies == []


def test_every_table_command_has_options_and_the_resources_leave_out_only_their_commands_options():
    table = command_options()
    assert set(table) == set(TABLE_COMMANDS) and all(table.values())
    assert set(left_out_of(command("restore"), "Restore")) <= table["restore"]
    assert set(left_out_of(command("backup"), "BackupSchedule")) <= table["backup"]


def test_an_intent_takes_every_option_the_restore_options_read_but_those_it_refuses():
    """restore_options' own declaration of what it reads (RESTORE_VALUES) makes the intent keys: an option it reads
    is an intent key unless NOT_IN_INTENT says why not."""
    assert set(NOT_IN_INTENT) <= RESTORE_VALUES
    back = {"names" if k == "name" else k.replace("-", "_") for k in RESTORE_KEYS}
    assert back == RESTORE_VALUES - set(NOT_IN_INTENT)
