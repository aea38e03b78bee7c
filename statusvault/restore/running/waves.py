"""Run one wave: hand each planned item its object's bytes, in archive order, to a bounded worker pool."""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager

from statusvault.archive import ArchiveReader
from statusvault.model import DryRun
from statusvault.processes.threads import WriterThreads
from statusvault.restore.core.plan import Action, Category, PlanItem
from statusvault.restore.results.report import ItemResult
from statusvault.restore.running.objects import Archived, ObjectRestorer, client_dry_run, not_attempted
from statusvault.restore.running.workers import WaveWorkers
from statusvault.runtime.stopping import stop_error

log = logging.getLogger(__name__)
Record = Callable[[ItemResult, PlanItem], None]
Handle = Callable[[PlanItem, Archived], None]
Send = Callable[[PlanItem, bytes | None], None]  # what a wave's archive walk hands on


class WaveRunner:
    """Sends a wave's items through `restorer` with `parallel` workers; `record` gets every result."""

    def __init__(
        self,
        reader: ArchiveReader | None,
        restorer: ObjectRestorer,
        record: Record,
        parallel: int,
        new_namespaces: set[str],
        cancel: threading.Event | None = None,
    ):
        self.reader = reader  # None until a wave is run (a streamed restore writes before it can read again)
        self.restorer = restorer
        self.record = record
        self.parallel = max(1, parallel)
        self.new_namespaces = new_namespaces  # namespaces this restore creates
        self.cancel = cancel  # set from outside (a lost Lease): no new object is started, the run is aborted
        self.dry_run = restorer.opts.dry_run
        self.reads_all = restorer.opts.modifiers is not None or restorer.opts.pause.enabled

    def run(
        self,
        items: Iterator[PlanItem],
        processes: WaveWorkers | None = None,
        scale_up: Callable[[], WaveWorkers] | None = None,
    ) -> None:
        """Restore the items in this process's threads, or in worker processes when `processes` is given; with
        `scale_up`, in threads until this process is CPU-bound (ScaleUp), then the rest in the processes it gives."""
        todo = self._to_write(items)
        if self.dry_run == DryRun.CLIENT:  # previews are read-only GETs, run in order so the plan reads in order
            self._walk(todo, lambda item, data: self.record(self.restorer.restore(item, data), item))
            return
        if processes is None and scale_up is not None:
            with contextlib.ExitStack() as stack:  # unwound last in, first out: the processes' share, then the threads'
                adaptive = ScaleUp(self, scale_up, stack, stack.enter_context(self.threads()))
                self._walk(todo, adaptive.handle)
            return
        if processes is not None:
            with self.in_processes(processes) as submit:
                self._walk(todo, submit)
            return
        with self.threads() as submit:
            self._walk(todo, submit)

    @contextmanager
    def in_processes(self, processes: WaveWorkers) -> Iterator[Send]:
        """A submit function over the worker processes for this wave; leaving waits for what was handed out."""
        processes.start_wave(self.restorer.served.discovery)
        try:
            yield processes.submit
            self._check_cancel()  # set during the wave's tail: what waits in the outboxes is not sent
        except BaseException:
            processes.withdraw()  # objects not yet sent to a worker are not started
            raise
        finally:  # what was handed out is finished (or, for a dead worker, resent) before the next wave
            processes.drain()

    @contextmanager
    def threads(self) -> Iterator[Handle]:
        """A submit function over this process's threads; leaving waits for what was submitted (or, on an error,
        for what runs and drops the rest), then stops the run if it was cancelled."""
        writers = WriterThreads(self._write, self.parallel, self.parallel * 4, "restore")  # in flight: bounded
        try:
            yield lambda item, data: writers.submit((item, data))
        except BaseException:
            writers.close(drop=True)
            raise
        writers.close()
        self._check_cancel()  # objects queued when it was set were not started: the run stops here

    def offer(self, item: PlanItem, data: Archived, handle: Handle) -> None:
        """One item of a streamed restore: written through handle, or reported at once when nothing is to be sent."""
        if item.action in (Action.CREATE, Action.UPDATE):
            self._check_cancel()
            handle(item, data)
        else:
            self.record(not_attempted(item), item)

    def _walk(self, todo: Iterator[PlanItem], handle: Callable[[PlanItem, bytes | None], None]) -> None:
        """Hand each item its object's bytes: the items the plan added first (None), then the archive walked
        once, in step with the items (both are in archive order), so no set of paths is held."""
        nxt = next(todo, None)
        while nxt is not None and not nxt.in_archive:
            self._check_cancel()
            handle(nxt, None)
            nxt = next(todo, None)
        if nxt is None:
            return

        def wanted(path: str) -> bool:
            return nxt is not None and nxt.path == path

        assert self.reader is not None
        for _, data in self.reader.objects(wanted):
            assert nxt is not None
            self._check_cancel()
            handle(nxt, data)
            nxt = next(todo, None)
            if nxt is None:  # the rest of the archive belongs to later waves (planning checked all of it)
                return

    def _to_write(self, items: Iterator[PlanItem]) -> Iterator[PlanItem]:
        """The items to send; the others are reported as they go by."""
        for item in items:
            if self.dry_run == DryRun.CLIENT:
                skipped = (Action.UPDATE, Action.SKIP_EXISTS, Action.SKIP_LACKING)
                if item.in_archive and (self.reads_all or item.action in skipped):
                    yield item  # read from the archive: rules and pause markers, how the live object differs
                else:
                    self.record(client_dry_run(item), item)
            elif self.dry_run == DryRun.SERVER and self._untestable(item):
                note = "not sent: depends on a namespace or CRD this restore creates"
                self.record(client_dry_run(item, note), item)
            elif item.action in (Action.CREATE, Action.UPDATE):
                yield item
            else:
                self.record(not_attempted(item), item)

    def _write(self, task: tuple[PlanItem, Archived]) -> None:
        """An object queued before a cancel is not started after it (not attempted, not recorded)."""
        if self.cancel is not None and self.cancel.is_set():
            return
        item, data = task
        self.record(self.restorer.restore(item, data), item)

    def _check_cancel(self) -> None:
        if self.cancel is not None and self.cancel.is_set():
            raise stop_error(self.cancel)

    def _untestable(self, item: PlanItem) -> bool:
        """In a server dry run, objects in namespaces or of CRDs that the run would create cannot be sent."""
        if item.category == Category.CRD or item.action != Action.CREATE:
            return False
        unserved = not self.restorer.served.serves(item.rt.qualified)
        return unserved or (item.rt.namespaced and item.namespace in self.new_namespaces)


