"""Producers run at once, records read back in the producers' order, errors where they happened."""

from __future__ import annotations

import threading
import time

import pytest

from statusvault.spools import Spool, in_order


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
    got = [list(records) for records in in_order([producer(t, n, d) for t, n, d in specs], concurrency)]
    assert [len(g) for g in got] == [20, 50, 0, 30]
    for (tag, n, _), records in zip(specs, got, strict=True):
        assert records == [(f"{tag}/{i}", f"data-{tag}-{i}".encode() * (i + 1), i % 4) for i in range(n)]


def test_a_producer_error_is_raised_where_its_records_stop():
    streams = in_order([producer("a", 3), producer("b", 10, fail_at=4), producer("c", 3)], 3)
    assert len(list(next(streams))) == 3
    seen = []
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

    streams = in_order([tracked(str(i)) for i in range(6)], 2)
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

    streams = in_order([producer("a", 1), endless], 2)
    list(next(streams))
    streams.close()  # what a failed archive write does
    after = puts["n"]
    time.sleep(0.05)
    assert puts["n"] == after, "the endless producer was stopped"


def test_pages_and_records_larger_than_one_read_come_back_whole(monkeypatch):
    import statusvault.spools as spools

    monkeypatch.setattr(spools, "READ_CHUNK", 64)
    pages = [[(f"p{p}/{i}", bytes([p + i]) * (i * 37), i % 3) for i in range(5)] for p in range(4)]

    def produce(spool: Spool) -> None:
        for page in pages:
            spool.put_many(page)
        spool.put_many([])

    got = [list(records) for records in in_order([produce], 1)]
    assert got == [[r for page in pages for r in page]]
