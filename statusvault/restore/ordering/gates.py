"""Readiness gates between --order groups: wait until every restored object of a group satisfies its gate."""

from __future__ import annotations

import dataclasses
import logging
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

from statusvault.errors import StatusVaultError
from statusvault.kube.api import KubeApi
from statusvault.model import DryRun
from statusvault.restore.core.journal import Journal
from statusvault.restore.core.plan import PlanItem, RestorePlan
from statusvault.restore.ordering.order import Gate, Group, Order
from statusvault.runtime.killpoints import kill_point
from statusvault.runtime.stopping import stop_error

log = logging.getLogger(__name__)

POLL = 0.5  # seconds between two looks at the objects not passed yet
NAMED = 20  # objects a gate's report names; more are counted
LIST_OVER = 20  # objects of one resource in one namespace still to pass: above this, one LIST instead of GETs

PASSED, TIMED_OUT, RESUMED, NOT_WAITED = "passed", "timed-out", "passed-earlier", "not-waited"
NOT_RESTORED = "not-restored"  # objects of its group failed: the gate cannot pass, whatever the others do
NOT_PASSED = frozenset({TIMED_OUT, NOT_RESTORED})


class GateTimeout(StatusVaultError):
    """A gate with onTimeout fail did not pass: the restore stops before the next group."""


@dataclasses.dataclass
class GateResult:
    group: int
    name: str
    gate: str  # what it waits for, in words
    objects: int  # objects it waited on
    outcome: str
    waited: float = 0.0
    not_passed: list[str] = dataclasses.field(default_factory=list)  # "resource ns/name: why", the first NAMED
    not_passed_count: int = 0

    def to_dict(self) -> dict[str, Any]:
        return {
            "group": self.name,
            "gate": self.gate,
            "objects": self.objects,
            "outcome": self.outcome,
            "waitedSeconds": round(self.waited, 3),
            "notPassed": self.not_passed,
            "notPassedCount": self.not_passed_count,
        }

    def line(self) -> str:
        head = f"gate after group {self.name} ({self.gate}): {self.outcome}"
        if self.outcome in (PASSED, TIMED_OUT, NOT_RESTORED):
            head += f" after {self.waited:.1f}s, {self.objects} object(s)"
        elif self.outcome == NOT_WAITED and not self.objects:
            head += ": the group restored no object"
        if self.not_passed_count:
            more = self.not_passed_count - len(self.not_passed)
            head += f"; {self.not_passed_count} did not pass: " + "; ".join(self.not_passed)
            head += f" (and {more} more)" if more > 0 else ""
        return head


def why_not(gate: Gate, obj: dict[str, Any] | None) -> str:
    """ "" when the object satisfies the gate, else why not (in a few words)."""
    if obj is None:
        return "not found"
    if gate.expression is not None:
        return "" if gate.expression.holds(obj) else f"{gate.expression.text} does not hold"
    status: dict[str, Any] = obj["status"] if isinstance(obj.get("status"), dict) else {}
    observed, generation = status.get("observedGeneration"), (obj.get("metadata") or {}).get("generation")
    if observed is not None and generation is not None and observed != generation:
        return f"status.observedGeneration {observed} is not metadata.generation {generation}"
    conditions = {c.get("type"): c for c in status.get("conditions") or () if isinstance(c, dict)}
    if gate.condition != "Current":
        return _condition(conditions.get(gate.condition), gate.condition)
    for kind, bad in (("Stalled", "True"), ("Reconciling", "True"), ("Ready", "False"), ("Ready", "Unknown")):
        if kind in conditions and conditions[kind].get("status") == bad:
            return _said(conditions[kind], kind)
    return ""


def _condition(cond: dict[str, Any] | None, kind: str) -> str:
    if cond is None:
        return f"no {kind} condition"
    return "" if cond.get("status") == "True" else _said(cond, kind)


def _said(cond: dict[str, Any], kind: str) -> str:
    detail = ": ".join(str(cond[k]) for k in ("reason", "message") if cond.get(k))
    return f"{kind} is {cond.get('status')}" + (f" ({detail})" if detail else "")