PROBE = 256  # objects between two looks at how busy this process is
CPU_BOUND = 0.85  # of one core: the interpreter is the limit (its lock), not the server's answers


class ScaleUp:
    """A wave that starts in this process's threads and moves to worker processes only when they would raise the
    rate: when this process is CPU-bound (its CPU time over the last PROBE objects at least CPU_BOUND of the wall
    time, all its threads together). When the server is the limit the threads wait on its answers, this process
    stays well below one core, and worker processes would only add CPU per object (measured: 45-75 % more for
    the same rate)."""

    def __init__(
        self, waves: WaveRunner, scale_up: Callable[[], WaveWorkers], stack: contextlib.ExitStack, threads: Handle
    ):
        self.waves, self.scale_up, self.stack, self.threads = waves, scale_up, stack, threads
        self.sent = 0
        self.mark = (time.process_time(), time.monotonic())
        self.submit: Send | None = None  # the processes', once moved

    def handle(self, item: PlanItem, data: bytes | None) -> None:
        if self.submit is not None:
            self.submit(item, data)
            return
        self.threads(item, data)
        self.sent += 1
        if self.sent % PROBE == 0 and self._cpu_bound():
            self._move()

    def _cpu_bound(self) -> bool:
        cpu, wall = time.process_time(), time.monotonic()
        busy = (cpu - self.mark[0]) / max(wall - self.mark[1], 1e-6)
        self.mark = (cpu, wall)
        if busy >= CPU_BOUND:
            log.info("this process is CPU-bound (%.0f%% of a core over %d objects): the rest of the wave goes to "
                     "worker processes", busy * 100, PROBE)  # fmt: skip
            return True
        return False

    def _move(self) -> None:
        """The rest of the wave to the worker processes (started now, or kept from an earlier wave); what the
        threads hold runs to its end beside them."""
        self.submit = self.stack.enter_context(self.waves.in_processes(self.scale_up()))
