"""Per-object restore results and the run's summary."""

from __future__ import annotations

import dataclasses
import json
import tempfile
from collections import Counter
from collections.abc import Iterator
from typing import IO, Any

import orjson

from statusvault.model import display
from statusvault.restore.pausing import unmarked_warning


class Outcome:
    CREATED = "created"
    UPDATED = "updated"
    SKIPPED = "skipped"
    FAILED = "failed"
    WOULD_CREATE = "would-create"
    WOULD_UPDATE = "would-update"


class StatusOutcome:
    WRITTEN = "written"  # via /status, equal to the saved status
    IN_BODY = "in-body"  # no /status subresource: carried by the create/update body
    MISMATCH = "mismatch"  # written, but the server's status differs from the saved one
    FAILED = "failed"
    NOT_NEEDED = "not-needed"  # no saved status, or one statusvault does not restore (a CRD's, a built-in's)
    LEFT_OUT = "left-out"  # a saved status the user asked not to restore
    KEPT = "kept"  # the object existed before the restore and policy none left it as it was
    NOT_WRITTEN = "not-written"  # the object was skipped or failed
    WOULD_WRITE = "would-write"  # dry run


GENERATION_NOTE = "status.observedGeneration"
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
        return d


class RestoreReport:
    """Counts per resource in memory; every per-object result spooled to a temp file, so memory stays flat.

    Only results that need attention (failures, notes) are also kept in memory.
    """

    def __init__(self, backup: str, dry_run: str, warnings: list[str] | None = None):
        self.backup = backup
        self.dry_run = dry_run
        self.warnings = warnings or []
        self.duration = 0.0
        self.interrupted = False
        self.aborted = ""  # why the run stopped early, if it did
        self.resumed = 0  # objects an earlier, interrupted run of the same restore had already restored
        self.unreached = 0  # objects with a saved status that the run stopped before reaching
        self.unpaused = 0  # objects this restore created paused and has unpaused
        self.left_paused = 0  # objects it created paused that stay paused (--keep-paused, or the run failed)
        self.unpause_failures: list[str] = []  # objects it could not unpause (still paused)
        self.total = 0
        self.processes = 0  # worker processes used (0: this process's threads only)
        self.timings: dict[str, float] = {}  # seconds from the restore's start: planned, first object finished
        self.attention: list[ItemResult] = []
        self.table: dict[str, Counter[str]] = {}
        self._spool: IO[bytes] = tempfile.TemporaryFile()  # noqa: SIM115 - closed by close()

    def add(self, r: ItemResult) -> None:
        self.total += 1
        c = self.table.setdefault(r.resource, Counter())
        c[r.outcome] += 1
        c["status:" + r.status] += 1
        if r.paused:
            c["pause:" + ("kept" if r.paused == "kept" else "paused")] += 1
        elif r.unmarked and not c["pause:no-marker"]:  # once per resource type
            self.warnings.append(unmarked_warning(r.resource))
        unchecked = r.outcome == Outcome.WOULD_CREATE and r.status == StatusOutcome.WOULD_WRITE
        if unchecked and self.dry_run == "server" and UNCHECKED_STATUS not in self.warnings:  # once per run
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
        self._spool.write(orjson.dumps(r.to_dict()) + b"\n")

    def results(self) -> Iterator[dict[str, Any]]:
        """Every per-object result, in the order they finished."""
        self._spool.flush()
        self._spool.seek(0)
        for line in self._spool:
            yield orjson.loads(line)
        self._spool.seek(0, 2)

    @property
    def failures(self) -> list[ItemResult]:
        return [r for r in self.attention if r.failed]

    @property
    def missing_status(self) -> list[ItemResult]:
        """The objects this run reached that lack their saved status (see also `unreached`)."""
        return [r for r in self.attention if r.lacks_status]

    @property
    def not_paused(self) -> list[ItemResult]:
        """Objects created without the pause marker asked for (the server dropped it): on the cluster with their
        status, but their operator was free to act on them."""
        return [r for r in self.attention if r.pause_lost]

    @property
    def lacking(self) -> int:
        """Objects in scope without their saved status: reached and lacking it, or never reached."""
        return len(self.missing_status) + self.unreached

    @property
    def succeeded(self) -> bool:
        """The one rule for a successful restore: nothing failed, every saved status in scope is back."""
        problems = self.failures or self.lacking or self.not_paused or self.unpause_failures
        return not (problems or self.aborted or self.interrupted)

    def count_status(self, outcome: str) -> int:
        return sum(c["status:" + outcome] for c in self.table.values())

    def counts(self) -> dict[str, dict[str, int]]:
        """Objects per result and per status outcome; with modifiers, objects modified and rules skipped."""
        out: dict[str, Counter[str]] = {k: Counter() for k in ("results", "status", "modifiers", "pause")}
        sections = {"status": "status", "rules": "modifiers", "pause": "pause"}
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
            "dryRun": self.dry_run,
            "durationSeconds": round(self.duration, 3),
            "interrupted": self.interrupted,
            "resumed": self.resumed,
            "aborted": self.aborted,
            "withoutSavedStatus": self.lacking,
            "unreached": self.unreached,
            "unpaused": self.unpaused,
            "leftPaused": self.left_paused,
            "unpauseFailures": self.unpause_failures,
            "notPaused": len(self.not_paused),
            "summary": self.counts(),
            "warnings": self.warnings,
            "processes": self.processes,
            "timings": {k: round(v, 3) for k, v in self.timings.items()},
        }

    def to_dict(self) -> dict[str, Any]:
        return {**self.header(), "items": list(self.results())}

    def write_json(self, out: IO[str]) -> None:
        """The -o json report, streamed item by item."""
        head = json.dumps(self.header(), indent=2)
        out.write(head[:-2] + ',\n  "items": [')
        for n, item in enumerate(self.results()):
            out.write(("," if n else "") + "\n    " + json.dumps(item))
        out.write("\n  ]\n}\n")

    def close(self) -> None:
        self._spool.close()
