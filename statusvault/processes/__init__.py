"""The one pool of worker processes under backup's and restore's parallel work. This module holds what the pool
(pool.py, in the parent) and its workers (worker.py) share: the spec, the Job an engine supplies (what a worker
does with one task: backup lists a stream's pages, restore writes an object), how an error crosses, and how many
CPUs there are to use.

Messages (pickled, one pipe per worker): parent -> worker ("share", value) | ("tasks", [(id, task), ...]) |
("stop",); worker -> parent ("ready",) or ("failed", error) once set up, then ("out", [(id, kind, value), ...])
with kind "emit" (a part of a task's output: a LIST page), "done" (its result) or "error" (what it raised).
Tasks and results travel in batches: a pickled message per object each way cost more than the work itself."""

from __future__ import annotations

import dataclasses
import os
import pickle
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from statusvault.errors import StatusVaultError

if TYPE_CHECKING:
    from statusvault.kube.client import KubeClient

BATCH = 16  # tasks (or results) per message at most
RESULT_DELAY = 0.005  # seconds a worker holds a result back for others to travel with it

Emit = Callable[[Any], None]
Done = Callable[[Any, BaseException | None], None]  # (result, None) or (None, error), once per task


@dataclasses.dataclass(frozen=True, kw_only=True)
class WorkerSettings:
    """How worker processes reach the API server, and how many there are."""

    kubeconfig: str | None = None
    context: str | None = None  # pinned by name: a `use-context` during the run cannot point a worker elsewhere
    processes: int = 1
    parallel: int = 1  # tasks at once in each process (its threads)
    qps: float = 0.0  # one budget for all processes together
    burst: int = 100
    min_wave: int = 0  # restore: smaller waves stay in the parent's threads (no process start-up for them)
    log_format: str = ""  # the parent's logging (text|json) and --debug, for the workers' own log lines
    debug: bool = False
    impersonate: str = ""  # the user the parent acts as (the controller: a Restore's ServiceAccount), as workers do


class Job:
    """What an engine runs in the workers (pickled to each when it starts): `run` does one task, on one of the
    worker's threads; `open` and `close` bracket the worker's life; `share` takes a value every worker gets."""

    def open(self, client: KubeClient) -> Any:
        """The worker's state, made once it has its own connection to the API server."""
        return client

    def share(self, state: Any, value: Any) -> None:
        """A value for the tasks sent after it (restore: a wave's discovery, shared once the last wave drained)."""

    def run(self, state: Any, task: Any, emit: Emit) -> Any:
        """One task: `emit` sends a part of its output up at once; what it returns (or raises) ends it."""
        raise NotImplementedError

    def close(self, state: Any) -> None:
        """The worker is exiting."""


class WorkerLost(StatusVaultError):
    """A task's worker process ended before the task did: it died `deaths` times holding it (the last with
    `exitcode`), or (0) the pool was closed first."""

    def __init__(self, message: str, exitcode: int | None, deaths: int):
        super().__init__(message)
        self.exitcode = exitcode
        self.deaths = deaths


def crossable(e: BaseException) -> BaseException:
    """`e` itself if it survives pickling, else its type and message: what a worker raised must reach the parent."""
    try:
        pickle.loads(pickle.dumps(e))
    except Exception:
        return StatusVaultError(f"{type(e).__name__}: {e}")
    return e


def available_cpus() -> int:
    """The CPUs this process may use: its affinity mask, capped by a cgroup v2 (or v1) CPU quota."""
    cpus = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    quota = _cgroup_quota()
    return max(1, min(cpus, int(quota + 0.5)) if quota else cpus)


def _cgroup_quota() -> float | None:
    try:
        raw = Path("/sys/fs/cgroup/cpu.max").read_text().split()
        if raw and raw[0] != "max":
            return int(raw[0]) / int(raw[1])
    except (OSError, ValueError, IndexError):
        pass
    try:
        quota = int(Path("/sys/fs/cgroup/cpu/cpu.cfs_quota_us").read_text())
        period = int(Path("/sys/fs/cgroup/cpu/cpu.cfs_period_us").read_text())
        return quota / period if quota > 0 and period > 0 else None
    except (OSError, ValueError):
        return None
