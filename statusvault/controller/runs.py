"""One attempt of a declarative restore, around the engine: what it came to (`Run`), stopping it when its
Lease is lost or its Restore deleted, and marking the objects it left without their saved status."""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import threading
from collections.abc import Callable, Iterator

from statusvault.controller.targets import Target
from statusvault.errors import StatusVaultError
from statusvault.kube.api import KubeApi
from statusvault.kube.discovery import Discovery
from statusvault.kube.transport import MERGE_PATCH
from statusvault.restore.results.report import RestoreReport, StatusOutcome
from statusvault.storage.base import ObjectStore
from statusvault.store.backups import BackupStore
from statusvault.transforms import NOT_RESTORED_ANNOTATION as NOT_RESTORED

log = logging.getLogger(__name__)
CHECK_SECONDS = 1.0  # how often a running restore looks whether its Restore still exists
MARKED = 200  # objects annotated per attempt at most (the report names them all)


@dataclasses.dataclass(frozen=True)
class Run:
    ok: bool
    run_wide: bool  # the store or the API server failed: counts towards the circuit breaker
    message: str
    reason: str
    interrupted: bool = False
    counts: dict[str, str] = dataclasses.field(default_factory=dict)


def outcome_counts(report: RestoreReport, paused: bool) -> dict[str, str]:
    """The report's counts as status fields."""
    counts = {
        "objects": report.total,
        "created": report.counts()["results"].get("created", 0),
        "statusWritten": report.count_status(StatusOutcome.WRITTEN) + report.count_status(StatusOutcome.IN_BODY),
        "failed": len(report.failures),
        "withoutStatus": report.lacking_status_count,
        "resumed": report.resumed,
        "processes": report.processes,
    }
    if paused:
        counts.update(unpaused=report.unpaused, leftPaused=report.left_paused)
    return {k: str(v) for k, v in counts.items()}


def save_report(store: ObjectStore, report: RestoreReport, target: Target, digest: str) -> str:
    """Keep the attempt's full report (every object's result) in the store; its location, or "" when the store
    would not take it (the restore's outcome stands either way)."""
    try:
        return BackupStore(store).put_report(target.kind, target.namespace, target.name, digest, report.to_dict())
    except StatusVaultError as e:
        log.warning("could not keep the report of %s: %s", target.describe(), e)
        return ""


@contextlib.contextmanager
def watching_for_deletion(target: Target, cancel: threading.Event) -> Iterator[None]:
    """While inside: set `cancel` (the Event the engine stops on: the Lease's `lost`) once the target is deleted,
    looking every CHECK_SECONDS."""
    done = threading.Event()

    def check() -> None:
        while not done.wait(CHECK_SECONDS) and not cancel.is_set():
            try:
                gone = target.gone()
            except StatusVaultError:  # the API server did not answer: that is not a deletion
                gone = False
            if gone:
                cancel.set()
                return

    threading.Thread(target=check, name="deletion-watch", daemon=True).start()
    try:
        yield
    finally:
        done.set()


def mark_without_status(
    client: KubeApi, discover: Callable[[bool], Discovery], report: RestoreReport, restore: str
) -> int:
    """Annotate each object the restore reached but left without its saved status, naming the restore and the
    reason, where the object's owner looks; returns how many were marked."""
    lacking = report.lacking_status[:MARKED]
    if not lacking:
        return 0
    discovery = discover(False)
    marked = 0
    for r in lacking:
        rt = discovery.by_qualified(r.resource)
        if rt is None:
            continue
        why = r.message or f"status {r.status}"
        patch = {"metadata": {"annotations": {NOT_RESTORED: f"{restore}: {why}"[:1024]}}}
        try:
            client.patch(rt, r.namespace or None, r.name, patch, MERGE_PATCH)
            marked += 1
        except StatusVaultError as e:  # the object may be gone; the report and status still say it
            log.warning("could not annotate %s: %s", r.display, e)
    return marked
