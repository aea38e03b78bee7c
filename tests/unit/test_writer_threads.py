"""processes/threads.py: what the wave's writer threads promise (bounded in flight, drop on error, go on after a
failing task)."""

from __future__ import annotations

import logging
import threading
import time
from typing import Any

import pytest

from statusvault.processes.threads import WriterThreads


def test_every_task_runs_once_and_close_waits_for_them() -> None:
    done: list[int] = []
    lock = threading.Lock()

    def work(task: int) -> None:
        with lock:
            done.append(task)

    writers = WriterThreads(work, threads=4, bound=8, name="t")
    for i in range(200):
        writers.submit(i)
    writers.close()
    assert sorted(done) == list(range(200))
    assert len(writers._started) == 4


def test_submit_blocks_beyond_the_bound() -> None:
    release = threading.Event()

    def work(task: int) -> None:
        release.wait()

    writers = WriterThreads(work, threads=2, bound=3, name="t")
    for i in range(3):
        writers.submit(i)
    fourth = threading.Thread(target=writers.submit, args=(3,))
    fourth.start()
    fourth.join(0.2)
    assert fourth.is_alive()  # 2 running, 1 queued: the fourth waits for a slot
    release.set()
    fourth.join(5)
    assert not fourth.is_alive()
    writers.close()


def test_close_with_drop_runs_only_what_had_started() -> None:
    started = threading.Event()
    release = threading.Event()
    ran: list[int] = []

    def work(task: int) -> None:
        ran.append(task)
        started.set()
        release.wait()

    writers = WriterThreads(work, threads=1, bound=10, name="t")
    for i in range(5):
        writers.submit(i)
    assert started.wait(5)
    closing = threading.Thread(target=writers.close, kwargs={"drop": True})
    closing.start()
    while not writers._dropping:  # the drop is decided before the running task ends
        closing.join(0.01)
    release.set()
    closing.join(5)
    assert ran == [0]


def test_a_failing_task_is_logged_and_the_thread_goes_on(caplog: pytest.LogCaptureFixture) -> None:
    ran: list[int] = []

    def work(task: int) -> None:
        if task == 0:
            raise ValueError("boom")
        ran.append(task)

    writers = WriterThreads(work, threads=1, bound=2, name="t")
    with caplog.at_level(logging.ERROR, logger="statusvault.processes.threads"):
        for i in range(3):
            writers.submit(i)
        writers.close()
    assert ran == [1, 2]
    assert "a task failed" in caplog.text


def test_the_submitter_is_woken_once_per_half_bound_and_never_exceeds_the_bound() -> None:
    """Slots come back half the bound at a time: the archive walk is woken once per `refill` finished objects,
    not once per object, and what is queued or running never exceeds the bound."""
    bound, tasks = 8, 400
    lock = threading.Lock()
    finished = 0
    in_flight: list[int] = []

    def work(task: int) -> None:
        nonlocal finished
        time.sleep(0.0005)
        with lock:
            finished += 1

    writers = WriterThreads(work, threads=3, bound=bound, name="t")
    waits = 0

    class Counted:  # the returned-slots queue, counting the submitter's waits on it
        def __init__(self, queue: Any) -> None:
            self.queue = queue

        def get(self) -> None:
            nonlocal waits
            waits += 1
            self.queue.get()

        def put(self, item: None) -> None:
            self.queue.put(item)

    writers._returned = Counted(writers._returned)  # type: ignore[assignment]
    for i in range(tasks):
        writers.submit(i)
        with lock:
            in_flight.append(i + 1 - finished)
    writers.close()
    assert finished == tasks
    assert max(in_flight) <= bound
    assert writers.refill == bound // 2
    assert (tasks - bound) / writers.refill <= waits <= (tasks - bound) / writers.refill + 1
