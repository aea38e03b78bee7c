"""Per-object restore results and the run's summary."""

from __future__ import annotations

import dataclasses
import enum
import operator
import tempfile
from collections import Counter
from collections.abc import Iterator
from typing import IO, TYPE_CHECKING, Any

import orjson

from statusvault.model import DryRun, display
from statusvault.restore.core.pausemarkers import unmarked_warning
from statusvault.restore.core.settle import Overwritten
from statusvault.transforms import ServerChange

if TYPE_CHECKING:
    from statusvault.restore.ordering.gates import GateResult
    from statusvault.restore.results.audit import Audit


class Outcome(enum.StrEnum):
    """What became of one object."""

    CREATED = "created"
    UPDATED = "updated"
    SKIPPED = "skipped"
    FAILED = "failed"
    WOULD_CREATE = "would-create"
    WOULD_UPDATE = "would-update"


class StatusOutcome(enum.StrEnum):
    """What became of one object's saved status."""

    WRITTEN = "written"  # via /status
    IN_BODY = "in-body"  # no /status subresource: carried by the create/update body
    MISMATCH = "mismatch"  # written, but the server did not keep all of it (the result's server_changes say what)
    FAILED = "failed"
    NOT_NEEDED = "not-needed"  # no saved status, or one statusvault does not restore (a CRD's, a built-in's)
    LEFT_OUT = "left-out"  # a saved status the user asked not to restore
    KEPT = "kept"  # the object existed before the restore and policy none left it as it was
    NOT_WRITTEN = "not-written"  # the object was skipped or failed
    WOULD_WRITE = "would-write"  # dry run


GENERATION_NOTE = "status.observedGeneration"
NAMED = 200  # distinct changes and warnings the summary names; more are counted, not named (memory stays flat)
SHOWN = 20  # objects the server changed or warned about that the text report lists one by one
UNCHECKED_STATUS = (
    "--dry-run server cannot check the saved status of an object it would create (there is no object yet to send "
    "it to through /status): a schema or CEL rule that status breaks shows only in the real run"
)
STATUS_PROBLEMS = frozenset({StatusOutcome.MISMATCH, StatusOutcome.FAILED})
STATUS_BACK = frozenset({StatusOutcome.WRITTEN, StatusOutcome.IN_BODY, StatusOutcome.WOULD_WRITE})


@dataclasses.dataclass(slots=True)
class ItemResult:
    resource: str
    namespace: str
    name: str
    outcome: str
    status: str
    message: str = ""
    notes: tuple[str, ...] = ()
    old_uid: str = ""
    new_uid: str = ""
    diff: tuple[dict[str, Any], ...] = ()  # client dry run: how the live object differs from the backup
    wanted: bool = False  # the backup holds a status this restore must write
    rules: tuple[int, ...] = ()  # modifier rules applied (1-based, file order)
    rules_skipped: tuple[int, ...] = ()  # modifier rules skipped because their `test` failed
    paused: str = ""  # the pause marker it was created with ("kept": paused in the backup already)
    unmarked: bool = False  # --pause auto has no marker for its (custom) resource type: not paused
    pause_lost: str = ""  # created (and its status written) WITHOUT the pause marker: the server dropped it
    server_changes: tuple[ServerChange, ...] = ()  # fields of what was sent that the server dropped or changed
    server_warnings: tuple[str, ...] = ()  # the texts of the Warning headers its writes were answered with
    status_mark: str = ""  # write_mark of the answer to this restore's status write (restore/core/settle.py)

    @property
    def lacks_status(self) -> bool:
        """A saved status that is not on the object, whatever the reason (policy none on a pre-existing
        object and the user's own exclusions are not in `wanted`'s scope, so never counted)."""
        return self.wanted and self.status not in STATUS_BACK

    @property
    def display(self) -> str:
        return display(self.resource, self.namespace, self.name)

    @property
    def failed(self) -> bool:
        return self.outcome == Outcome.FAILED or self.status in STATUS_PROBLEMS

    @property
    def server_changed(self) -> bool:
        """The server changed what was sent or warned about it: reported, a failure only with --strict."""
        return bool(self.server_changes or self.server_warnings)

    def to_dict(self) -> dict[str, Any]:
        d: dict[str, Any] = {
            "resource": self.resource,
            "namespace": self.namespace,
            "name": self.name,
            "result": self.outcome,
            "status": self.status,
        }
        if self.message:
            d["message"] = self.message
        if self.notes:
            d["notes"] = list(self.notes)
        if self.new_uid:
            d["oldUid"], d["newUid"] = self.old_uid, self.new_uid
        if self.diff:
            d["diff"] = list(self.diff)
        if self.paused:
            d["pausedWith"] = self.paused
        if self.pause_lost:
            d["notPaused"] = self.pause_lost
        if self.rules or self.rules_skipped:
            d["modifiers"] = {"applied": list(self.rules), "skippedByTest": list(self.rules_skipped)}
        if self.server_changes:
            d["serverChanges"] = [{"path": c.path, "change": c.how} for c in self.server_changes]
        if self.server_warnings:
            d["serverWarnings"] = list(self.server_warnings)
        return d

    def __reduce__(self) -> tuple[type[ItemResult], tuple[Any, ...]]:
        """Pickled as its fields in order: a worker's results cross by the thousand, and the state functions of a
        slotted dataclass look its fields up again for each one."""
        return ItemResult, _item_fields(self)


