"""The one worker-process pool (real spawned processes; a test job instead of an engine's): results and errors
cross as themselves, a dead worker is replaced (and gets the shared value), workers dying at start-up stop the
pool with a clear error instead of a loop or a hang, and close stops busy workers."""

from __future__ import annotations

import dataclasses
import os
import queue
import signal
import time
from pathlib import Path
from typing import Any

import pytest

from statusvault.errors import ConfigError, KubeApiError, StatusVaultError
from statusvault.processes import Emit, Job, WorkerLost, WorkerSettings
from statusvault.processes import pool as poolmodule
from statusvault.processes.pool import WorkerPool

pytestmark = pytest.mark.timeout(90)  # a pool that hangs fails here, not at the suite's limit


class Unpicklable(Exception):
    def __init__(self, what: str, extra: int):  # pickling passes only args: (what,) -> TypeError on load
        super().__init__(what)
        self.extra = extra


@dataclasses.dataclass(frozen=True)
class ProbeJob(Job):
    """Tasks are tuples: ("pid",), ("shared",), ("emit", n), ("raise", kind), ("die",), ("die-once", path),
    ("sleep", seconds). At start-up it can die, hang or fail."""

    start: str = ""  # "" | die | hang | fail

    def open(self, client: Any) -> dict[str, Any]:
        if self.start == "die":
            os.kill(os.getpid(), signal.SIGKILL)
        if self.start == "hang":
            time.sleep(3600)
        if self.start == "fail":
            raise ConfigError("context 'c' has no cluster")
        return {"shared": None}

    def share(self, state: dict[str, Any], value: Any) -> None:
        state["shared"] = value

    def run(self, state: dict[str, Any], task: tuple[Any, ...], emit: Emit) -> Any:
        what = task[0]
        if what == "emit":
            for i in range(task[1]):
                emit(i)
            return task[1]
        if what == "raise":
            if task[1] == "kube":
                raise KubeApiError.of("widgets.example.com ns/w: forbidden", 403, "Forbidden")
            raise Unpicklable("odd", 1)
        if what == "die" or (what == "die-once" and not Path(task[1]).exists()):
            Path(task[-1]).touch()
            os.kill(os.getpid(), signal.SIGKILL)
        if what == "sleep":
            time.sleep(task[1])
        return state["shared"] if what == "shared" else os.getpid()


def call(pool: WorkerPool, *task: Any, emitted: list[Any] | None = None) -> Any:
    """Run one task and wait for it; raises what ended it."""
    ended: queue.SimpleQueue[tuple[Any, BaseException | None]] = queue.SimpleQueue()
    emit = None if emitted is None else emitted.append
    pool.submit(task, lambda result, error: ended.put((result, error)), emit=emit)
    result, error = ended.get(timeout=60)
    if error is not None:
        raise error
    return result


@pytest.fixture
def one(worker_spec: WorkerSettings) -> WorkerSettings:
    return dataclasses.replace(worker_spec, processes=1)


def test_tasks_run_in_the_workers_and_their_parts_and_results_come_back(worker_spec):
    with WorkerPool(worker_spec, ProbeJob(), role="test") as pool:
        pids = {call(pool, "pid") for _ in range(6)}
        emitted: list[Any] = []
        assert call(pool, "emit", 50, emitted=emitted) == 50
    assert emitted == list(range(50)), "every part, in order, before the result"
    assert os.getpid() not in pids and pids <= {w.process.pid for w in pool.workers}


def test_a_tasks_exception_crosses_as_itself(worker_spec):
    with WorkerPool(worker_spec, ProbeJob(), role="test") as pool:
        with pytest.raises(KubeApiError, match="ns/w: forbidden") as raised:
            call(pool, "raise", "kube")
        assert (raised.value.code, raised.value.reason) == (403, "Forbidden")
        with pytest.raises(StatusVaultError, match="^Unpicklable: odd$"):
            call(pool, "raise", "unpicklable")
        assert call(pool, "pid"), "the worker goes on after a task's error"


def test_a_dead_worker_is_replaced_and_gets_the_shared_value(one, tmp_path):
    """Its task fails with its exit code; the tasks after it run in a new worker, which was sent the value
    shared before it started (a restore's wave discovery) before any task."""
    with WorkerPool(one, ProbeJob(), role="test") as pool:
        pool.share("wave 1")
        first = call(pool, "pid")
        with pytest.raises(WorkerLost, match=r"died 1 times \(exit code -9\)") as lost:
            call(pool, "die", str(tmp_path / "died"))
        assert (lost.value.exitcode, lost.value.deaths) == (-signal.SIGKILL, 1)
        assert call(pool, "shared") == "wave 1"
        assert call(pool, "pid") not in (first, None)


def test_a_task_held_by_a_dead_worker_is_resent_as_often_as_asked(one, tmp_path):
    with WorkerPool(one, ProbeJob(), role="test", resend=1) as pool:
        first = call(pool, "pid")
        survivor = call(pool, "die-once", str(tmp_path / "died"))
    assert (tmp_path / "died").exists() and survivor != first


