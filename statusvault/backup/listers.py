"""LIST streams in worker processes (the one pool, processes/), so one Python process's interpreter lock no
longer caps a backup.

A worker lists a stream page by page, filters it and serializes each object to its archived form (the CPU of
a backup that grows with the objects, apart from the archive's hashing and compression); each page comes up
the pipe as the task emits it, into the stream's spool. The archive, its order and its manifest stay with the
parent. A worker's next page waits until its last one has gone up, so memory stays bounded as with threads."""

from __future__ import annotations

import dataclasses
import threading
from collections.abc import Callable, Iterator
from typing import Any

from statusvault.backup.spools import Record, Spool
from statusvault.errors import StatusVaultError
from statusvault.processes import Emit, Job, WorkerLost, available_cpus
from statusvault.processes.pool import WorkerPool

MIN_CPUS = 4  # the default: below this many CPUs, processes only add start-up and pickling to a backup
MAX_PROCESSES = 8

Lister = Callable[[Any, Any, int], Iterator[list[Record]]]  # (client, stream, page size) -> pages of records


def default_list_processes(list_concurrency: int) -> int:
    """Worker processes for a backup by default: half the CPUs this process may use (the other half is left
    to the parent's archiving), at most one per concurrent LIST; none (1: list in threads) below MIN_CPUS."""
    cpus = available_cpus()
    return 1 if cpus < MIN_CPUS else max(1, min(list_concurrency, cpus // 2, MAX_PROCESSES))


@dataclasses.dataclass(frozen=True)
class ListJob(Job):
    """A backup's worker: a task is (stream, page size), its pages emitted as they are listed."""

    lister: Lister

    def run(self, state: Any, task: Any, emit: Emit) -> None:
        stream, page_size = task
        for records in self.lister(state, stream, page_size):
            emit(records)


def list_in_worker(pool: WorkerPool, stream: Any, page_size: int, spool: Spool) -> None:
    """List `stream` in a worker process into `spool` (a producer of spools.InOrder); its error, or the
    worker's death, is raised where its records stop."""
    ended = threading.Event()
    outcome: list[BaseException | None] = []

    def done(result: Any, error: BaseException | None) -> None:
        outcome.append(error)
        ended.set()

    task = pool.submit((stream, page_size), done, emit=spool.put_many, check=spool.check)
    try:
        while not ended.wait(0.1):  # a stopped backup does not wait for the worker's next page
            spool.check()
    finally:
        pool.forget(task)  # Cancelled: the worker, still listing, is killed at the pool's close
    error = outcome[0]
    if isinstance(error, WorkerLost):
        raise StatusVaultError(
            f"a LIST worker process stopped (exit code {error.exitcode}) while listing {stream.label}"
        ) from error
    if error is not None:
        raise error