class GateWaiter:
    """Polls the group's objects (GET each one not passed yet) until all pass or the gate's timeout."""

    def __init__(self, client: KubeApi, target: Callable[[PlanItem], PlanItem], cancel: threading.Event | None):
        self.client = client
        self.target = target  # the item as it is served now
        self.cancel = cancel

    def wait(self, number: int, group: Group, items: list[PlanItem]) -> GateResult:
        gate = group.gate
        assert gate is not None
        started = time.monotonic()
        deadline = started + gate.timeout
        pending = {item.seq: item for item in items}
        reasons: dict[int, str] = {}
        while True:
            for seq, obj in self._look(list(pending.values())):
                why = why_not(gate, obj)
                if why:
                    reasons[seq] = why
                else:
                    del pending[seq]
            if not pending or time.monotonic() >= deadline:
                break
            if self.cancel is not None and self.cancel.wait(POLL):
                raise stop_error(self.cancel)
            if self.cancel is None:
                time.sleep(POLL)
        result = GateResult(number, group.name, gate.describe(), len(items), PASSED if not pending else TIMED_OUT)
        result.waited = time.monotonic() - started
        result.not_passed_count = len(pending)
        result.not_passed = [f"{item.display}: {reasons[seq]}" for seq, item in list(pending.items())[:NAMED]]
        log.info(result.line())
        return result

    def _look(self, items: list[PlanItem]) -> Iterator[tuple[int, dict[str, Any] | None]]:
        """Each item's seq with its live object (None: not found): a GET each, or one LIST of a resource in a namespace
        that holds more than LIST_OVER of them."""
        by_place: dict[tuple[str, str], list[PlanItem]] = {}
        for item in items:
            now = self.target(item)
            by_place.setdefault((now.rt.qualified, now.namespace), []).append(now)
        for (_, ns), group in by_place.items():
            if len(group) <= LIST_OVER:
                for one in group:
                    yield one.seq, self.client.get(one.rt, ns or None, one.name)
                continue
            live = {o["metadata"]["name"]: o for page in self.client.list_pages(group[0].rt, ns or None) for o in page}
            for one in group:
                yield one.seq, live.get(one.name)


class GroupGates:
    """Between --order groups, the gate of each group behind the run, once: a gate the journal has seen passed
    (or timed out with onTimeout continue) is not waited on again; one that times out with fail stops the run."""

    def __init__(self, plan: RestorePlan, journal: Journal, order: Order | None, waiter: GateWaiter, dry_run: DryRun):
        self.plan, self.journal, self.order, self.waiter = plan, journal, order, waiter
        self.dry_run = dry_run
        self.results: list[GateResult] = []
        self._next = 1  # the first group whose gate is not behind the run yet
        self.unpause: Callable[[int], None] = lambda group: None  # before its gate: a group's paused objects

    def before(self, group: int) -> None:
        """Before the first wave of `group`: the gates of every earlier group."""
        if self.order is None:
            return
        while self._next < group and self._next <= len(self.order.groups):
            self._gate(self._next)
            self._next += 1

    def finish(self) -> None:
        """After the last wave: the gates not reached yet (the last group's)."""
        if self.order is not None:
            self.before(len(self.order.groups) + 1)

    def _wait(self, number: int, group: Group) -> GateResult:
        """The gate over what its group restored; objects of the group that failed keep it from passing (their
        dependents would be restored under parents that do not exist)."""
        assert group.gate is not None
        restored = self.plan.restored(number, self.journal.path)
        failed = self.plan.unrestored(number, self.journal.path)
        if not restored and not failed:
            return GateResult(number, group.name, group.gate.describe(), 0, NOT_WAITED)
        result = self.waiter.wait(number, group, restored)
        if failed:
            result.outcome = NOT_RESTORED
            result.objects += len(failed)
            named = [f"{item.display}: not restored (failed)" for item in failed[:NAMED]]
            result.not_passed = (named + result.not_passed)[:NAMED]
            result.not_passed_count += len(failed)
        return result

    def _gate(self, number: int) -> None:
        group = self.order.group(number) if self.order is not None else None
        if group is None or group.gate is None:
            return
        passed = self.journal.gates().get(number)
        if passed is not None:
            outcome = RESUMED if passed[0] == PASSED else f"{passed[0]}-earlier"
            self.results.append(GateResult(number, group.name, group.gate.describe(), 0, outcome, passed[1]))
            return
        if self.dry_run != DryRun.NONE:
            count = self.plan.group_counts().get(number, 0)
            self.results.append(GateResult(number, group.name, group.gate.describe(), count, NOT_WAITED))
            return
        self.unpause(number)  # a paused object's operator could not make it pass
        kill_point("restore.gate-waiting")
        result = self._wait(number, group)
        self.results.append(result)
        if result.outcome in NOT_PASSED and group.gate.on_timeout == "fail":
            raise GateTimeout(result.line())
        self.journal.mark_gate(number, result.outcome, result.waited)
        kill_point("restore.gate-passed")
