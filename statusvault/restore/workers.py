"""Restore across processes: each worker process has its own connection pool and a few threads, so one
Python process's interpreter lock no longer caps a restore. The parent keeps everything that must be single:
the archive walk, the plan, the order of waves, the report and the journal's `done` marks. Workers write
the journal rows that must precede or follow a write (paused, owners' UIDs at once; created in batches)
themselves: SQLite in WAL mode takes writers from several processes.

Messages (pickled over one pipe per worker): parent -> worker ("wave", Discovery) | ("items", [(token,
PlanItem, bytes), ...]) | ("stop",); worker -> parent ("results", [(token, ItemResult), ...]). Items and
results travel in batches (up to BATCH, or what a few milliseconds bring): a pickled message per object each
way cost the parent more CPU than the restore's own work."""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import multiprocessing
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from multiprocessing.connection import Connection, wait
from pathlib import Path
from typing import Any

from statusvault.errors import StatusVaultError
from statusvault.kube.discovery import Discovery
from statusvault.processes import available_cpus, next_message, spawn, worker_init
from statusvault.restore.plan import PlanItem
from statusvault.restore.results import ItemResult, Outcome, StatusOutcome
from statusvault.throttle import SharedTokenBucket

log = logging.getLogger(__name__)

MAX_PROCESSES = 8  # the default's cap: more processes than this only add connections the server must serve
MIN_WAVE = 256  # by default, smaller waves stay in the parent's threads (process start-up is not worth it)
LOST_TRIES = 2  # a worker that dies holding an object: resent to a new worker this often, then a failure
BATCH = 16  # objects (or results) per message at most
RESULT_DELAY = 0.005  # seconds a worker holds a result back for others to travel with it


def default_processes() -> int:
    return min(MAX_PROCESSES, available_cpus())


@dataclasses.dataclass(frozen=True, kw_only=True)
class WorkerSpec:
    """How worker processes reach the API server, and how many there are."""

    kubeconfig: str | None = None
    context: str | None = None
    processes: int = 1
    parallel: int = 16  # threads per process
    qps: float = 0.0  # one budget for all processes together
    burst: int = 100
    min_wave: int = MIN_WAVE  # smaller waves stay in the parent's threads (no process start-up for them)
    log_format: str = ""  # the parent's logging (text|json) and --debug, for the workers' own log lines
    debug: bool = False


Record = Callable[[ItemResult, PlanItem], None]


@dataclasses.dataclass
class _Worker:
    process: Any  # multiprocessing.Process (spawn context)
    conn: Connection
    send_lock: threading.Lock
    tokens: set[int] = dataclasses.field(default_factory=set)  # objects it holds (sent, or in its outbox)
    outbox: list[tuple[int, PlanItem, bytes | None]] = dataclasses.field(default_factory=list)  # not yet sent


