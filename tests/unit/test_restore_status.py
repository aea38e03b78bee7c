"""A Restore's spec as an intent, and its status as kstatus conditions."""

from __future__ import annotations

import pytest

from statusvault.controller.conditions import PENDING, STALLED_AFTER, Reason, conditions, retrying
from statusvault.controller.intent import Phase
from statusvault.controller.restores import flat_status, parse_restore, typed_status
from statusvault.errors import ConfigError


def restore(**spec):
    return {"metadata": {"name": "r", "namespace": "sv", "uid": "u1", "generation": 2}, "spec": spec}


def by_type(conds):
    return {c["type"]: (c["status"], c["reason"]) for c in conds}


@pytest.mark.parametrize(
    ("phase", "reason", "ready", "reconciling", "stalled"),
    [
        (Phase.IN_PROGRESS, Reason.RESTORING, "False", "True", "False"),
        (PENDING, Reason.WAITING_FOR_LEASE, "False", "True", "False"),
        (Phase.COMPLETE, Reason.COMPLETED, "True", "False", "False"),
        (Phase.FAILED, Reason.PARTIALLY_RESTORED, "False", "False", "True"),
        (Phase.FAILED, Reason.BACKUP_NOT_FOUND, "False", "False", "True"),
        (Phase.INVALID, Reason.INVALID_SPEC, "False", "False", "True"),
    ],
)
def test_conditions_follow_kstatus(phase, reason, ready, reconciling, stalled):
    conds = conditions(phase, reason, "m", 3, "2026-11-25T12:00:00Z", [])
    assert by_type(conds) == {"Ready": (ready, reason), "Reconciling": (reconciling, reason),
                              "Stalled": (stalled, reason)}  # fmt: skip
    assert {c["observedGeneration"] for c in conds} == {3}


@pytest.mark.parametrize(
    ("reason", "attempts", "due", "expected"),
    [
        (Reason.INTERRUPTED, 9, "T", True),  # resumed at once, however often
        (Reason.PARTIALLY_RESTORED, 1, "T", True),  # its backoff runs: it tries again by itself
        (Reason.FAILED, STALLED_AFTER - 1, "T", True),
        (Reason.PARTIALLY_RESTORED, STALLED_AFTER, "T", False),  # failed as often: a person must look
        (Reason.BACKUP_NOT_FOUND, STALLED_AFTER + 4, "T", False),
        (Reason.PARTIALLY_RESTORED, 1, "", False),  # no retry due
    ],
)
def test_a_failed_run_the_controller_retries_by_itself_is_reconciling_not_stalled(reason, attempts, due, expected):
    flat = {"phase": Phase.FAILED, "reason": reason, "attempts": str(attempts), "nextAttemptAt": due}
    assert retrying(flat) is expected
    conds = by_type(conditions(Phase.FAILED, reason, "m", 1, "T", [], retrying(flat)))
    assert conds["Ready"] == ("False", reason), "never Ready"
    assert (conds["Reconciling"][0], conds["Stalled"][0]) == (("True", "False") if expected else ("False", "True"))
    assert not retrying({**flat, "phase": Phase.INVALID}), "an invalid spec waits for a person"


def test_a_condition_keeps_its_transition_time_while_its_status_holds():
    first = conditions(Phase.IN_PROGRESS, Reason.RESTORING, "", 1, "T1", [])
    second = {c["type"]: c for c in conditions(Phase.FAILED, Reason.PARTIALLY_RESTORED, "", 1, "T2", first)}
    assert second["Ready"]["lastTransitionTime"] == "T1", "False before and after"
    assert second["Stalled"]["lastTransitionTime"] == "T2" and second["Reconciling"]["lastTransitionTime"] == "T2"


def test_a_spec_is_an_intent_with_the_options_by_their_long_names():
    intent = parse_restore(
        restore(
            backup="nightly",
            namespace=["a", "b"],
            name=["x"],
            parallel=4,
            **{"no-status": True, "existing-resource-policy": "update", "modifiers": "mods"},
        )
    )
    assert (intent.backup, intent.parallel, intent.processes, intent.modifiers) == ("nightly", 4, 0, "mods")
    assert intent.options.selection.namespaces == ("a", "b") and intent.options.selection.names == ("x",)
    assert intent.options.no_status and intent.options.existing_policy == "update"
    assert intent.digest != parse_restore(restore(backup="nightly")).digest


@pytest.mark.parametrize(("spec", "stream"), [({}, None), ({"stream": True}, True), ({"stream": False}, False)])
def test_spec_stream_reaches_the_restore_and_absent_leaves_it_to_the_backups_size(spec, stream):
    assert parse_restore(restore(backup="nightly", **spec)).stream is stream


@pytest.mark.parametrize(
    ("spec", "error"),
    [
        ({}, "spec.backup is missing"),
        ({"backup": "b", "no-status": True, "status-exclude-resources": ["x"]}, "cannot be combined"),
        ({"backup": "b", "namespace-mapping": ["nocolon"]}, "expected OLD:NEW"),
    ],
)
def test_a_spec_the_schema_let_through_is_still_checked(spec, error):
    with pytest.raises(ConfigError, match=error):
        parse_restore(restore(**spec))


def test_status_round_trips_through_the_flat_record():
    status = {"phase": "Complete", "attempts": 2, "withoutStatus": 0, "conditions": [], "unknown": 1}
    assert typed_status(flat_status(status)) == {"phase": "Complete", "attempts": 2, "withoutStatus": 0}
