"""restore/running/threads.py: what the wave's writer threads promise (bounded in flight, drop on error, go on after a
failing task)."""

from __future__ import annotations

import logging
import threading

import pytest

from statusvault.restore.running.threads import WriterThreads


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
    with caplog.at_level(logging.ERROR, logger="statusvault.restore.running.threads"):
        for i in range(3):
            writers.submit(i)
        writers.close()
    assert ran == [1, 2]
    assert "a task failed" in caplog.text