class ProcessPool:
    """Worker processes fed one object at a time; results come back to `record` in the parent (from one
    collector thread). A worker that dies has its objects resent to a new one (the restore's field manager
    recognises a create that had already succeeded); a parent that dies closes the pipes and its workers
    finish what they hold and exit."""

    def __init__(self, spec: WorkerSpec, journal: Path, opts: Any, record: Record):
        self.spec = spec
        self.journal = journal
        self.opts = opts
        self.record = record
        self.ctx = multiprocessing.get_context("spawn")  # the parent runs threads: never fork it
        self.bucket = SharedTokenBucket(spec.qps, spec.burst, self.ctx)
        self.slots = threading.BoundedSemaphore(max(1, spec.processes * spec.parallel * 4))
        self._lock = threading.Condition()
        self._inflight: dict[int, tuple[PlanItem, bytes | None, int, int]] = {}  # token -> item, data, worker, tries
        self._next = 0
        self._wave: Discovery | None = None
        self._closing = False
        self.workers = [self._start() for _ in range(max(1, spec.processes))]
        self._collector = threading.Thread(target=self._collect, name="restore-results", daemon=True)
        self._collector.start()

    # --- parent side: feeding ---

    def start_wave(self, served: Discovery) -> None:
        """What the next wave is written with (sent again to a worker started later)."""
        self.flush()
        self._wave = served
        for w in self.workers:
            self._send(w, ("wave", served))

    def submit(self, item: PlanItem, data: bytes | None) -> None:
        if not self.slots.acquire(blocking=False):
            self.flush()  # what waits in the outboxes must go before waiting for room
            self.slots.acquire()
        with self._lock:
            self._next += 1
            token = self._next
            index = min(range(len(self.workers)), key=lambda i: len(self.workers[i].tokens))
            self._inflight[token] = (item, data, index, 0)
            w = self.workers[index]
            w.tokens.add(token)
            w.outbox.append((token, item, data))
            batch = self._take_outbox(w) if len(w.outbox) >= BATCH else []
        if batch:
            self._send(w, ("items", batch))

    def flush(self) -> None:
        """Send every outbox's objects now."""
        with self._lock:
            batches = [(w, self._take_outbox(w)) for w in self.workers]
        for w, batch in batches:
            if batch:
                self._send(w, ("items", batch))

    def withdraw(self) -> None:
        """Forget the objects not yet sent (the run stops: a cancel or Ctrl-C means no new object is started);
        the journal has them as not done, so the report counts them as not reached."""
        with self._lock:
            for w in self.workers:
                for token, _, _ in self._take_outbox(w):
                    self._inflight.pop(token, None)
                    w.tokens.discard(token)
                    self.slots.release()
            self._lock.notify_all()

    @staticmethod
    def _take_outbox(w: _Worker) -> list[tuple[int, PlanItem, bytes | None]]:
        batch, w.outbox = w.outbox, []
        return batch

    def drain(self) -> None:
        """Wait until every submitted object has its result."""
        self.flush()
        with self._lock:
            while self._inflight:
                self._lock.wait(0.5)

    def close(self) -> None:
        """Let the workers finish what they hold and exit."""
        self.flush()
        with self._lock:
            self._closing = True
        for w in self.workers:
            self._send(w, ("stop",))  # a dead one is not sent to
        for w in self.workers:
            w.process.join(timeout=60)
            if w.process.is_alive():
                w.process.kill()
                w.process.join()
        self._collector.join(timeout=5)
        self.drain_lost()

    def drain_lost(self) -> None:
        """Objects no worker will answer for any more: failures, never silence."""
        with self._lock:
            lost, self._inflight = self._inflight, {}
        for item, _, _, _ in lost.values():
            self._give_up(item, "its worker process stopped before answering")

    # --- parent side: results and deaths ---

    def _collect(self) -> None:
        while True:
            with self._lock:
                workers = list(self.workers)
                done = self._closing and not any(w.process.is_alive() for w in workers)
            if done:  # what the last ones sent before exiting is still in the pipes
                for w in workers:
                    self._receive(w)
                return
            ready = wait([w.conn for w in workers] + [w.process.sentinel for w in workers], timeout=0.5)
            for i, w in enumerate(workers):
                if w.conn in ready or w.process.sentinel in ready:
                    self._receive(w)
                if w.process.sentinel in ready:  # dead, and all it sent has been read
                    self._replace(i, w)

    def _receive(self, w: _Worker) -> None:
        try:
            while w.conn.poll():
                msg = w.conn.recv()
                if msg[0] == "results":
                    for token, result in msg[1]:
                        self._finish(token, result)
        except (EOFError, OSError):  # it died mid-message: its sentinel tells
            pass

    def _finish(self, token: int, result: ItemResult) -> None:
        with self._lock:
            entry = self._inflight.pop(token, None)
            for w in self.workers:
                w.tokens.discard(token)
            self._lock.notify_all()
        if entry is not None:
            self.slots.release()
            self.record(result, entry[0])

    def _replace(self, index: int, dead: _Worker) -> None:
        """A worker died (kill -9, OOM): start another and resend what it held, a bounded number of times."""
        dead.process.join(1)  # its pipe closes just before it can be reaped: then its exit code is known
        with self._lock:
            if self.workers[index] is not dead or self._closing:
                return
            code = dead.process.exitcode
            log.warning("restore worker process %d died (exit code %s); resending its objects", index, code)
            fresh = self._start()
            self.workers[index] = fresh
            dead.outbox = []  # its unsent objects are among those it held: resent below
            held = [(t, *self._inflight[t]) for t in sorted(dead.tokens) if t in self._inflight]
        if self._wave is not None:
            self._send(fresh, ("wave", self._wave))
        resend = []
        for token, item, data, _, tries in held:
            if tries + 1 > LOST_TRIES:
                with self._lock:
                    self._inflight.pop(token, None)
                    self._lock.notify_all()
                self.slots.release()
                self._give_up(item, f"its worker process died {tries + 1} times (exit code {code})")
                continue
            with self._lock:
                self._inflight[token] = (item, data, index, tries + 1)
                fresh.tokens.add(token)
            resend.append((token, item, data))
        for start in range(0, len(resend), BATCH):
            self._send(fresh, ("items", resend[start : start + BATCH]))

    def _give_up(self, item: PlanItem, why: str) -> None:
        result = ItemResult(
            item.rt.qualified,
            item.namespace,
            item.name,
            Outcome.FAILED,
            StatusOutcome.NOT_WRITTEN,
            message=why,
            old_uid=item.old_uid,
            wanted=item.status_mode.wanted,
        )
        self.record(result, item)

    def _start(self) -> _Worker:
        args = (self.spec, self.journal, self.opts, self.bucket)
        process, conn = spawn(self.ctx, worker_main, "statusvault-restore-worker", *args)
        return _Worker(process, conn, threading.Lock())

    @staticmethod
    def _send(w: _Worker, msg: tuple[Any, ...]) -> None:
        try:
            with w.send_lock:
                w.conn.send(msg)
        except (OSError, ValueError):  # it died: the collector resends what it held
            pass


