"""docs/reference/exit-codes.md states every exit code and every verdict reason, read from the code: a code or a
reason added without its row fails here."""

from __future__ import annotations

from pathlib import Path

import pytest

from statusvault.controller.loop import REASONS
from statusvault.errors import ExitStatus
from statusvault.restore.results.verdict import RunOutcome, Shortfall

PAGE = (Path(__file__).resolve().parents[2] / "docs" / "reference" / "exit-codes.md").read_text()


@pytest.mark.parametrize("status", list(ExitStatus), ids=lambda s: s.name)
def test_every_exit_code_has_its_row(status):
    assert f"| {int(status)} | `{status.name}` |" in PAGE


@pytest.mark.parametrize("reason", list(Shortfall), ids=str)
def test_every_verdict_reason_has_its_row(reason):
    assert f"| `{reason}` |" in PAGE


@pytest.mark.parametrize("outcome", list(RunOutcome), ids=str)
def test_every_outcome_has_its_exit_code_and_condition_reason(outcome):
    from statusvault.restore.results.verdict import Verdict

    code = int(Verdict(outcome).exit_status)
    codes = "130 or 143" if outcome is RunOutcome.INTERRUPTED else str(code)
    assert f"| `{outcome}` | {codes} | `{REASONS[outcome]}` |" in PAGE
