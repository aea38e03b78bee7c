"""What a run stopped from outside ends with (runtime/stopping.py), and what an unpause's answer says
(pausemarkers.py)."""

from __future__ import annotations

import json
import signal
import threading

from statusvault.errors import ExitStatus, Interrupted, StatusVaultError
from statusvault.restore.core.pausemarkers import RECORD, still_paused
from statusvault.runtime.stopping import LEASE_LOST, Stop, stop_error


def test_a_signal_interrupts_and_a_lost_lease_cancels():
    stop = Stop()
    stop.signum = signal.SIGTERM
    stopped = stop_error(stop)
    assert isinstance(stopped, Interrupted) and stopped.exit_status == ExitStatus.INTERRUPTED
    assert "SIGTERM" in str(stopped)
    lost = stop_error(threading.Event())
    assert type(lost) is StatusVaultError and str(lost) == LEASE_LOST
    assert type(stop_error(Stop())) is StatusVaultError, "set without a signal: the Lease"


def paused(annotations: dict[str, str], record: dict[str, str] | None) -> dict:
    meta = {"annotations": {**annotations, **({RECORD: json.dumps(record)} if record else {})}}
    return {"metadata": meta, "spec": {}}


ANNOTATION = {"kind": "annotation", "key": "crossplane.io/paused", "was": "absent"}


def test_an_unpause_answered_with_the_marker_back_is_still_paused():
    before = paused({"crossplane.io/paused": "true"}, ANNOTATION)
    assert still_paused(before, paused({"crossplane.io/paused": "true"}, None)), "a webhook put it back"
    assert not still_paused(before, paused({}, None)), "gone, as asked"
    assert not still_paused(paused({}, None), paused({"crossplane.io/paused": "true"}, None)), "not ours: no record"


def test_a_field_marker_is_compared_with_the_value_it_replaced():
    record = {"kind": "field", "key": "/spec/paused", "was": False}
    before = {"metadata": {"annotations": {RECORD: json.dumps(record)}}, "spec": {"paused": True}}
    assert still_paused(before, {"metadata": {}, "spec": {"paused": True}})
    assert not still_paused(before, {"metadata": {}, "spec": {"paused": False}})
