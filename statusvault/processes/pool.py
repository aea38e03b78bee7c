"""The pool's parent side: workers started (spawned, Ctrl-C left to the parent), fed, read, replaced when they
die (a bounded number of times) and stopped. Every wait here ends: on its task's end, or on the pool's error."""

from __future__ import annotations

import dataclasses
import logging
import multiprocessing
import os
import queue
import signal
import threading
import time
from collections.abc import Callable
from multiprocessing.connection import Connection, wait
from typing import Any

from statusvault.errors import StatusVaultError
from statusvault.processes import BATCH, Done, Emit, Job, WorkerLost, WorkerSettings
from statusvault.processes.worker import worker_main
from statusvault.runtime.throttle import SharedTokenBucket

log = logging.getLogger(__name__)

START_TIMEOUT = 60.0  # seconds a worker may take to be ready (spawn, imports, set-up); then it is killed
START_TRIES = 3  # workers dying before they are ready, in a row, that stop the pool
REPLACEMENTS = 4  # per process: deaths the pool replaces in all; the next one stops it
STOP_WAIT = 10.0  # seconds an idle worker has to exit when told, before it is killed


@dataclasses.dataclass(eq=False)
class Task:
    """A task handed to the pool (`forget` takes it back)."""

    id: int
    task: Any
    done: Done
    emit: Emit | None
    sent: bool = False
    tries: int = 0  # deaths of workers it had been sent to
    ended: bool = False  # done was called, or its caller forgot it: nothing more reaches it
    lock: threading.Lock = dataclasses.field(default_factory=threading.Lock)  # held while its callbacks run


@dataclasses.dataclass(eq=False)
class _Worker:
    process: Any  # multiprocessing.Process (spawn context)
    conn: Connection
    started: float
    ready: bool = False
    reaped: bool = False  # its death was seen
    shared: int = 0  # the version of the shared value it was sent
    tasks: dict[int, Task] = dataclasses.field(default_factory=dict)  # held: sent to it, or in its outbox
    outbox: list[Task] = dataclasses.field(default_factory=list)  # not yet sent (it is not ready, or a batch)
    send_lock: threading.Lock = dataclasses.field(default_factory=threading.Lock)


