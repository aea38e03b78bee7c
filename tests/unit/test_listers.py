"""LIST streams in worker processes (real spawned processes; a fake lister instead of an API server): records
in the streams' order, errors raised where the records stop, a dead or stopped worker never silent, a dead one
replaced for the streams after it."""

from __future__ import annotations

import dataclasses
import json
import logging
import os
import signal
import time
from collections.abc import Iterator

import pytest

from statusvault.backup.listers import ListJob, list_in_worker
from statusvault.backup.spools import InOrder, Record
from statusvault.errors import KubeApiError, StatusVaultError
from statusvault.processes import WorkerSettings
from statusvault.processes.pool import WorkerPool


@dataclasses.dataclass(frozen=True)
class FakeStream:
    label: str
    pages: int
    per_page: int = 3
    fail_at: int | None = None  # page
    error: str = "kube"  # kube | unpicklable
    endless: bool = False
    die_at: int | None = None  # page: the worker process kills itself
    pause: float = 0.0  # seconds before each page after the first (a slow server)
    warn: bool = False  # log a warning, as the transport does when it retries


class Unpicklable(Exception):
    def __init__(self, what: str, extra: int):  # pickling passes only args: (what,) -> TypeError on load
        super().__init__(what)
        self.extra = extra


def fake_lister(client, stream: FakeStream, page_size: int) -> Iterator[list[Record]]:
    if stream.warn:
        logging.getLogger("statusvault.kube.transport").warning("retrying the LIST of %s", stream.label)
    page = 0
    while stream.endless or page < stream.pages:
        if page == stream.fail_at:
            if stream.error == "kube":
                raise KubeApiError.of(f"{stream.label}: forbidden", 403, "Forbidden")
            raise Unpicklable(f"{stream.label}: odd", 1)
        if page == stream.die_at:
            os.kill(os.getpid(), signal.SIGKILL)
        if page:
            time.sleep(stream.pause)
        yield [
            (f"{stream.label}/{page}/{i}", f"{stream.label}-{page}-{i}".encode() * page_size, i % 4)
            for i in range(stream.per_page)
        ]
        page += 1


@pytest.fixture
def spec(worker_spec: WorkerSettings) -> WorkerSettings:
    return worker_spec  # never connected to: the fake lister makes no request


def listers(spec: WorkerSettings) -> WorkerPool:
    return WorkerPool(spec, ListJob(fake_lister), role="list")


def read_all(pool: WorkerPool, streams: list[FakeStream], concurrency: int) -> list[list[Record]]:
    with InOrder([lambda spool, s=s: list_in_worker(pool, s, 2, spool) for s in streams], concurrency) as ordered:
        return [list(records) for records in ordered]


def test_streams_listed_in_processes_come_back_whole_and_in_order(spec):
    streams = [FakeStream("a", 4), FakeStream("b", 0), FakeStream("c", 7, per_page=50), FakeStream("d", 1)]
    with listers(spec) as pool:
        got = read_all(pool, streams, 3)
        pids = {w.process.pid for w in pool.workers}
    assert [len(g) for g in got] == [12, 0, 350, 3]
    assert got[2][:2] == [("c/0/0", b"c-0-0" * 2, 0), ("c/0/1", b"c-0-1" * 2, 1)]
    assert got[2][-1] == ("c/6/49", b"c-6-49" * 2, 1)
    assert len(pids) == 2 and os.getpid() not in pids


def test_an_error_in_a_worker_is_raised_where_its_records_stop(spec):
    with listers(spec) as pool:
        with InOrder([lambda spool: list_in_worker(pool, FakeStream("x", 5, fail_at=2), 1, spool)], 1) as ordered:
            records = next(iter(ordered))
            seen = []
            with pytest.raises(KubeApiError, match="x: forbidden") as raised:
                for name, _, _ in records:
                    seen.append(name)
        assert raised.value.code == 403, "the API error crosses the process boundary whole"
        assert len(seen) == 6
        # the worker is reusable after an error
        assert [len(g) for g in read_all(pool, [FakeStream("y", 2)], 1)] == [6]


def test_an_error_that_cannot_cross_processes_still_says_what_it_was(spec):
    with listers(spec) as pool, pytest.raises(StatusVaultError, match="Unpicklable: x: odd"):
        read_all(pool, [FakeStream("x", 3, fail_at=1, error="unpicklable")], 1)


def test_a_worker_that_dies_fails_the_stream_loudly(spec):
    with listers(spec) as pool, pytest.raises(StatusVaultError, match=r"stopped \(exit code -9\)"):
        read_all(pool, [FakeStream("a", 2), FakeStream("k", 5, die_at=2)], 2)


def test_when_every_worker_has_died_the_streams_waiting_for_one_fail_too(spec):
    """Three streams kill their workers (two): the first one's death fails the backup, and no stream waits for
    a worker forever."""
    streams = [FakeStream(f"k{i}", 3, die_at=0) for i in range(3)] + [FakeStream("c", 2)]
    with listers(spec) as pool, pytest.raises(StatusVaultError, match=r"while listing k0"):
        read_all(pool, streams, 4)


def test_a_dead_worker_is_replaced_for_the_streams_after_it(spec):
    with listers(dataclasses.replace(spec, processes=1)) as pool:
        with pytest.raises(StatusVaultError, match=r"stopped \(exit code -9\) while listing k"):
            read_all(pool, [FakeStream("k", 5, die_at=1)], 1)
        assert [len(g) for g in read_all(pool, [FakeStream("a", 2), FakeStream("b", 1)], 2)] == [6, 3]


@pytest.mark.parametrize("pause", [0.0, 60.0], ids=["pages-flowing", "slow-server"])
def test_a_stopped_backup_stops_its_workers(spec, pause):
    """The consumer stops reading mid-way (a failed archive write, Ctrl-C): closing returns promptly, with
    the worker that was still listing (blocked on a full pipe, or waiting for a slow answer) stopped too."""
    pool = listers(spec)
    stream = FakeStream("e", 0, per_page=200, endless=True, pause=pause)
    with InOrder([lambda spool: list_in_worker(pool, stream, 50, spool)], 1) as ordered:
        records = iter(next(iter(ordered)))
        assert [next(records) for _ in range(10)][-1][0] == "e/0/9"
        started = time.monotonic()
    pool.close()
    assert time.monotonic() - started < 10, "neither the stream's thread nor the pool waited for the worker"
    assert not any(w.process.is_alive() for w in pool.workers)


def test_a_workers_log_lines_reach_the_same_stderr_in_the_same_format(spec, capfd):
    with listers(dataclasses.replace(spec, log_format="json")) as pool:
        assert [len(g) for g in read_all(pool, [FakeStream("w", 1, warn=True)], 1)] == [3]
    lines = [json.loads(line) for line in capfd.readouterr().err.splitlines() if line.startswith("{")]
    assert [(e["level"], e["msg"]) for e in lines] == [("warning", "retrying the LIST of w")]