def test_workers_dying_at_start_up_stop_the_pool_clearly_without_hanging(worker_spec):
    started = time.monotonic()
    with WorkerPool(worker_spec, ProbeJob(start="die"), role="test") as pool:
        with pytest.raises(StatusVaultError, match=r"test worker processes keep dying at start-up \(3 in a row"):
            call(pool, "pid")
        with pytest.raises(StatusVaultError, match="keep dying"):
            pool.drain()
        with pytest.raises(StatusVaultError, match="keep dying"):
            pool.submit(("pid",), lambda result, error: None)
    assert time.monotonic() - started < 60
    assert not any(w.process.is_alive() for w in pool.workers)


def test_a_worker_never_ready_is_stopped_and_counted_as_dying_at_start_up(one, monkeypatch):
    monkeypatch.setattr(poolmodule, "START_TIMEOUT", 0.3)
    with WorkerPool(one, ProbeJob(start="hang"), role="test") as pool, pytest.raises(StatusVaultError, match="keep"):
        call(pool, "pid")


def test_a_worker_that_cannot_set_itself_up_stops_the_pool_with_its_error(worker_spec):
    pool = WorkerPool(worker_spec, ProbeJob(start="fail"), role="test")
    with pool, pytest.raises(ConfigError, match="context 'c' has no cluster"):
        call(pool, "pid")


def test_the_replacements_are_bounded_after_start_up_too(one, monkeypatch, tmp_path):
    monkeypatch.setattr(poolmodule, "REPLACEMENTS", 1)
    with WorkerPool(one, ProbeJob(), role="test") as pool:
        with pytest.raises(WorkerLost):
            call(pool, "die", str(tmp_path / "died"))
        with pytest.raises(StatusVaultError, match=r"died 2 times \(the last with exit code -9\)"):
            call(pool, "die", str(tmp_path / "died"))
        with pytest.raises(StatusVaultError, match="died 2 times"):
            call(pool, "pid")


def test_close_kills_busy_workers_at_once(one):
    pool = WorkerPool(one, ProbeJob(), role="test")
    ended: queue.SimpleQueue[BaseException | None] = queue.SimpleQueue()
    call(pool, "pid")  # ready
    pool.submit(("sleep", 3600), lambda result, error: ended.put(error))
    time.sleep(0.5)
    started = time.monotonic()
    pool.close()
    assert time.monotonic() - started < 5
    assert not any(w.process.is_alive() for w in pool.workers)
    assert isinstance(ended.get(timeout=1), WorkerLost), "the busy worker's task ends: never silence"


def test_close_with_grace_lets_busy_workers_finish(one):
    pool = WorkerPool(one, ProbeJob(), role="test", grace=30)
    ended: queue.SimpleQueue[Any] = queue.SimpleQueue()
    call(pool, "pid")  # ready: the task goes before the stop
    pool.submit(("sleep", 0.3), lambda result, error: ended.put(result or error))
    pool.close()
    assert isinstance(ended.get(timeout=1), int), "its result came back before the worker exited"


def test_a_wait_for_room_stops_when_its_caller_does(one):
    """A task waiting for a worker with room gives up when its `check` raises (a stopped backup's stream)."""

    def stopped() -> None:
        raise KeyboardInterrupt

    with WorkerPool(one, ProbeJob(), role="test") as pool:
        pool.submit(("sleep", 3600), lambda result, error: None)
        with pytest.raises(KeyboardInterrupt):
            pool.submit(("pid",), lambda result, error: None, check=stopped)


def test_a_forgotten_tasks_callbacks_never_run_again(one):
    parts: list[Any] = []
    with WorkerPool(one, ProbeJob(), role="test") as pool:
        task = pool.submit(("emit", 10**6), lambda result, error: parts.append("done"), emit=parts.append)
        while not parts:
            time.sleep(0.01)
        pool.forget(task)
        seen = len(parts)
        time.sleep(0.3)
        assert len(parts) == seen and "done" not in parts


def test_a_ctrl_c_between_submits_leaves_no_task_that_a_drain_waits_on_for_ever(one):
    """Ctrl-C raises in the main thread between any two bytecodes, also in `submit` after a task was counted
    and before it reached the outbox, or amid a send. Sends are the sender thread's (never cut), and withdraw
    takes back every task not yet sent: a drain after it returns with what was sent answered."""
    answered: list[Any] = []
    with WorkerPool(one, ProbeJob(), role="test") as pool:
        call(pool, "pid")  # ready
        sent = pool.submit(("sleep", 0.2), lambda result, error: answered.append(result), batch=False)
        cut = pool.submit(("pid",), lambda result, error: answered.append(result), batch=True)
        (worker,) = pool.workers
        with pool._cond:
            worker.outbox.remove(cut)  # as if the interrupt came between the count and the outbox
        pool.withdraw()
        pool.drain()
    assert sent.ended and cut.ended and len(answered) == 1, "the sent task answered; the cut one withdrawn, never run"