# --- worker side ---


def worker_main(
    conn: Connection, spec: WorkerSpec, journal_path: Path, opts: Any, bucket: SharedTokenBucket, parent: int
) -> None:
    """A worker process: objects from the pipe through a thread pool of its own, results back up the pipe."""
    worker_init(spec.log_format, spec.debug)
    from statusvault.kube.client import KubeClient
    from statusvault.kube.transport import load_transport
    from statusvault.restore.journal import Journal

    transport = load_transport(spec.kubeconfig, spec.context, pool_size=spec.parallel, bucket=bucket)
    journal = Journal.open(journal_path)
    session = _Session(conn, KubeClient(transport), journal, opts)
    sender = threading.Thread(target=session.send_results, name="restore-results", daemon=True)
    sender.start()
    try:
        with ThreadPoolExecutor(spec.parallel, thread_name_prefix="restore") as pool:
            session.serve(pool, parent)
    finally:  # every object taken has its result (the pool waited for them): send the last, then exit
        session.stop_sending()
        sender.join()
        journal.close()
        transport.close()


class _Session:
    def __init__(self, conn: Connection, client: Any, journal: Any, opts: Any):
        self.conn = conn
        self.client = client
        self.journal = journal
        self.opts = opts
        self.restorer: Any = None
        self._results: list[tuple[int, ItemResult]] = []
        self._ready = threading.Condition()
        self._stopping = False

    def serve(self, pool: ThreadPoolExecutor, parent: int) -> None:
        while True:  # once the parent is gone (or killed): finish what is held, then exit
            msg = next_message(self.conn, parent)
            if msg is None:
                return
            if msg[0] == "wave":
                self.restorer = self._restorer(msg[1])
            elif msg[0] == "items":
                for token, item, data in msg[1]:
                    pool.submit(self._restore, self.restorer, token, item, data)
            else:
                return

    def _restorer(self, discovery: Discovery) -> Any:
        from statusvault.restore.objects import ObjectRestorer
        from statusvault.restore.servedtypes import ServedTypes

        def fixed() -> Discovery:
            raise StatusVaultError("a restore worker process does not re-read discovery")

        return ObjectRestorer(self.client, ServedTypes(discovery, fixed), self.journal, self.opts)

    def _restore(self, restorer: Any, token: int, item: PlanItem, data: bytes | None) -> None:
        result = restorer.restore(item, data)
        with self._ready:
            self._results.append((token, result))
            if len(self._results) in (1, BATCH):  # the sender waits for the first, or for a full batch
                self._ready.notify()

    def send_results(self) -> None:
        """The one thread sending results up: each batch as soon as it is full, or RESULT_DELAY after its first."""
        while True:
            with self._ready:
                while not self._results and not self._stopping:
                    self._ready.wait()
                deadline = time.monotonic() + RESULT_DELAY
                while len(self._results) < BATCH and not self._stopping:
                    left = deadline - time.monotonic()
                    if left <= 0:
                        break
                    self._ready.wait(left)
                batch, self._results = self._results, []
                stopping = self._stopping
            if batch:
                with contextlib.suppress(OSError, ValueError):  # the parent is gone: the journal has what was done
                    self.conn.send(("results", batch))
            elif stopping:
                return

    def stop_sending(self) -> None:
        with self._ready:
            self._stopping = True
            self._ready.notify()
