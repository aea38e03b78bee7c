"""The report's counts: every saved status in scope that is not back is counted, nothing else is."""

from __future__ import annotations

import pytest

from statusvault.restore.results.report import (
    NAMED,
    SHOWN,
    UNCHECKED_STATUS,
    ItemResult,
    Outcome,
    RestoreReport,
    StatusOutcome,
)
from statusvault.transforms import PRUNED, ServerChange


def result(outcome: str, status: str, wanted: bool, name: str = "a") -> ItemResult:
    return ItemResult("things.x.example.com", "ns", name, outcome, status, wanted=wanted)


@pytest.mark.parametrize(
    ("outcome", "status", "wanted", "lacks"),
    [
        (Outcome.CREATED, StatusOutcome.WRITTEN, True, False),
        (Outcome.CREATED, StatusOutcome.IN_BODY, True, False),
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
    assert [r.name for r in report.lacking_status] == ["raced"]
    assert report.lacking_status_count == 3
    assert [r.name for r in report.failures] == ["bare"]
    assert not report.work_complete
    assert report.header()["withoutSavedStatus"] == 3
    report.close()


def test_a_run_that_only_lacks_a_status_has_not_succeeded():
    report = RestoreReport("b", "none")
    report.add(result(Outcome.SKIPPED, StatusOutcome.NOT_WRITTEN, True))
    assert not report.failures and not report.work_complete
    report.close()


def test_kept_and_left_out_are_counted_apart_and_succeed():
    report = RestoreReport("b", "none")
    report.add(result(Outcome.SKIPPED, StatusOutcome.KEPT, False, "k"))
    report.add(result(Outcome.CREATED, StatusOutcome.LEFT_OUT, False, "l"))
    assert report.work_complete and report.lacking_status_count == 0
    assert (report.count_status(StatusOutcome.KEPT), report.count_status(StatusOutcome.LEFT_OUT)) == (1, 1)
    report.close()


@pytest.mark.parametrize(
    "status, generation, noted",
    [
        ({"observedGeneration": 1}, 1, False),
        ({"observedGeneration": "1"}, 1, False),  # Argo Rollouts keeps it as a string
        ({"observedGeneration": " 1 "}, 1, False),
        ({"observedGeneration": "5"}, 1, True),
        ({"observedGeneration": 5}, 1, True),
        ({"observedGeneration": "abc"}, 1, True),
        ({"observedGeneration": True}, 1, True),
        ({"phase": "Ready"}, 1, False),
        ("not a dict", 1, False),
        ({"observedGeneration": 1}, None, False),
    ],
)
def test_observed_generation_is_compared_by_value_not_by_type(status, generation, noted):
    from statusvault.restore.running.objects import _generation_notes

    assert bool(_generation_notes(status, generation)) is noted


def changed(name: str, *pruned: str, warnings: tuple[str, ...] = ()) -> ItemResult:
    r = result(Outcome.CREATED, StatusOutcome.WRITTEN, True, name)
    r.server_changes = tuple(ServerChange(path, PRUNED) for path in pruned)
    r.server_warnings = warnings
    return r


def test_what_the_server_changed_is_reported_per_object_and_summed_up_never_a_failure():
    report = RestoreReport("b", "none")
    for r in (
        changed("a", "spec.zone", "status.id"),
        changed("b", "status.id"),
        result(Outcome.CREATED, StatusOutcome.WRITTEN, True, "c"),
        changed("d", warnings=("v1 is deprecated",)),
    ):
        report.add(r)
    assert report.work_complete and not report.attention, "--strict decides, in the CLI"
    assert (report.server_changed, report.server_warned) == (2, 1)
    assert [r.name for r in report.server_shown] == ["a", "b", "d"]
    head = report.header()
    assert [(c["path"], c["objects"]) for c in head["serverChanges"]] == [("status.id", 2), ("spec.zone", 1)]
    assert head["serverWarnings"] == [{"resource": "things.x.example.com", "warning": "v1 is deprecated", "objects": 1}]
    assert head["summary"]["server"] == {"changed": 2, "warned": 1}
    items = {i["name"]: i for i in report.results()}
    assert items["a"]["serverChanges"] == [
        {"path": "spec.zone", "change": "pruned"},
        {"path": "status.id", "change": "pruned"},
    ]
    assert items["d"]["serverWarnings"] == ["v1 is deprecated"] and "serverChanges" not in items["c"]
    report.close()


def test_memory_stays_flat_however_many_objects_the_server_changed():
    report = RestoreReport("b", "none")
    for i in range(NAMED + 50):
        report.add(changed(f"o{i}", f"spec.f{i}", "spec.zone"))
    assert len(report.changes_named) == NAMED and report.unnamed == 50 + 1, "spec.zone kept its place"
    assert report.changes_named[("things.x.example.com", "spec.zone", PRUNED)] == NAMED + 50
    assert len(report.server_shown) == SHOWN and report.server_changed == NAMED + 50
    report.close()


def test_the_text_report_lists_the_first_objects_then_sums_up_per_resource():
    from statusvault.cli.restoreview import render

    report = RestoreReport("b", "none")
    for i in range(SHOWN + 2):
        report.add(changed(f"o{i:02d}", "spec.zone", *(["status.id"] if i % 2 else [])))
    report.add(changed("w", warnings=("v1 is deprecated",)))
    lines = render(report).splitlines()
    assert "changed by the server: things.x.example.com ns/o00: spec.zone pruned" in lines
    assert "changed by the server: things.x.example.com ns/o01: spec.zone pruned, status.id pruned" in lines
    assert "... and 3 more object(s) (-o json lists each)" in lines, "SHOWN objects by name, the rest counted"
    assert "server warning: things.x.example.com ns/w: v1 is deprecated" not in lines, "past SHOWN"
    assert (
        f"things.x.example.com: {SHOWN + 2} object(s) changed by the server: spec.zone pruned ({SHOWN + 2}), "
        f"status.id pruned ({(SHOWN + 2) // 2})"
    ) in lines
    assert "things.x.example.com: 1 object(s) with server warnings: v1 is deprecated (1)" in lines
    assert lines[-1].startswith(f"Restore of b: {SHOWN + 3} objects, 0 failed, 0 without their saved status, ")
    assert f"{SHOWN + 2} changed by the server, 1 with server warnings, in " in lines[-1]
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
