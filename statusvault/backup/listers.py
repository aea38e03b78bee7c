"""LIST streams in worker processes, so one Python process's interpreter lock no longer caps a backup.

A worker process lists a stream page by page, filters it and serializes each object to its archived form
(the CPU of a backup that grows with the objects, apart from the archive's hashing and compression); the
parent takes the finished records up a pipe and writes them to the stream's spool, in the same thread that
would otherwise have listed. The archive, its order and its manifest stay with the parent.

Messages (pickled, one pipe per worker): parent -> worker ("list", stream, page size) | ("stop",);
worker -> parent ("page", [record, ...]) per LIST page, then ("done", None | exception). A worker's send
waits until the parent reads it, so at most one page per worker is in flight: memory stays bounded as
with threads."""

from __future__ import annotations

import contextlib
import dataclasses
import pickle
import queue
from collections.abc import Callable, Iterator
from multiprocessing.connection import Connection
from typing import Any

from statusvault.backup.spools import Record, Spool
from statusvault.errors import StatusVaultError
from statusvault.processes import available_cpus, next_message, spawn, worker_init

MIN_CPUS = 4  # the default: below this many CPUs, processes only add start-up and pickling to a backup
MAX_PROCESSES = 8


def default_list_processes(list_concurrency: int) -> int:
    """Worker processes for a backup by default: half the CPUs this process may use (the other half is left
    to the parent's archiving), at most one per concurrent LIST; none (1: list in threads) below MIN_CPUS."""
    cpus = available_cpus()
    return 1 if cpus < MIN_CPUS else max(1, min(list_concurrency, cpus // 2, MAX_PROCESSES))


@dataclasses.dataclass(frozen=True)
class ListerSpec:
    """How worker processes reach the API server, and how many there are."""

    kubeconfig: str | None
    context: str | None
    processes: int
    log_format: str = ""  # the parent's logging (text|json) and --debug, for the workers' own log lines
    debug: bool = False


Lister = Callable[[Any, Any, int], Iterator[list[Record]]]  # (client, stream, page size) -> pages of records


@dataclasses.dataclass
class _Worker:
    process: Any  # multiprocessing.Process (spawn context)
    conn: Connection


class ListerPool:
    """Worker processes, each listing one stream at a time for whichever parent thread holds it."""

    def __init__(self, spec: ListerSpec, lister: Lister):
        import multiprocessing

        self.ctx = multiprocessing.get_context("spawn")  # the parent runs threads: never fork it
        self.spec = spec
        self.lister = lister
        self._idle: queue.SimpleQueue[_Worker] = queue.SimpleQueue()
        self._broken = ""  # why the pool lists no more: a worker died
        self._workers: list[_Worker] = []
        try:
            for _ in range(max(1, spec.processes)):
                self._workers.append(self._start())
                self._idle.put(self._workers[-1])
        except BaseException:  # a failed start (or Ctrl-C) leaves none running
            self.close()
            raise

    def __enter__(self) -> ListerPool:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def produce(self, stream: Any, page_size: int, spool: Spool) -> None:
        """List `stream` in a worker process into `spool` (a producer of spools.InOrder)."""
        w = self._take(spool)
        with self._alive(w, stream):
            w.conn.send(("list", stream, page_size))
        while True:
            while not w.conn.poll(0.1):  # a stopped backup does not wait for the worker's next page
                spool.check()  # Cancelled: this worker, still listing, is left to close()
            with self._alive(w, stream):
                msg = w.conn.recv()
            if msg[0] == "page":
                spool.put_many(msg[1])
                continue
            self._idle.put(w)
            if msg[1] is not None:
                raise msg[1]
            return

    @contextlib.contextmanager
    def _alive(self, w: _Worker, stream: Any) -> Iterator[None]:
        """A broken pipe is a dead worker: it fails the stream, and the streams still waiting for a worker."""
        try:
            yield
        except (EOFError, OSError) as e:
            w.process.join(1)
            self._broken = (
                f"a LIST worker process stopped (exit code {w.process.exitcode}) while listing {stream.label}"
            )
            raise StatusVaultError(self._broken) from e

    def _take(self, spool: Spool) -> _Worker:
        """An idle worker; raises once the backup has stopped or a worker has died (the backup fails then: a
        stream waiting here must not wait for a worker that will never come back)."""
        while True:
            with contextlib.suppress(queue.Empty):
                return self._idle.get(timeout=0.1)
            spool.check()
            if self._broken:
                raise StatusVaultError(self._broken)

    def close(self) -> None:
        """Stop the workers (once no thread is listing through them): the idle ones are told to exit; one
        still listing belongs to a backup that stopped, and only reads: it is killed."""
        idle: set[int] = set()
        with contextlib.suppress(queue.Empty):
            while True:
                idle.add(id(self._idle.get_nowait()))
        for w in self._workers:
            if id(w) in idle:
                with contextlib.suppress(OSError, ValueError):
                    w.conn.send(("stop",))
            else:
                w.process.kill()
        for w in self._workers:
            w.process.join(10)
            if w.process.is_alive():
                w.process.kill()
                w.process.join()
            w.conn.close()

    def _start(self) -> _Worker:
        return _Worker(*spawn(self.ctx, worker_main, "statusvault-list-worker", self.spec, self.lister))


def worker_main(conn: Connection, spec: ListerSpec, lister: Lister, parent: int) -> None:
    """A worker process: streams from the pipe, listed one at a time, their pages sent back up."""
    worker_init(spec.log_format, spec.debug)
    from statusvault.kube.client import KubeClient
    from statusvault.kube.transport import load_transport

    transport = load_transport(spec.kubeconfig, spec.context, pool_size=4)
    client = KubeClient(transport)
    try:
        while True:
            msg = next_message(conn, parent)
            if msg is None or msg[0] != "list" or not _list(conn, lister, client, msg[1], msg[2]):
                return
    finally:
        transport.close()


def _list(conn: Connection, lister: Lister, client: Any, stream: Any, page_size: int) -> bool:
    """One stream's pages up the pipe, then how it ended; False when the parent is gone. (A backup that
    stops kills the workers still listing: they only read.)"""
    error: BaseException | None = None
    try:
        for records in lister(client, stream, page_size):
            if not _send(conn, ("page", records)):
                return False
    except Exception as e:  # handed to the parent, raised where its records stop
        error = e if _picklable(e) else StatusVaultError(f"{type(e).__name__}: {e}")
    return _send(conn, ("done", error))


def _send(conn: Connection, msg: tuple[Any, ...]) -> bool:
    """False when the parent is gone (only the pipe's own errors count: the lister's are the stream's)."""
    try:
        conn.send(msg)
    except OSError:
        return False
    return True


def _picklable(e: BaseException) -> bool:
    try:
        pickle.loads(pickle.dumps(e))
    except Exception:
        return False
    return True
