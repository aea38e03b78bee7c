"""Per-object restore results and the run's summary."""

from __future__ import annotations

import dataclasses
from collections import Counter
from typing import Any


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
    NOT_NEEDED = "not-needed"  # no saved status, or status restore is off for this object
    NOT_WRITTEN = "not-written"  # the object was skipped or failed
    WOULD_WRITE = "would-write"  # dry run


STATUS_PROBLEMS = frozenset({StatusOutcome.MISMATCH, StatusOutcome.FAILED})


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

    @property
    def display(self) -> str:
        where = f"{self.namespace}/" if self.namespace else ""
        return f"{self.resource} {where}{self.name}"

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
        return d


@dataclasses.dataclass
class RestoreReport:
    backup: str
    dry_run: str
    results: list[ItemResult] = dataclasses.field(default_factory=list)
    warnings: list[str] = dataclasses.field(default_factory=list)
    duration: float = 0.0
    interrupted: bool = False

    @property
    def failures(self) -> list[ItemResult]:
        return [r for r in self.results if r.failed]

    @property
    def missing_status(self) -> list[ItemResult]:
        return [
            r
            for r in self.results
            if r.status in STATUS_PROBLEMS or (r.outcome == Outcome.FAILED and r.status == StatusOutcome.NOT_WRITTEN)
        ]

    def counts(self) -> dict[str, dict[str, int]]:
        return {
            "results": dict(Counter(r.outcome for r in self.results)),
            "status": dict(Counter(r.status for r in self.results)),
        }

    def by_resource(self) -> list[tuple[str, Counter[str]]]:
        table: dict[str, Counter[str]] = {}
        for r in self.results:
            c = table.setdefault(r.resource, Counter())
            c[r.outcome] += 1
            c["status:" + r.status] += 1
        return sorted(table.items())

    def to_dict(self) -> dict[str, Any]:
        return {
            "backup": self.backup,
            "dryRun": self.dry_run,
            "durationSeconds": round(self.duration, 3),
            "interrupted": self.interrupted,
            "summary": self.counts(),
            "warnings": self.warnings,
            "items": [r.to_dict() for r in self.results],
        }
