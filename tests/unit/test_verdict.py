"""One verdict: every way a restore falls short is named, and the CLI's exit status, the Restore resource's reason
and `move` read the same verdict (results/verdict.py), so no shortfall is success in one and failure in another."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from statusvault.cli.restore import _check_outcome
from statusvault.controller.conditions import Reason
from statusvault.controller.loop import REASONS
from statusvault.errors import ExitStatus, PartialFailure, StatusVaultError
from statusvault.model import DryRun
from statusvault.move import MoveReport
from statusvault.restore.ordering.gates import PASSED, TIMED_OUT, GateResult
from statusvault.restore.results.report import ItemResult, Outcome, RestoreReport, StatusOutcome
from statusvault.restore.results.verdict import RunOutcome as Verdict
from statusvault.restore.results.verdict import Shortfall, verdict
from statusvault.restore.runner import RestoreResult
from statusvault.transforms import PRUNED, ServerChange

W = "widgets.example.com"


def item(name: str, outcome: str = Outcome.CREATED, status: str = StatusOutcome.WRITTEN, **kw) -> ItemResult:
    kw.setdefault("wanted", True)
    return ItemResult(W, "team-a", name, outcome, status, **kw)


def failed(r: RestoreReport) -> None:
    """An object without a saved status that failed: a failure, not a missing status."""
    r.add(item("w-1", Outcome.FAILED, StatusOutcome.NOT_WRITTEN, message="422 Invalid", wanted=False))


def without_status(r: RestoreReport) -> None:
    r.add(item("w-1", status=StatusOutcome.NOT_WRITTEN))


def unreached(r: RestoreReport) -> None:
    r.unreached = 2


def not_paused(r: RestoreReport) -> None:
    r.add(item("w-1", pause_lost="example.com/paused"))


def still_paused(r: RestoreReport) -> None:
    r.unpause_failures.append(f"{W} team-a/w-1: could not unpause: 403 Forbidden")


def still_scaled_down(r: RestoreReport) -> None:
    r.not_scaled_back.append("deployment ops/operator: 403 Forbidden (its annotation ... has the replica count)")


def overwritten(r: RestoreReport) -> None:
    r.overwritten.add(f"{W} team-a/w-1: status written since by kc-operator")


def gate_timed_out(r: RestoreReport) -> None:
    r.gates.append(GateResult(1, "parents", "Ready", 5, TIMED_OUT))


def server_changed(r: RestoreReport) -> None:
    r.add(item("w-1", server_changes=(ServerChange("spec.zone", PRUNED),)))


def server_warned(r: RestoreReport) -> None:
    r.add(item("w-1", server_warnings=("unknown field spec.foo",)))


SHORTFALLS: list[tuple[Callable[[RestoreReport], None], bool, Shortfall]] = [
    (failed, False, Shortfall.FAILED_OBJECTS),
    (without_status, False, Shortfall.WITHOUT_SAVED_STATUS),
    (unreached, False, Shortfall.WITHOUT_SAVED_STATUS),
    (not_paused, False, Shortfall.NOT_PAUSED),
    (still_paused, False, Shortfall.STILL_PAUSED),
    (still_scaled_down, False, Shortfall.STILL_SCALED_DOWN),
    (overwritten, False, Shortfall.STATUS_OVERWRITTEN),
    (gate_timed_out, False, Shortfall.GATE_NOT_PASSED),
    (server_changed, True, Shortfall.SERVER_CHANGED),
    (server_warned, True, Shortfall.SERVER_WARNED),
]


def report_with(shape: Callable[[RestoreReport], None] | None = None) -> RestoreReport:
    r = RestoreReport("b", "none")
    r.add(item("w-0"))
    r.gates.append(GateResult(0, "crds", "Established", 1, PASSED))
    if shape is not None:
        shape(r)
    return r


def cli_exit(r: RestoreReport, strict: bool = False) -> ExitStatus:
    try:
        _check_outcome(verdict(r, strict), "b", DryRun.NONE)
    except PartialFailure:
        return ExitStatus.PARTIAL_FAILURE
    except StatusVaultError as e:
        return e.exit_status
    except KeyboardInterrupt:
        return ExitStatus.INTERRUPTED
    return ExitStatus.SUCCESS


@pytest.mark.parametrize(("shape", "strict", "shortfall"), SHORTFALLS, ids=[s[0].__name__ for s in SHORTFALLS])
def test_every_shortfall_is_named_and_exit_3_and_partially_restored_everywhere(shape, strict, shortfall):
    report = report_with(shape)
    judged = verdict(report, strict)
    assert judged.outcome is Verdict.PARTIAL and judged.shortfalls == (shortfall,)
    assert judged.exit_status == ExitStatus.PARTIAL_FAILURE == cli_exit(report, strict)
    assert REASONS[judged.outcome] == Reason.PARTIALLY_RESTORED
    assert not MoveReport("m", restore=RestoreResult(report, judged)).succeeded, (
        "a move is not verified over a shortfall"
    )
    line = judged.message("restore of b")
    assert ("\n" not in line and "ops/operator" in line) or (
        shortfall in (Shortfall.SERVER_CHANGED, Shortfall.SERVER_WARNED)
        or "w-1" in line
        or "parents" in line
        or "2 object(s)" in line
    ), f"names what fell short: {line}"


@pytest.mark.parametrize(("shape", "strict", "shortfall"), SHORTFALLS[-2:], ids=["changed", "warned"])
def test_what_the_server_changed_is_a_shortfall_only_with_strict(shape, strict, shortfall):
    report = report_with(shape)
    assert verdict(report).outcome is Verdict.DONE and cli_exit(report) == ExitStatus.SUCCESS
    assert MoveReport("m", restore=RestoreResult(report, verdict(report))).succeeded


def test_done_failed_and_interrupted_agree_everywhere():
    done = report_with()
    assert (verdict(done).outcome, cli_exit(done), REASONS[Verdict.DONE]) == (
        Verdict.DONE,
        ExitStatus.SUCCESS,
        Reason.COMPLETED,
    )
    assert MoveReport("m", restore=RestoreResult(done, verdict(done))).succeeded
    stopped = report_with(failed)
    stopped.aborted = "the backup's CRD is not Established"
    judged = verdict(stopped)
    assert (judged.outcome, cli_exit(stopped), REASONS[judged.outcome]) == (
        Verdict.FAILED,
        ExitStatus.ERROR,
        Reason.FAILED,
    )
    assert "not Established" in judged.message("restore of b")
    killed = report_with(failed)
    killed.interrupted = True
    judged = verdict(killed)
    assert (judged.outcome, cli_exit(killed), REASONS[judged.outcome]) == (
        Verdict.INTERRUPTED,
        ExitStatus.INTERRUPTED,
        Reason.INTERRUPTED,
    )


def test_several_shortfalls_are_all_named_each_with_its_count():
    report = report_with(failed)
    still_paused(report)
    gate_timed_out(report)
    assert verdict(report).shortfalls == (Shortfall.FAILED_OBJECTS, Shortfall.STILL_PAUSED, Shortfall.GATE_NOT_PASSED)
    without_status(report)
    unreached(report)
    judged = verdict(report)
    assert judged.shortfalls[:2] == (Shortfall.FAILED_OBJECTS, Shortfall.WITHOUT_SAVED_STATUS)
    assert [r["count"] for r in judged.to_dict()["reasons"]] == [1, 3, 1, 1], "reached and unreached"


def test_a_long_list_names_the_first_objects_and_counts_the_rest():
    report = report_with()
    for i in range(12):
        report.add(item(f"x-{i}", Outcome.FAILED, StatusOutcome.NOT_WRITTEN))
    line = verdict(report).message("restore of b")
    assert "x-0" in line and "x-4" in line and "x-5" not in line and "and 7 more" in line


def test_under_strict_what_the_server_did_not_keep_is_counted_from_the_audit_whichever_run_wrote_it():
    """A re-run writes nothing, so its own writes met no change; the audit's read of the cluster still finds the
    fields missing, and that is what --strict judges."""
    from statusvault.restore.results.audit import Audit

    rerun = report_with()
    rerun.audit = Audit(checked=1, server_changed=1, server_changed_named=["gadgets.x/ns/g0: spec.color pruned"])
    judged = verdict(rerun, strict=True)
    assert judged.shortfalls == (Shortfall.SERVER_CHANGED,) and judged.findings[0].names == (
        "gadgets.x/ns/g0: spec.color pruned",
    )
    assert verdict(rerun).outcome is Verdict.DONE, "not strict: the statuses are there"
    kept = report_with(server_changed)
    kept.audit = Audit(checked=1)  # written changed, then fixed on the cluster before the audit read it
    assert verdict(kept, strict=True).outcome is Verdict.DONE
