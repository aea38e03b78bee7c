"""Threads fed from one queue, in this process: a restore wave's writer threads (each takes objects from the queue and
records their results itself), and a worker process's task threads (statusvault/processes/worker.py).

Not a ThreadPoolExecutor: its Future per object (a Condition, its locks, a done callback), the pure-Python
semaphores that bounded what was in flight and its idle-thread check cost ~15 µs of CPU per object, under the
interpreter lock, for results nobody waits on. Here an object costs a put and a get on a C-level queue.

The submitting thread (a wave's archive walk) is woken by the writers once per half of the bound, not once per
finished task: each wake-up is a hand-off of the interpreter lock, and a thread that waits for one free slot at a
time is woken for every object."""

from __future__ import annotations

import itertools
import logging
import threading
from collections.abc import Callable
from queue import SimpleQueue
from typing import Generic, TypeVar

log = logging.getLogger(__name__)

Task = TypeVar("Task")


class WriterThreads(Generic[Task]):
    """Up to `threads` threads running `work` on each submitted task, at most `bound` tasks queued or running
    (submit blocks beyond that). Threads start as tasks come, so a small wave starts few."""

    def __init__(self, work: Callable[[Task], None], threads: int, bound: int, name: str):
        self.work = work
        self.threads = threads
        self.name = name
        self._tasks: SimpleQueue[Task | None] = SimpleQueue()
        # slots are handed back `refill` at a time: one entry in `_returned` per `refill` tasks finished. The
        # submitter waits only with all `bound` slots taken, when at least `bound` - `refill` + 1 tasks are still
        # queued or running, so the next entry always comes (refill <= bound)
        self.refill = max(1, bound // 2)
        self._credits = bound  # slots the submitter may still take before it waits (only it touches this)
        self._returned: SimpleQueue[None] = SimpleQueue()
        self._finished = itertools.count(1)  # its next() is atomic: the writers count without a lock
        self._started: list[threading.Thread] = []
        self._dropping = False

    def submit(self, task: Task) -> None:
        if not self._credits:
            self._returned.get()
            self._credits = self.refill
        self._credits -= 1
        self._tasks.put(task)  # first: a thread started now finds it at once, as the starting thread waits
        if len(self._started) < self.threads:
            thread = threading.Thread(target=self._run, name=f"{self.name}_{len(self._started)}")
            thread.start()
            self._started.append(thread)

    def close(self, drop: bool = False) -> None:
        """Wait for the threads to finish every task submitted, or with `drop` only those already started
        (the others are neither run nor reported)."""
        self._dropping = drop
        for _ in self._started:
            self._tasks.put(None)
        for thread in self._started:
            thread.join()

    def _run(self) -> None:
        while (task := self._tasks.get()) is not None:
            try:
                if not self._dropping:
                    self.work(task)
            except Exception:  # as ThreadPoolExecutor did with a failing callback: logged, the thread goes on
                log.exception("%s: a task failed", self.name)
            finally:
                if next(self._finished) % self.refill == 0:
                    self._returned.put(None)
