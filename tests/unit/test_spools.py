"""Producers run at once, records read back in the producers' order, errors where they happened."""

from __future__ import annotations

import gc
import threading
import time
import weakref

import pytest

from statusvault.backup.spools import Cancelled, InOrder, Spool


def producer(tag: str, n: int, delay: float = 0.0, fail_at: int | None = None):
    def produce(spool: Spool) -> None:
        for i in range(n):
            if fail_at == i:
                raise RuntimeError(f"{tag} failed at {i}")
            time.sleep(delay)
            spool.put_many([(f"{tag}/{i}", f"data-{tag}-{i}".encode() * (i + 1), i % 4)])

    return produce


@pytest.mark.parametrize("concurrency", [1, 2, 5])
def test_records_come_back_in_producer_order_whatever_finishes_first(concurrency):
    specs = [("slow", 20, 0.002), ("fast", 50, 0.0), ("empty", 0, 0.0), ("mid", 30, 0.001)]
    with InOrder([producer(t, n, d) for t, n, d in specs], concurrency) as streams:
        got = [list(records) for records in streams]
    assert [len(g) for g in got] == [20, 50, 0, 30]
    for (tag, n, _), records in zip(specs, got, strict=True):
        assert records == [(f"{tag}/{i}", f"data-{tag}-{i}".encode() * (i + 1), i % 4) for i in range(n)]


def test_a_producer_error_is_raised_where_its_records_stop():
    seen = []
    with InOrder([producer("a", 3), producer("b", 10, fail_at=4), producer("c", 3)], 3) as ordered:
        streams = iter(ordered)
        assert len(list(next(streams))) == 3
        with pytest.raises(RuntimeError, match="b failed at 4"):
            for name, _, _ in next(streams):
                seen.append(name)
    assert seen == [f"b/{i}" for i in range(4)]


def test_running_ahead_is_bounded_by_the_concurrency():
    started: list[str] = []
    lock = threading.Lock()

    def tracked(tag: str):
        def produce(spool: Spool) -> None:
            with lock:
                started.append(tag)
            spool.put_many([(tag, b"x", 0)])

        return produce

    with InOrder([tracked(str(i)) for i in range(6)], 2) as ordered:
        streams = iter(ordered)
        first = next(streams)
        time.sleep(0.1)
        assert sorted(started) == ["0", "1"], "only two producers may run before the first is read"
        assert list(first) == [("0", b"x", 0)]
        assert sum(len(list(r)) for r in streams) == 5


def test_a_consumer_that_stops_early_stops_the_producers():
    puts = {"n": 0}

    def endless(spool: Spool) -> None:
        while True:
            spool.put_many([("x", b"y", 0)])
            puts["n"] += 1

    with InOrder([producer("a", 1), endless], 2) as ordered:
        list(next(iter(ordered)))
    # leaving the block (what a failed archive write does) has stopped and waited for the producers
    after = puts["n"]
    time.sleep(0.05)
    assert puts["n"] == after, "the endless producer was stopped"


def test_pages_and_records_larger_than_one_read_come_back_whole(monkeypatch):
    import statusvault.backup.spools as spools

    monkeypatch.setattr(spools, "READ_CHUNK", 64)
    pages = [[(f"p{p}/{i}", bytes([p + i]) * (i * 37), i % 3) for i in range(5)] for p in range(4)]

    def produce(spool: Spool) -> None:
        for page in pages:
            spool.put_many(page)
        spool.put_many([])

    with InOrder([produce], 1) as streams:
        got = [list(records) for records in streams]
    assert got == [[r for page in pages for r in page]]


def test_dropping_a_reader_mid_way_never_waits_for_its_producers():
    """A reader abandoned in a reference cycle is finalized by the garbage collector at an arbitrary point
    of an arbitrary thread; a finalizer that joins the producers there can hang the process (seen in CI:
    the interpreter's own thread-bookkeeping lock, taken twice). Dropping one only tells them to stop."""
    release = threading.Event()
    stopped = threading.Event()

    def blocked(spool: Spool) -> None:
        spool.put_many([("b", b"1", 0)])
        release.wait(10)
        try:
            spool.put_many([("b", b"2", 0)])
        except Cancelled:
            stopped.set()
            raise

    ordered = InOrder([producer("a", 1), blocked], 2)
    streams = iter(ordered)
    list(next(streams))
    cycle: list[object] = [ordered, streams]
    cycle.append(cycle)
    dropped = weakref.ref(ordered)
    del ordered, streams, cycle

    def collect() -> None:
        # gc.collect() returns at once, collecting nothing, while another thread's collection is under way (an
        # automatic one, in a process of many threads): collect until the reader is gone, as the collector will
        deadline = time.monotonic() + 4  # within the 5 s below: a finalizer that waits for the producer fails
        while dropped() is not None and time.monotonic() < deadline:
            gc.collect()
            time.sleep(0.01)

    collector = threading.Thread(target=collect)
    collector.start()
    collector.join(5)
    release.set()
    assert not collector.is_alive(), "collecting the dropped reader waited for a producer"
    assert dropped() is None, "the dropped reader was never collected"
    assert stopped.wait(5), "the producer was told to stop at its next record"
