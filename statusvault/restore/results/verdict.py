"""One verdict of a restore's report: done, partial (with every shortfall named), failed or interrupted.

The CLI's exit status, the Restore resource's reason and `move` all read it, so a shortfall counted in one is
counted in every one (tests/unit/test_verdict.py holds each reason to its exit status and condition)."""

from __future__ import annotations

import dataclasses
import enum

from statusvault.errors import ExitStatus
from statusvault.model import DryRun
from statusvault.restore.results.report import RestoreReport

NAMED = 5  # objects a shortfall names in its one line; the report lists them all


class RunOutcome(enum.StrEnum):
    DONE = "done"  # everything asked for is done
    PARTIAL = "partial"  # the run ended, short of what was asked (the shortfalls say what)
    FAILED = "failed"  # stopped early: most of what was asked may not be done
    INTERRUPTED = "interrupted"  # stopped by a signal or a lost lease: the same command resumes


class Shortfall(enum.StrEnum):
    """Each way a restore that ran to its end can fall short; every one makes the exit status 3."""

    FAILED_OBJECTS = "FailedObjects"
    WITHOUT_SAVED_STATUS = "WithoutSavedStatus"
    NOT_PAUSED = "NotPaused"
    STILL_PAUSED = "StillPaused"  # the unpause failed: their operator never resumes them
    STILL_SCALED_DOWN = "StillScaledDown"  # operators scaled to 0 for the restore, not scaled back
    STATUS_OVERWRITTEN = "StatusOverwritten"  # another writer wrote a restored status once the restore was done
    GATE_NOT_PASSED = "GateNotPassed"  # timed out, or objects of its group failed
    SERVER_CHANGED = "ServerChanged"  # --strict only
    SERVER_WARNED = "ServerWarned"  # --strict only
    MOVE_NOT_VERIFIED = "MoveNotVerified"  # move: the read-back of the target found an object missing or short


@dataclasses.dataclass(frozen=True)
class Finding:
    shortfall: Shortfall
    count: int
    names: tuple[str, ...]  # the first NAMED objects (or gates)
    advice: str

    def line(self) -> str:
        shown = ", ".join(self.names)
        more = f" and {self.count - len(self.names)} more" if self.count > len(self.names) else ""
        return f"{self.count} {_WHAT[self.shortfall]}{f' ({shown}{more})' if shown else ''}"


_WHAT = {
    Shortfall.FAILED_OBJECTS: "object(s) failed",
    Shortfall.WITHOUT_SAVED_STATUS: "object(s) lack their saved status",
    Shortfall.NOT_PAUSED: "object(s) were restored but NOT paused (the server dropped the pause marker)",
    Shortfall.STILL_PAUSED: "object(s) could not be unpaused and stay paused",
    Shortfall.STILL_SCALED_DOWN: "workload(s) scaled to 0 for the restore could not be scaled back",
    Shortfall.STATUS_OVERWRITTEN: "restored status(es) were written again by another writer once the restore was done",
    Shortfall.GATE_NOT_PASSED: "gate(s) did not pass",
    Shortfall.SERVER_CHANGED: "object(s) changed by the server",
    Shortfall.SERVER_WARNED: "object(s) drew server warnings",
    Shortfall.MOVE_NOT_VERIFIED: "object(s) short in the target when it was read back",
}


@dataclasses.dataclass(frozen=True)
class Verdict:
    outcome: RunOutcome
    findings: tuple[Finding, ...] = ()
    why: str = ""  # FAILED: why the run stopped early

    @property
    def exit_status(self) -> ExitStatus:
        return {
            RunOutcome.DONE: ExitStatus.SUCCESS,
            RunOutcome.PARTIAL: ExitStatus.PARTIAL_FAILURE,
            RunOutcome.FAILED: ExitStatus.ERROR,
            RunOutcome.INTERRUPTED: ExitStatus.INTERRUPTED,
        }[self.outcome]

    @property
    def shortfalls(self) -> tuple[Shortfall, ...]:
        return tuple(f.shortfall for f in self.findings)

    def message(self, what: str) -> str:
        """One line: what was short, and what helps."""
        if self.outcome is RunOutcome.FAILED:
            return f"{what} stopped early: {self.why}"
        if self.outcome is RunOutcome.INTERRUPTED:
            return f"{what} was interrupted: run the same command again to resume"
        if not self.findings:
            return f"{what} is done"
        parts = []
        for i, f in enumerate(self.findings):  # an advice shared by the next finding is said once, after it
            last = i + 1 == len(self.findings) or self.findings[i + 1].advice != f.advice
            parts.append(f"{f.line()}: {f.advice}" if last else f.line())
        return f"{what}: " + "; ".join(parts)

    def to_dict(self) -> dict[str, object]:
        return {
            "outcome": str(self.outcome),
            "reasons": [{"reason": str(f.shortfall), "count": f.count, "names": list(f.names)} for f in self.findings],
        }


