"""Restore across processes (the one pool, processes/): each worker process has its own connection pool and a
few threads, so one Python process's interpreter lock no longer caps a restore. The parent keeps everything
that must be single: the archive walk, the plan, the order of waves, the report and the journal's `done`
marks. Workers write the journal rows that must precede or follow a write (paused, owners' UIDs at once;
created in batches) themselves: SQLite in WAL mode takes writers from several processes.

A task is one object (its plan item and archived bytes), its result an ItemResult; each wave's discovery is
shared with every worker before the wave's objects. A worker that dies has its objects resent to the one
started in its place (the restore's field manager recognises a create that had already succeeded)."""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from statusvault.errors import StatusVaultError
from statusvault.kube.discovery import Discovery
from statusvault.processes import Emit, Job, WorkerLost, WorkerSettings, available_cpus
from statusvault.processes.pool import WorkerPool
from statusvault.restore.core.plan import PlanItem
from statusvault.restore.results.report import ItemResult, Outcome, StatusOutcome

if TYPE_CHECKING:
    from statusvault.restore.core.journal import Journal
    from statusvault.restore.running.objects import ObjectRestorer

MAX_PROCESSES = 8  # the default's cap: more processes than this only add connections the server must serve
MIN_WAVE = 256  # by default, smaller waves stay in the parent's threads (process start-up is not worth it)
LOST_TRIES = 2  # a worker that dies holding an object: resent to a new worker this often, then a failure
DEPTH = 4  # objects in flight per worker thread
STOP_GRACE = 60.0  # seconds workers have at close to finish the objects they hold


def default_processes() -> int:
    return min(MAX_PROCESSES, available_cpus())


Record = Callable[[ItemResult, PlanItem], None]


class WaveWorkers:
    """A restore's worker processes, fed one object at a time; results come back to `record` in the parent
    (from the pool's reader thread). A parent that dies closes the pipes: its workers finish what they hold
    and exit."""

    def __init__(self, spec: WorkerSettings, journal: Path, opts: Any, record: Record):
        self.record = record
        job = WriteJob(journal, opts)
        self.pool = WorkerPool(spec, job, role="restore", depth=DEPTH, resend=LOST_TRIES, grace=STOP_GRACE)

    def start_wave(self, served: Discovery) -> None:
        """What the next wave is written with (sent again to a worker started later)."""
        self.pool.share(served)

    def submit(self, item: PlanItem, data: bytes | None) -> None:
        self.pool.submit((item, data), functools.partial(self._done, item), batch=True)

    def withdraw(self) -> None:
        """Forget the objects not yet sent (the run stops: a cancel or Ctrl-C means no new object is started);
        the journal has them as not done, so the report counts them as not reached."""
        self.pool.withdraw()

    def drain(self) -> None:
        """Wait until every submitted object has its result."""
        self.pool.drain()

    def close(self) -> None:
        """Let the workers finish what they hold and exit; objects no worker answered for are failures."""
        self.pool.close()

    def _done(self, item: PlanItem, result: ItemResult | None, error: BaseException | None) -> None:
        if result is not None:
            self.record(result, item)
            return
        if isinstance(error, WorkerLost):
            why = f"its worker process died {error.deaths} times (exit code {error.exitcode})"
            why = why if error.deaths else "its worker process stopped before answering"
        else:
            why = str(error) if isinstance(error, StatusVaultError) else f"{type(error).__name__}: {error}"
        self.record(_failed(item, why), item)


def _failed(item: PlanItem, why: str) -> ItemResult:
    return ItemResult(
        item.rt.qualified,
        item.namespace,
        item.name,
        Outcome.FAILED,
        StatusOutcome.NOT_WRITTEN,
        message=why,
        old_uid=item.old_uid,
        wanted=item.status_mode.wanted,
    )


@dataclasses.dataclass(frozen=True)
class WriteJob(Job):
    """A restore's worker: the journal opened in it, and the wave's ObjectRestorer writing each object."""

    journal: Path
    opts: Any

    def open(self, client: Any) -> _Writer:
        from statusvault.restore.core.journal import Journal

        return _Writer(client, Journal.open(self.journal), self.opts)

    def share(self, state: _Writer, value: Discovery) -> None:
        from statusvault.restore.core.servedtypes import ServedTypes
        from statusvault.restore.running.objects import ObjectRestorer

        def fixed() -> Discovery:
            raise StatusVaultError("a restore worker process does not re-read discovery")

        state.restorer = ObjectRestorer(state.client, ServedTypes(value, fixed), state.journal, state.opts)

    def run(self, state: _Writer, task: tuple[PlanItem, bytes | None], emit: Emit) -> ItemResult:
        if state.restorer is None:
            raise StatusVaultError("a restore worker process was sent objects before their wave's discovery")
        return state.restorer.restore(*task)

    def close(self, state: _Writer) -> None:
        state.journal.close()


@dataclasses.dataclass
class _Writer:
    client: Any
    journal: Journal
    opts: Any
    restorer: ObjectRestorer | None = None  # the current wave's