_item_fields = operator.attrgetter(*(f.name for f in dataclasses.fields(ItemResult)))


class RestoreReport:
    """Counts per resource in memory; every per-object result spooled to a temp file, so memory stays flat.

    Only results that need attention (failures, notes) are also kept in memory.
    """

    def __init__(self, backup: str, dry_run: DryRun, warnings: list[str] | None = None):
        self.backup = backup
        self.dry_run = dry_run
        self.warnings = warnings or []
        self.dependencies: list[list[str]] = []  # [object, needed by, reference] of each dependency restored
        self.duration = 0.0
        self.interrupted = False
        self.aborted = ""  # why the run stopped early, if it did
        self.resumed = 0  # objects an earlier, interrupted run of the same restore had already restored
        self.unreached = 0  # objects with a saved status that the run stopped before reaching
        self.unpaused = 0  # objects this restore created paused and has unpaused
        self.left_paused = 0  # objects it created paused that stay paused (--keep-paused, or the run failed)
        self.unpause_failures: list[str] = []  # objects it could not unpause (still paused)
        self.not_scaled_back: list[str] = []  # workloads scaled to 0 (--scale-down, --fence), not scaled back
        self.overwritten = Overwritten()  # statuses another writer wrote after this restore's (restore/core/settle.py)
        self.server_away = 0.0  # the longest a request waited for an unavailable API server that came back
        self.audit: Audit | None = None  # what the cluster held once the run ended (restore/results/audit.py)
        self.total = 0
        self.fence: list[str] = []  # the fence plan's lines (--fence): each controller, why, what was done
        self.processes = 0  # worker processes used (0: this process's threads only)
        self.gates: list[GateResult] = []  # --order: each gate between groups, what it waited for and what did not pass
        self.groups: list[dict[str, Any]] = []  # --order: each group, its members' count and its gate
        self.timings: dict[str, float] = {}  # seconds from the restore's start: planned, first object finished
        self.attention: list[ItemResult] = []
        self.table: dict[str, Counter[str]] = {}
        self.changes_named: Counter[tuple[str, str, str]] = Counter()  # (resource, path, how) -> objects
        self.warnings_named: Counter[tuple[str, str]] = Counter()  # (resource, warning) -> objects
        self.unnamed = 0  # changes and warnings past the NAMED distinct ones
        self.server_shown: list[ItemResult] = []  # the first SHOWN objects the server changed or warned about
        self.server_objects = 0  # objects the server changed or warned about
        self._spool: IO[bytes] = tempfile.TemporaryFile()  # noqa: SIM115 - closed by close()

    def add(self, r: ItemResult) -> None:
        self.total += 1
        c = self.table.setdefault(r.resource, Counter())
        c[str(r.outcome)] += 1
        c["status:" + r.status] += 1
        if r.paused:
            c["pause:" + ("kept" if r.paused == "kept" else "paused")] += 1
        elif r.unmarked and not c["pause:no-marker"]:  # once per resource type
            self.warnings.append(unmarked_warning(r.resource))
        unchecked = r.outcome == Outcome.WOULD_CREATE and r.status == StatusOutcome.WOULD_WRITE
        if unchecked and self.dry_run == DryRun.SERVER and UNCHECKED_STATUS not in self.warnings:  # once per run
            self.warnings.append(UNCHECKED_STATUS)
        if r.unmarked:
            c["pause:no-marker"] += 1
        if r.rules:
            c["rules:modified"] += 1
        if r.rules_skipped:
            c["rules:skipped"] += len(r.rules_skipped)
        important = [n for n in r.notes if not n.startswith(GENERATION_NOTE)]
        if len(important) != len(r.notes):
            c["note:generation"] += 1  # expected after any re-create: counted, not listed one by one
        if r.pause_lost:
            c["pause:lost"] += 1
        if r.failed or r.lacks_status or important or r.pause_lost:
            self.attention.append(r)
        if r.server_changed:
            self._add_server(r, c)
        self._spool.write(orjson.dumps(r.to_dict()) + b"\n")

    def _add_server(self, r: ItemResult, c: Counter[str]) -> None:
        """Counted per resource, named per change or warning (up to NAMED), listed for the first SHOWN objects."""
        if r.server_changes:
            c["server:changed"] += 1
        if r.server_warnings:
            c["server:warned"] += 1
        for change in r.server_changes:
            self._name(self.changes_named, (r.resource, change.path, change.how))
        for warning in r.server_warnings:
            self._name(self.warnings_named, (r.resource, warning))
        self.server_objects += 1
        if len(self.server_shown) < SHOWN:
            self.server_shown.append(r)

    def _name(self, named: Counter[Any], key: tuple[str, ...]) -> None:
        if key in named or len(self.changes_named) + len(self.warnings_named) < NAMED:
            named[key] += 1
        else:
            self.unnamed += 1

    def results(self) -> Iterator[dict[str, Any]]:
        """Every per-object result, in the order they finished."""
        return (orjson.loads(line) for line in self.result_lines())

    def result_lines(self) -> Iterator[bytes]:
        """Every per-object result as compact JSON (without its line end), in the order they finished."""
        self._spool.flush()
        self._spool.seek(0)
        for line in self._spool:
            yield line.rstrip(b"\n")
        self._spool.seek(0, 2)

    @property
    def failures(self) -> list[ItemResult]:
        return [r for r in self.attention if r.failed]

    @property
    def lacking_status(self) -> list[ItemResult]:
        """The objects this run reached that lack their saved status (see also `unreached`)."""
        return [r for r in self.attention if r.lacks_status]

    @property
    def not_paused(self) -> list[ItemResult]:
        """Objects created without the pause marker asked for (the server dropped it): on the cluster with their
        status, but their operator was free to act on them."""
        return [r for r in self.attention if r.pause_lost]

    @property
    def lacking_status_count(self) -> int:
        """Objects in scope without their saved status: as the audit found the cluster, once it has read it (this
        run's and every earlier run's objects); else reached and lacking it, or never reached."""
        if self.audit is not None:
            return self.audit.lacking
        return len(self.lacking_status) + self.unreached

    @property
    def lacking_named(self) -> list[str]:
        """The objects without their saved status that the verdict names."""
        if self.audit is not None:
            return self.audit.lacking_named
        return [r.display for r in self.lacking_status]

    @property
    def work_complete(self) -> bool:
        """What the run's own work left: nothing failed, every saved status in scope is back, nothing left paused or
        scaled down. It gates finishing the journal and the unpause; whether the run succeeded is the verdict's to say
        (restore/results/verdict.py), which also counts what the audit and --strict find."""
        problems = (
            self.failures
            or self.lacking_status_count
            or self.not_paused
            or self.unpause_failures
            or self.not_scaled_back
        )
        return not (problems or self.aborted or self.interrupted)

    @property
    def gates_not_passed(self) -> list[GateResult]:
        """Gates that timed out (the run stopped there, or went on as onTimeout continue asked)."""
        from statusvault.restore.ordering.gates import NOT_PASSED  # here: worker processes import this module

        return [g for g in self.gates if g.outcome in NOT_PASSED]

    @property
    def server_changed(self) -> int:
        """Objects with a field the server dropped or changed of what was sent (a pruning schema, a webhook)."""
        return sum(c["server:changed"] for c in self.table.values())

    @property
    def server_warned(self) -> int:
        """Objects whose writes the server answered with a Warning header."""
        return sum(c["server:warned"] for c in self.table.values())

    def count_status(self, outcome: str) -> int:
        return sum(c["status:" + outcome] for c in self.table.values())

    def counts(self) -> dict[str, dict[str, int]]:
        """Objects per result and per status outcome; with modifiers, objects modified and rules skipped."""
        out: dict[str, Counter[str]] = {k: Counter() for k in ("results", "status", "modifiers", "pause", "server")}
        sections = {"status": "status", "rules": "modifiers", "pause": "pause", "server": "server"}
        for c in self.table.values():
            for key, n in c.items():
                kind, _, name = key.partition(":")
                if not name:
                    out["results"][key] += n
                elif kind in sections:
                    out[sections[kind]][name] += n
        return {k: dict(v) for k, v in out.items() if v or k in ("results", "status")}

    def by_resource(self) -> list[tuple[str, Counter[str]]]:
        return sorted(self.table.items())

    def header(self) -> dict[str, Any]:
        return {
            "backup": self.backup,
            "dryRun": str(self.dry_run),
            "durationSeconds": round(self.duration, 3),
            "interrupted": self.interrupted,
            "resumed": self.resumed,
            "aborted": self.aborted,
            "withoutSavedStatus": self.lacking_status_count,
            "unreached": self.unreached,
            "unpaused": self.unpaused,
            "leftPaused": self.left_paused,
            "unpauseFailures": self.unpause_failures,
            "notScaledBack": self.not_scaled_back,
            "statusesOverwritten": {
                "checked": self.overwritten.checked,
                "count": self.overwritten.count,
                "objects": self.overwritten.named,
                "unchecked": self.overwritten.unchecked,
            },
            "notPaused": len(self.not_paused),
            "audit": self.audit.to_dict() if self.audit is not None else None,
            "serverUnavailableSeconds": round(self.server_away, 1),
            "summary": self.counts(),
            "serverChanges": [
                {"resource": res, "path": path, "change": how, "objects": n}
                for (res, path, how), n in sorted(self.changes_named.items(), key=_by_resource)
            ],
            "serverWarnings": [
                {"resource": res, "warning": text, "objects": n}
                for (res, text), n in sorted(self.warnings_named.items(), key=_by_resource)
            ],
            "serverNotNamed": self.unnamed,
            "warnings": self.warnings,
            "dependencies": self.dependencies,
            "fence": self.fence,
            "processes": self.processes,
            "groups": self.groups,
            "gates": [g.to_dict() for g in self.gates],
            "timings": {k: round(v, 3) for k, v in self.timings.items()},
        }

    def to_dict(self) -> dict[str, Any]:
        return {**self.header(), "items": list(self.results())}

    def close(self) -> None:
        self._spool.close()


def _by_resource(entry: tuple[tuple[str, ...], int]) -> tuple[str, int, tuple[str, ...]]:
    """Resource by resource, the most frequent first."""
    key, n = entry
    return key[0], -n, key[1:]