class WorkerPool:
    """`spec.processes` workers, each holding up to `spec.parallel * depth` tasks, the least busy fed first.

    One reader thread hands what comes back to its task's callbacks and starts a worker in place of a dead
    one; a dead worker's sent tasks go to the new one `resend` times at most, then end with WorkerLost. When
    workers keep dying (START_TRIES in a row before they are ready, or more than REPLACEMENTS per process in
    all) or one cannot set itself up, the pool breaks: every open task ends with that error, every wait
    raises it. Tasks are sent to a worker only once it is ready, after the value `share`d last."""

    def __init__(self, spec: WorkerSettings, job: Job, *, role: str, depth: int = 1, resend: int = 0, grace: float = 0):
        self.ctx = multiprocessing.get_context("spawn")  # the parent runs threads: never fork it
        self.spec, self.job, self.role = spec, job, role
        self.capacity = max(1, spec.parallel) * max(1, depth)
        self.resend = resend
        self.grace = grace  # seconds busy workers have to finish what they hold at close (0: killed at once)
        self.bucket = SharedTokenBucket(spec.qps, spec.burst, self.ctx)
        self._cond = threading.Condition()
        self._tasks: dict[int, Task] = {}  # not yet ended
        self._next = 0
        self._shared: tuple[int, Any] = (0, None)
        self._broken: BaseException | None = None
        self._closing = False
        self._deaths = 0
        self._start_deaths = 0  # in a row, since a worker was last ready
        self._reader: threading.Thread | None = None
        self.workers: list[_Worker] = []
        # Pipes are written by one sender thread, never by the caller: Ctrl-C raises in the main thread between
        # any two bytecodes, and a send it cut short would lose a batch (or corrupt the pipe) and leave its tasks
        # open for ever.
        self._due: queue.SimpleQueue[tuple[_Worker, tuple[Any, ...] | None] | None] = queue.SimpleQueue()
        self._sender = threading.Thread(target=self._send_loop, name=f"{role}-sender", daemon=True)
        self._sender.start()
        try:
            for _ in range(max(1, spec.processes)):
                self.workers.append(self._start())
        except BaseException:  # a failed start (or Ctrl-C) leaves none running
            self.close()
            raise
        self._reader = threading.Thread(target=self._read, name=f"{role}-workers", daemon=True)
        self._reader.start()

    def __enter__(self) -> WorkerPool:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # --- callers ---

    def submit(
        self,
        task: Any,
        done: Done,
        *,
        emit: Emit | None = None,
        batch: bool = False,
        check: Callable[[], None] | None = None,
    ) -> Task:
        """Hand `task` to the least busy worker, waiting while every one is full (`check`, if given, raises to
        stop waiting); `done` (once) and `emit` are called from the pool's reader thread. With `batch`, it
        waits in an outbox for BATCH others, or `flush`."""
        while True:
            with self._cond:
                w = self._room()
                if w is not None:
                    self._next += 1
                    t = self._tasks[self._next] = w.tasks[self._next] = Task(self._next, task, done, emit)
                    w.outbox.append(t)
                    due = not batch or len(w.outbox) >= BATCH
                    break
            self.flush()  # what waits in the outboxes must go before waiting for room
            if check is not None:
                check()
            with self._cond:
                if self._room() is None:
                    self._cond.wait(0.1)
        if due:
            self._send(w)
        return t

    def _room(self) -> _Worker | None:
        """The least busy worker, if it has room (under the lock); raises once the pool is broken."""
        if self._broken is not None:
            raise self._broken
        w = min(self.workers, key=lambda w: len(w.tasks))
        return w if len(w.tasks) < self.capacity else None

    def share(self, value: Any) -> None:
        """`value` to every worker before the tasks submitted after it (and to a worker started later)."""
        with self._cond:
            if self._broken is not None:
                raise self._broken
            self._shared = (self._shared[0] + 1, value)
        self.flush()

    def flush(self) -> None:
        """Send what waits in the outboxes (of the workers that are ready; the others' goes once they are)."""
        with self._cond:
            workers = list(self.workers)
        for w in workers:
            self._send(w)

    def withdraw(self) -> None:
        """Forget the tasks not yet sent (a run that stops starts nothing new): their `done` is never called.
        A task counts as sent once the sender took it: the sender is never interrupted, so it reaches its worker."""
        with self._cond:
            for w in self.workers:
                for t in [t for t in w.tasks.values() if not t.sent]:  # in the outbox, or cut short on the way
                    t.ended = True
                    self._tasks.pop(t.id, None)
                    w.tasks.pop(t.id, None)
                w.outbox = []
            self._cond.notify_all()

    def forget(self, t: Task) -> None:
        """No callback of `t` runs once this returns (its caller stopped waiting); a worker still on it goes on
        until the task ends, or until close."""
        with t.lock:
            t.ended = True
        with self._cond:
            self._tasks.pop(t.id, None)
            for w in self.workers:
                if t in w.outbox:
                    w.outbox.remove(t)
                    w.tasks.pop(t.id, None)
            self._cond.notify_all()

    def drain(self) -> None:
        """Wait until every task has ended; raises the pool's error if it broke."""
        self.flush()
        with self._cond:
            while self._tasks:
                self._cond.wait(0.5)
            if self._broken is not None:
                raise self._broken

    def close(self) -> None:
        """Stop the workers: the idle ones are told to exit; busy ones have `grace` seconds to finish what they
        hold, then are killed. A task still open then ends with WorkerLost: never silence."""
        with self._cond:
            if self._closing:
                return
            self._closing = True
            workers = [(w, bool(w.tasks)) for w in self.workers]
        deadline = time.monotonic() + self.grace
        for w, busy in workers:
            if busy and not self.grace:
                w.process.kill()  # (a backup's) busy workers only read: nothing is left half done
            else:  # after what the sender still has for it
                self._due.put((w, ("stop",)))
        for w, _ in workers:
            w.process.join(max(STOP_WAIT, deadline - time.monotonic()))
            if w.process.is_alive():
                w.process.kill()
                w.process.join()
        self._due.put(None)
        self._sender.join(timeout=5)
        if self._reader is not None:
            self._reader.join(timeout=5)
        with self._cond:
            left = list(self._tasks.values())
        for t in left:
            self._end(t, None, WorkerLost(f"its {self.role} worker process stopped before answering", None, 0))
        for w, _ in workers:
            w.conn.close()

    # --- the reader thread: results, readiness, deaths ---

    def _read(self) -> None:
        """The pool's one reader. Whatever goes wrong here breaks the pool, so that nobody waits on it forever."""
        try:
            while self._read_once():
                pass
        except BaseException as e:
            log.debug("the %s pool's reader stopped", self.role, exc_info=True)
            self._break(e if isinstance(e, StatusVaultError) else StatusVaultError(f"{type(e).__name__}: {e}"))

    def _read_once(self) -> bool:
        with self._cond:
            workers = list(self.workers)
            final = self._closing and not any(w.process.is_alive() for w in workers)
        if final:  # what the last ones sent before exiting is still in the pipes
            for w in workers:
                self._receive(w)
            return False
        live = [w for w in workers if not w.reaped]  # a dead one's pipe and sentinel stay ready: never waited on
        ready = wait([w.conn for w in live] + [w.process.sentinel for w in live], timeout=0.5)
        for w in live:
            if w.conn in ready or w.process.sentinel in ready:
                self._receive(w)
            if w.process.sentinel in ready:  # dead, and all it sent has been read
                self._died(w)
            elif not w.ready and time.monotonic() - w.started > START_TIMEOUT:
                log.warning("a %s worker process was not ready after %.0fs: stopped", self.role, START_TIMEOUT)
                w.process.kill()  # its death is seen next time round
        return True

    def _receive(self, w: _Worker) -> None:
        try:
            while w.conn.poll():
                msg = w.conn.recv()
                if msg[0] == "out":
                    for entry in msg[1]:
                        self._deliver(w, *entry)
                elif msg[0] == "ready":
                    with self._cond:
                        w.ready, self._start_deaths = True, 0
                    self._send(w)
                elif msg[0] == "failed":  # it could not set itself up: no other worker will do better
                    self._break(msg[1])
        except (EOFError, OSError):  # it died mid-message: its sentinel tells
            pass

    def _deliver(self, w: _Worker, task_id: int, kind: str, value: Any) -> None:
        with self._cond:
            t = self._tasks.get(task_id)
            if kind != "emit":  # the worker is done with it: room for another
                w.tasks.pop(task_id, None)
                self._cond.notify_all()
        if t is None:
            return
        if kind != "emit":
            self._end(t, value if kind == "done" else None, value if kind == "error" else None)
            return
        try:
            with t.lock:
                if not t.ended and t.emit is not None:
                    t.emit(value)
        except Exception as e:  # its caller takes no more (a stopped backup): that ends the task
            self._end(t, None, e)

    def _end(self, t: Task, result: Any, error: BaseException | None) -> None:
        """`t`'s done, once; only then is it no longer open (a drain returns after its last task's callback)."""
        try:
            with t.lock:
                if not t.ended:
                    t.ended = True
                    t.done(result, error)
        finally:
            with self._cond:
                self._tasks.pop(t.id, None)
                self._cond.notify_all()

    def _died(self, dead: _Worker) -> None:
        """A worker died (kill -9, OOM, at start-up): another takes its place and what it held, within budget."""
        dead.process.join(1)  # its pipe closes just before it can be reaped: then its exit code is known
        code = dead.process.exitcode
        with self._cond:
            dead.reaped = True
            if self._closing or self._broken is not None or dead not in self.workers:
                return
            self._deaths += 1
            self._start_deaths += not dead.ready
        fresh = self._replacement(code)
        if fresh is None:
            return
        log.warning("a %s worker process died (exit code %s); another took its place", self.role, code)
        lost: list[Task] = []
        with self._cond:
            unwanted = self._closing  # closed meanwhile: close() does not know the new one
            if not unwanted:
                self.workers[self.workers.index(dead)] = fresh
                lost = self._hand_over(dead, fresh)
        if unwanted:
            fresh.process.kill()
            fresh.process.join()
            fresh.conn.close()
            return
        for t in lost:
            why = f"its {self.role} worker process died {t.tries} times (exit code {code})"
            self._end(t, None, WorkerLost(why, code, t.tries))

    def _hand_over(self, dead: _Worker, fresh: _Worker) -> list[Task]:
        """The dead worker's tasks to the new one (under the lock); returns those sent too often, now lost."""
        lost: list[Task] = []
        for t in dead.tasks.values():
            t.tries += t.sent
            if t.tries > self.resend:
                lost.append(t)
            elif not t.ended:
                t.sent = False
                fresh.tasks[t.id] = t
                fresh.outbox.append(t)
        self._cond.notify_all()
        return lost

    def _replacement(self, code: int | None) -> _Worker | None:
        """A new worker, unless workers keep dying: then the pool breaks (None)."""
        while True:
            with self._cond:
                why = self._exhausted(code)
            if why:
                self._break(StatusVaultError(why))
                return None
            try:
                return self._start()
            except Exception as e:  # it could not even be started: a death at start-up too
                log.warning("a %s worker process could not be started: %s", self.role, e)
                with self._cond:
                    self._deaths += 1
                    self._start_deaths += 1

    def _exhausted(self, code: int | None) -> str:
        """Why no worker is started any more ("": one is)."""
        advice = "; --processes 1 keeps the work in this process"
        if self._start_deaths >= START_TRIES:
            return (
                f"{self.role} worker processes keep dying at start-up ({self._start_deaths} in a row, the last "
                f"with exit code {code}){advice}"
            )
        if self._deaths > REPLACEMENTS * max(1, self.spec.processes):
            return f"{self.role} worker processes died {self._deaths} times (the last with exit code {code}){advice}"
        return ""

    def _break(self, error: BaseException) -> None:
        """No more tasks: `error` ends every open one, and is raised to whoever waits on the pool."""
        with self._cond:
            if self._broken is None:
                self._broken = error
            for w in self.workers:
                w.outbox = []
            left = list(self._tasks.values())
            self._cond.notify_all()
        for t in left:
            try:
                self._end(t, None, self._broken)
            except Exception:  # the pool is broken already: its first error is the one reported
                log.debug("a task's callback failed after the %s pool broke", self.role, exc_info=True)

    # --- starting and sending ---

    def _start(self) -> _Worker:
        args = (self.spec, self.job, self.bucket)
        return _Worker(*spawn(self.ctx, worker_main, f"statusvault-{self.role}-worker", *args), time.monotonic())

    def _send(self, w: _Worker) -> None:
        """Have the sender send `w` what it is due (a put on a queue: nothing a Ctrl-C can cut in half)."""
        self._due.put((w, None))

    def _send_loop(self) -> None:
        """The sender: each worker's due tasks (None) or one message, in the order they were asked for."""
        while (due := self._due.get()) is not None:
            w, msg = due
            try:
                self._send_now(w) if msg is None else self._post(w, msg)
            except BaseException as e:  # never a silent stop: the pool breaks, and every wait raises it
                log.debug("the %s pool's sender stopped", self.role, exc_info=True)
                self._break(e if isinstance(e, StatusVaultError) else StatusVaultError(f"{type(e).__name__}: {e}"))
                return

    def _send_now(self, w: _Worker) -> None:
        """What `w` is due, once it is ready: the shared value if it changed, then its outbox."""
        with w.send_lock:
            with self._cond:
                if not w.ready or self._broken is not None:
                    return
                version, value = self._shared
                msgs = [("share", value)] if w.shared != version else []
                w.shared = version
                batch, w.outbox = w.outbox, []
                for t in batch:
                    t.sent = True
            chunks = [batch[i : i + BATCH] for i in range(0, len(batch), BATCH)]
            try:
                for msg in msgs:
                    w.conn.send(msg)
                while chunks:
                    w.conn.send(("tasks", [(t.id, t.task) for t in chunks[0]]))
                    chunks.pop(0)
            except (OSError, ValueError):  # it died: the reader hands on what it held (what never went, as unsent)
                with self._cond:
                    for t in (t for chunk in chunks for t in chunk):
                        t.sent = False

    @staticmethod
    def _post(w: _Worker, msg: tuple[Any, ...]) -> None:
        try:
            with w.send_lock:
                w.conn.send(msg)
        except (OSError, ValueError):
            pass


def spawn(ctx: Any, target: Callable[..., None], name: str, *args: Any) -> tuple[Any, Connection]:
    """Start `target(child_conn, *args, parent_pid)` in a spawned daemon process; returns the process and the
    parent's end of the pipe. SIGINT is blocked while it starts, so Ctrl-C stays the parent's to handle."""
    parent, child = ctx.Pipe()
    process = ctx.Process(target=target, args=(child, *args, os.getpid()), name=name, daemon=True)
    old = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})
    try:
        process.start()
    except BaseException:
        parent.close()
        raise
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, old)
        child.close()
    return process, parent
