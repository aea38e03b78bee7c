"""kstatus conditions (Ready, Reconciling, Stalled) for a Restore, from the phase and reason the controller
records: what `kubectl wait --for=condition=Ready`, Flux health checks and Argo CD read. Pure."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

from statusvault.controller.intent import Phase

PENDING = "Pending"  # a Restore waiting for another replica's Lease (not a phase of intents)


class Reason:
    RESTORING = "Restoring"
    BACKING_UP = "BackingUp"
    BACKUP_FAILED = "BackupFailed"
    WAITING_FOR_LEASE = "WaitingForLease"
    COMPLETED = "Completed"
    PARTIALLY_RESTORED = "PartiallyRestored"  # objects left without their saved status (or failed)
    BACKUP_NOT_FOUND = "BackupNotFound"
    INVALID_SPEC = "InvalidSpec"
    INTERRUPTED = "Interrupted"  # the controller stopped mid-run; resumed at once
    FAILED = "RestoreFailed"


@dataclasses.dataclass(frozen=True)
class State:
    ready: str  # "True" / "False"
    reconciling: bool
    stalled: bool


STALLED_AFTER = 3  # failed attempts in a row after which a Restore the controller retries is Stalled
RETRYING = State("False", True, False)  # failed, and the controller will try again by itself: still progressing

STATES = {
    Phase.IN_PROGRESS: State("False", True, False),
    PENDING: State("False", True, False),
    Phase.COMPLETE: State("True", False, False),
    Phase.FAILED: State("False", False, True),
    Phase.INVALID: State("False", False, True),
}


def conditions(
    phase: str,
    reason: str,
    message: str,
    generation: int,
    now: str,
    previous: list[Mapping[str, Any]],
    retrying: bool = False,
) -> list[dict[str, Any]]:
    """Ready, Reconciling and Stalled for `phase`; a condition whose status did not change keeps its
    lastTransitionTime. Ready is True only for Complete: a restore that left any object without its saved
    status is Failed (reason PartiallyRestored), never Ready. A failed run the controller will retry by itself
    (`retrying`) is Reconciling, not Stalled: kstatus keeps Stalled for what will not progress without a person,
    and Argo CD shows Stalled as Degraded, a Flux health check fails on it."""
    state = RETRYING if retrying and phase == Phase.FAILED else STATES.get(phase, State("Unknown", True, False))
    before = {c.get("type"): c for c in previous}
    wanted = [
        ("Ready", state.ready),
        ("Reconciling", "True" if state.reconciling else "False"),
        ("Stalled", "True" if state.stalled else "False"),
    ]
    out = []
    for kind, status in wanted:
        old = before.get(kind) or {}
        since = old.get("lastTransitionTime") if old.get("status") == status else None
        out.append(
            {
                "type": kind,
                "status": status,
                "reason": reason or phase,
                "message": message[:1024],
                "observedGeneration": generation,
                "lastTransitionTime": since or now,
            }
        )
    return out


def retrying(flat: Mapping[str, str]) -> bool:
    """Whether a failed run's record says the controller tries again by itself: interrupted (resumed at once), or
    a retry due and fewer than STALLED_AFTER attempts failed so far."""
    if flat.get("phase") != Phase.FAILED or not flat.get("nextAttemptAt"):
        return False
    return flat.get("reason") == Reason.INTERRUPTED or int(flat.get("attempts") or 0) < STALLED_AFTER
