"""The report's counts: every saved status in scope that is not back is counted, nothing else is."""

from __future__ import annotations

import pytest

from statusvault.restore.results import UNCHECKED_STATUS, ItemResult, Outcome, RestoreReport, StatusOutcome


def result(outcome: str, status: str, wanted: bool, name: str = "a") -> ItemResult:
    return ItemResult("things.x.example.com", "ns", name, outcome, status, wanted=wanted)


@pytest.mark.parametrize(
    ("outcome", "status", "wanted", "lacks"),
    [
        (Outcome.CREATED, StatusOutcome.WRITTEN, True, False),
        (Outcome.CREATED, StatusOutcome.IN_BODY, True, False),
        (Outcome.CREATED, StatusOutcome.MISMATCH, True, True),
        (Outcome.CREATED, StatusOutcome.FAILED, True, True),
        (Outcome.SKIPPED, StatusOutcome.NOT_WRITTEN, True, True),  # someone else created it during the run
        (Outcome.FAILED, StatusOutcome.NOT_WRITTEN, True, True),
        (Outcome.FAILED, StatusOutcome.NOT_WRITTEN, False, False),  # no status in the backup: never counted
        (Outcome.SKIPPED, StatusOutcome.KEPT, False, False),  # existed before the run, policy none
        (Outcome.CREATED, StatusOutcome.LEFT_OUT, False, False),  # the user asked
        (Outcome.WOULD_CREATE, StatusOutcome.WOULD_WRITE, True, False),
    ],
)
def test_lacks_status(outcome, status, wanted, lacks):
    assert result(outcome, status, wanted).lacks_status is lacks


def test_the_summary_never_says_zero_while_a_status_is_missing():
    report = RestoreReport("b", "none")
    report.add(result(Outcome.CREATED, StatusOutcome.WRITTEN, True, "ok"))
    report.add(result(Outcome.SKIPPED, StatusOutcome.NOT_WRITTEN, True, "raced"))
    report.add(result(Outcome.FAILED, StatusOutcome.NOT_WRITTEN, False, "bare"))
    report.unreached = 2
    assert [r.name for r in report.missing_status] == ["raced"]
    assert report.lacking == 3
    assert [r.name for r in report.failures] == ["bare"]
    assert not report.succeeded
    assert report.header()["withoutSavedStatus"] == 3
    report.close()


def test_a_run_that_only_lacks_a_status_has_not_succeeded():
    report = RestoreReport("b", "none")
    report.add(result(Outcome.SKIPPED, StatusOutcome.NOT_WRITTEN, True))
    assert not report.failures and not report.succeeded
    report.close()


def test_kept_and_left_out_are_counted_apart_and_succeed():
    report = RestoreReport("b", "none")
    report.add(result(Outcome.SKIPPED, StatusOutcome.KEPT, False, "k"))
    report.add(result(Outcome.CREATED, StatusOutcome.LEFT_OUT, False, "l"))
    assert report.succeeded and report.lacking == 0
    assert (report.count_status(StatusOutcome.KEPT), report.count_status(StatusOutcome.LEFT_OUT)) == (1, 1)
    report.close()


def test_a_server_dry_run_says_once_that_it_could_not_check_the_statuses_of_objects_it_would_create():
    report = RestoreReport("b", "server")
    report.add(result(Outcome.WOULD_CREATE, StatusOutcome.WOULD_WRITE, True, "new-1"))
    report.add(result(Outcome.WOULD_CREATE, StatusOutcome.WOULD_WRITE, True, "new-2"))
    report.add(result(Outcome.WOULD_UPDATE, StatusOutcome.WOULD_WRITE, True, "checked"))
    assert report.warnings == [UNCHECKED_STATUS]
    report.close()
    client = RestoreReport("b", "client")
    client.add(result(Outcome.WOULD_CREATE, StatusOutcome.WOULD_WRITE, True))
    assert client.warnings == [], "a client dry run checks nothing, and says so already"
    client.close()
