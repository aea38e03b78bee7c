"""Continuous backup, the parts two replicas rely on: a writer continues after a segment its predecessor stored
without moving the head; a standby reports no lag; key rules for segments match the archives'."""

from __future__ import annotations

import datetime as dt
import math

import orjson
import pytest

from statusvault.archive.crypto import Key
from statusvault.errors import ArchiveError, ConfigError
from statusvault.storage.base import segment_key, segment_manifest_key, watch_head_key
from statusvault.storage.local import LocalStore
from statusvault.watch.metrics import WatchMetrics
from statusvault.watch.segments import SegmentBuffer, fetched_segment, record
from statusvault.watch.streams import Change
from statusvault.watch.writer import ChainWriter

T0 = dt.datetime(2026, 11, 22, 10, 0, tzinfo=dt.UTC)
KC = "kubernetesclusters.xyz.example.com"


class DiesBeforeTheHead(LocalStore):
    """A store whose writer is killed between storing a segment and moving the head."""

    dead = False

    def put(self, key: str, data: bytes) -> None:
        if self.dead and key.endswith("head.json"):
            raise OSError("killed")
        super().put(key, data)


def change(rv: int) -> Change:
    return Change("kc/ns", "put", str(rv), KC, orjson.dumps({"metadata": {"name": "a"}, "status": {"phase": rv}}))


def first_writer(store: LocalStore) -> ChainWriter:
    w = ChainWriter(store, "w", "w-base-1", {"kc/ns": "1"})
    w.open("base-sha", T0, {})
    w.add(change(2), T0)
    w.flush(T0, "replica-1")
    return w


def test_a_new_writer_continues_after_a_segment_stored_without_moving_the_head(tmp_path):
    store = DiesBeforeTheHead(tmp_path)
    dying = first_writer(store)
    dying.add(change(3), T0)
    store.dead = True
    with pytest.raises(OSError, match="killed"):
        dying.flush(T0, "replica-1")
    store.dead = False
    head = orjson.loads(store.get(watch_head_key("w")))
    assert head["seq"] == 1 and store.exists(segment_manifest_key("w", "w-base-1", 2))

    second = ChainWriter.resume(store, head, None)
    assert (second.seq, second.positions) == (2, {"kc/ns": "3"}), "after segment 2, from its resourceVersions"
    second.add(change(4), T0)
    third = second.flush(T0, "replica-2")
    stored_2 = orjson.loads(store.get(segment_manifest_key("w", "w-base-1", 2)))
    assert third is not None and third["seq"] == 3 and third["previous"] == stored_2["sha256"]


def test_a_segment_after_the_head_that_does_not_follow_it_is_not_continued(tmp_path):
    store = LocalStore(tmp_path)
    w = first_writer(store)
    w.add(change(3), T0)
    w.flush(T0, "replica-1")
    key = segment_manifest_key("w", "w-base-1", 2)
    store.put(key, orjson.dumps({**orjson.loads(store.get(key)), "previous": "another"}))
    head = {**orjson.loads(store.get(watch_head_key("w"))), "seq": 1}
    with pytest.raises(ArchiveError, match="segment 2 of watch 'w' .* does not follow segment 1"):
        ChainWriter.resume(store, head, None)


def lag(metrics: WatchMetrics) -> float | None:
    return metrics.registry.get_sample_value("statusvault_watch_lag_seconds", {"watch": "w"})


def test_only_the_writer_reports_lag_and_a_new_writer_counts_from_the_head_it_found():
    metrics = WatchMetrics("w")
    assert math.isnan(lag(metrics) or 0.0)
    assert metrics.registry.get_sample_value("statusvault_watch_leader", {"watch": "w"}) == 0
    metrics.leading(dt.datetime.now(dt.UTC) - dt.timedelta(seconds=40))
    assert 40 <= (lag(metrics) or 0.0) < 45, "the time without a writer counts"
    metrics.flushed(dt.datetime.now(dt.UTC), {"size": 10, "records": 2})
    assert 0 <= (lag(metrics) or -1.0) < 5
    assert metrics.registry.get_sample_value("statusvault_watch_bytes_total", {"watch": "w"}) == 10
    metrics.standing_by()
    assert math.isnan(lag(metrics) or 0.0)


def test_the_writer_reports_the_changes_it_holds_unstored_and_a_standby_none():
    metrics, held = WatchMetrics("w"), [3]
    metrics.buffering(lambda: held[0])

    def buffered() -> float | None:
        return metrics.registry.get_sample_value("statusvault_watch_buffered_records", {"watch": "w"})

    assert math.isnan(buffered() or 0.0), "a standby holds nothing of its own"
    metrics.leading(None)
    assert buffered() == 3
    held[0] = 0
    assert buffered() == 0, "read at each scrape"
    metrics.standing_by()
    assert math.isnan(buffered() or 0.0)


@pytest.mark.parametrize(
    ("stored_key", "given_key", "message"),
    [
        (None, Key(b"k" * 32), "is not encrypted, but an encryption key was given"),
        (Key(b"k" * 32), Key(b"x" * 32), "was encrypted with key '.*', not with the given key"),
        (Key(b"k" * 32), None, "is encrypted .*pass --encryption-key-file"),
    ],
)
def test_segment_key_problems_are_usage_errors_as_for_archives(tmp_path, stored_key, given_key, message):
    store = LocalStore(tmp_path)
    buf = SegmentBuffer()
    buf.add(record("put", KC, "7", T0, b'{"metadata":{"name":"a"}}'), T0)
    size, sha = buf.upload(store, segment_key("w", "b", 1), stored_key)
    m = {"size": size, "sha256": sha, **({"encryption": stored_key.describe()} if stored_key else {})}
    with pytest.raises(ConfigError, match=message), fetched_segment(store, segment_key("w", "b", 1), m, given_key, "s"):
        pass