def verdict(report: RestoreReport, strict: bool = False) -> Verdict:
    """The one rule: interrupted, stopped early, or every shortfall of a run that ended (--strict adds what the
    server changed or warned about)."""
    if report.interrupted:
        return Verdict(RunOutcome.INTERRUPTED)
    if report.aborted:
        return Verdict(RunOutcome.FAILED, why=report.aborted)
    again = "run the same command again to retry only those" if report.dry_run == DryRun.NONE else "see the report"
    findings = [
        _objects(Shortfall.FAILED_OBJECTS, [r.display for r in report.failures], again),
        _objects(
            Shortfall.WITHOUT_SAVED_STATUS,
            report.lacking_named,
            again,
            count=report.lacking_status_count,
        ),
        _objects(
            Shortfall.NOT_PAUSED,
            [r.display for r in report.not_paused],
            "running the same command again will not pause them: use a marker the server keeps next time "
            "(--pause-annotation)",
        ),
        _objects(
            Shortfall.STILL_PAUSED,
            [problem.partition(":")[0] for problem in report.unpause_failures],
            "run `statusvault unpause` once the cause is fixed, or their operator never resumes them",
        ),
        _objects(
            Shortfall.STILL_SCALED_DOWN,
            [problem.partition(":")[0] for problem in report.not_scaled_back],
            "their operators stay stopped: run the same command again (the restore kept their replica counts), or "
            "scale each back to the count its line names",
        ),
        _objects(
            Shortfall.STATUS_OVERWRITTEN,
            report.overwritten.named,
            "an operator acted on them before it saw their status: stop it (--fence auto or --scale-down: the "
            "same restore) and run the same command again to write the saved status back",
            count=report.overwritten.count,
        ),
        _objects(
            Shortfall.GATE_NOT_PASSED,
            [g.name for g in report.gates_not_passed],
            "the groups after it were restored before its group was ready (onTimeout continue)",
        ),
    ]
    if strict:
        strictly = "the report names each (--strict)"
        changed = report.audit  # read on the cluster: whichever run of this restore wrote them, still not kept
        if changed is not None:
            findings.append(_objects(Shortfall.SERVER_CHANGED, changed.server_changed_named, strictly,
                                     count=changed.server_changed))  # fmt: skip
        else:  # a dry run, or a run that stopped before the audit: what its own writes met
            findings.append(_objects(Shortfall.SERVER_CHANGED, [], strictly, count=report.server_changed))
        findings.append(_objects(Shortfall.SERVER_WARNED, [], strictly, count=report.server_warned))
    kept = tuple(f for f in findings if f is not None)
    return Verdict(RunOutcome.PARTIAL if kept else RunOutcome.DONE, kept)


def _objects(shortfall: Shortfall, names: list[str], advice: str, count: int | None = None) -> Finding | None:
    n = len(names) if count is None else count
    return Finding(shortfall, n, tuple(names[:NAMED]), advice) if n else None


def moved(restored: Verdict, verify_problems: list[str]) -> Verdict:
    """A move's verdict: its restore's, and the objects its read-back of the target found missing or short. The
    read-back runs only after a restore that ended with its work complete, so its shortfall adds to a verdict that
    was done or partial."""
    if restored.outcome in (RunOutcome.FAILED, RunOutcome.INTERRUPTED) or not verify_problems:
        return restored
    advice = "the source stays paused: run the same command again, or with --abort to give the source back"
    found = _objects(Shortfall.MOVE_NOT_VERIFIED, verify_problems, advice)
    return Verdict(RunOutcome.PARTIAL, (*restored.findings, *(f for f in (found,) if f is not None)))
