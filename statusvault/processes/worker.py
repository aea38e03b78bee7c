"""A worker process of the pool (pool.py): it sets itself up and says so, runs the tasks it is sent on threads
of its own, and sends what they emit and return back up in batches, from one thread."""

from __future__ import annotations

import contextlib
import functools
import os
import signal
import sys
import threading
import time
from collections.abc import Callable
from multiprocessing.connection import Connection
from typing import TYPE_CHECKING, Any

from statusvault.errors import StatusVaultError
from statusvault.processes import BATCH, RESULT_DELAY, Job, WorkerSettings, crossable
from statusvault.processes.threads import WriterThreads
from statusvault.runtime.throttle import SharedTokenBucket

if TYPE_CHECKING:
    from statusvault.kube.transport import KubeTransport


def worker_main(conn: Connection, spec: WorkerSettings, job: Job, bucket: SharedTokenBucket, parent: int) -> None:
    """A worker process: its own connection to the API server and `job`'s state, then tasks from the pipe on
    `spec.parallel` threads until told to stop, or until the parent is gone (what it holds is finished first)."""
    _init(spec.log_format, spec.debug)
    try:
        transport, state = _setup(spec, job, bucket)
    except Exception as e:  # the parent stops the pool with this error: another worker would meet it too
        _say(conn, ("failed", crossable(e)))
        return
    outbox = _Outbox(conn)
    sender = threading.Thread(target=outbox.run, name="results", daemon=True)
    try:
        if _say(conn, ("ready",)):
            sender.start()
            # the parent bounds what it sends: the threads only take it in turn
            pool = WriterThreads(_call, max(1, spec.parallel), sys.maxsize, "task")
            try:
                _serve(conn, parent, job, state, pool, outbox)
            finally:
                pool.close()
    finally:  # every task taken has ended (the pool waited for them): the last results go, then it exits
        outbox.stop()
        if sender.is_alive():
            sender.join()
        job.close(state)
        transport.close()


def _init(log_format: str, debug: bool) -> None:
    """First thing in a worker: Ctrl-C is ignored (the parent stops it), and it logs as the parent does."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT})
    if log_format:
        from statusvault.runtime.logs import setup_logging

        setup_logging(log_format, debug)


def _setup(spec: WorkerSettings, job: Job, bucket: SharedTokenBucket) -> tuple[KubeTransport, Any]:
    """The worker's own connection to the API server (one QPS budget with the others), then the job's state."""
    from statusvault.kube.client import KubeClient
    from statusvault.kube.transport import load_transport

    transport = load_transport(
        spec.kubeconfig, spec.context, spec.impersonate, pool_size=max(4, spec.parallel), bucket=bucket
    )
    try:
        return transport, job.open(KubeClient(transport))
    except BaseException:
        transport.close()
        raise


def _serve(
    conn: Connection, parent: int, job: Job, state: Any, pool: WriterThreads[Callable[[], None]], outbox: _Outbox
) -> None:
    while True:
        msg = _next_message(conn, parent)
        if msg is None or msg[0] == "stop":
            return
        if msg[0] == "share":
            job.share(state, msg[1])
        else:
            for task_id, task in msg[1]:
                pool.submit(functools.partial(_run, job, state, task_id, task, outbox))


def _next_message(conn: Connection, parent: int) -> Any | None:
    """The parent's next message; None once the parent is gone (its pipe closed, or it was killed)."""
    while True:
        try:
            if conn.poll(1.0):
                return conn.recv()
        except (EOFError, OSError):
            return None
        if os.getppid() != parent:
            return None


def _run(job: Job, state: Any, task_id: int, task: Any, outbox: _Outbox) -> None:
    try:
        result = job.run(state, task, functools.partial(outbox.emit, task_id))
    except _ParentGone:
        return
    except Exception as e:  # it ends the task in the parent, as itself
        outbox.put(task_id, "error", crossable(e))
    else:
        outbox.put(task_id, "done", result)


def _call(task: Callable[[], None]) -> None:
    with contextlib.suppress(BaseException):  # as the executor's Future kept it: its thread goes on
        task()


def _say(conn: Connection, msg: tuple[Any, ...]) -> bool:
    """False when the parent is gone."""
    try:
        conn.send(msg)
    except OSError:
        return False
    return True


class _ParentGone(Exception):
    """Raised in a task that emits once the parent's pipe has broken: the task stops."""


class _Outbox:
    """What the tasks send up, by one thread: in batches of up to BATCH, each at most RESULT_DELAY after its
    first entry. A task's emit waits while its previous one is unsent: what waits for a parent that does not
    read stays about one part per task (a pipe's worth more in the pipe)."""

    def __init__(self, conn: Connection):
        self.conn = conn
        self._entries: list[tuple[int, str, Any]] = []
        self._emitting: set[int] = set()  # tasks with an emit not yet sent
        self._cond = threading.Condition()
        self._stopping = False
        self._gone = False  # the parent's pipe broke

    def put(self, task_id: int, kind: str, value: Any) -> None:
        with self._cond:
            self._entries.append((task_id, kind, value))
            self._cond.notify_all()

    def emit(self, task_id: int, value: Any) -> None:
        with self._cond:
            while task_id in self._emitting and not self._gone:
                self._cond.wait()
            if self._gone:
                raise _ParentGone
            self._emitting.add(task_id)
            self._entries.append((task_id, "emit", value))
            self._cond.notify_all()

    def stop(self) -> None:
        with self._cond:
            self._stopping = True
            self._cond.notify_all()

    def run(self) -> None:
        """The sender thread: each batch as soon as it is full, or RESULT_DELAY after its first entry."""
        while True:
            with self._cond:
                while not self._entries and not self._stopping:
                    self._cond.wait()
                deadline = time.monotonic() + RESULT_DELAY
                while len(self._entries) < BATCH and not self._stopping and deadline > time.monotonic():
                    self._cond.wait(deadline - time.monotonic())
                batch, self._entries = self._entries, []
                stopping = self._stopping
            if batch:
                gone = not self._send(batch)
                with self._cond:
                    self._emitting.difference_update(task_id for task_id, kind, _ in batch if kind == "emit")
                    self._gone = self._gone or gone
                    self._cond.notify_all()
            elif stopping:
                return

    def _send(self, batch: list[tuple[int, str, Any]]) -> bool:
        """False when the parent is gone. An entry that cannot be pickled goes as its task's error instead."""
        try:
            self.conn.send(("out", batch))
        except OSError:
            return False
        except Exception:  # the batch was not written (it is pickled first): its entries one by one
            for task_id, kind, value in batch:
                try:
                    self.conn.send(("out", [(task_id, kind, value)]))
                except OSError:
                    return False
                except Exception as e:
                    error = StatusVaultError(f"a task's {kind} could not be sent up: {type(e).__name__}: {e}")
                    if not _say(self.conn, ("out", [(task_id, "error", error)])):
                        return False
        return True
