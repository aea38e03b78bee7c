"""The watcher's decisions against the in-memory API server (tests/fake/): bookmarks move its position, a 410 Gone
on a WATCH re-lists and starts a new base, a dropped stream resumes where it was, a failed flush loses nothing."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import pytest

from statusvault.catalog import list_backups
from statusvault.errors import StorageError
from statusvault.kinds import CRDS, NAMESPACES
from statusvault.model import Selection
from statusvault.restore.runner import open_backup
from statusvault.storage.local import LocalStore
from statusvault.watch.chains import chains, read_head, walk
from statusvault.watch.engine import WatchConfig, WatchEngine
from tests.builders import cr, crd, resource_type
from tests.fake import FakeKube

KC = resource_type("xyz.example.com", "KubernetesCluster")
STREAM = f"{KC.qualified}/"  # the one cluster-wide stream of KubernetesClusters
NS = "team-a"


class FlakyStore(LocalStore):
    """A directory store whose writes of watch segments fail while `broken` is set."""

    broken = False

    def open_write(self, key: str) -> Any:
        if self.broken and key.endswith(".jsonl.gz"):
            raise StorageError(f"cannot write {key}: the bucket is unreachable (injected)")
        return super().open_write(key)


@pytest.fixture
def fake() -> FakeKube:
    kube = FakeKube()
    kube.put(NAMESPACES, {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NS}})
    kube.put(CRDS, crd("xyz.example.com", "KubernetesCluster"))
    add(kube, "kc-0")
    return kube


@pytest.fixture
def store(tmp_path) -> FlakyStore:
    return FlakyStore(tmp_path / "store")


def add(fake: FakeKube, name: str) -> None:
    obj = cr("xyz.example.com/v1", "KubernetesCluster", name, spec={"n": 1})
    fake.put(KC, {**obj, "metadata": {**obj["metadata"], "namespace": NS}})


def eventually(check: Callable[[], Any], what: str, timeout: float = 10.0) -> Any:
    """Poll until `check()` is truthy (the watcher runs on its own threads)."""
    deadline = time.monotonic() + timeout
    while not (value := check()):
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.01)
    return value


@contextmanager
def watching(fake: FakeKube, store: LocalStore) -> Iterator[tuple[WatchEngine, list[BaseException]]]:
    """A watch of the KubernetesClusters running on a thread, flushing every 50 ms; stopped on exit. The list
    collects what `run` raised."""
    config = WatchConfig(name="w", selection=Selection(include_resources=(KC.qualified,)), lease_namespace="sv",
                         holder="me", flush_interval=0.05)  # fmt: skip
    engine = WatchEngine(fake, lambda: fake.discovery(NAMESPACES), store, config)
    raised: list[BaseException] = []

    def run() -> None:
        try:
            engine.run()
        except BaseException as e:
            raised.append(e)

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    try:
        eventually(lambda: (read_head(store, "w") or {}).get("seq") is not None or raised, "the first base")
        yield engine, raised
    finally:
        engine.stop.set()
        thread.join(10)
        assert not thread.is_alive()


def recorded(store: LocalStore) -> list[tuple[str, str, str]]:
    """(base, op, name) of every record of every chain, in order."""
    return [
        (chain.base, r["op"], r["object"]["metadata"]["name"])
        for chain in chains(store, "w")
        for r in walk(store, chain, None)
    ]


def test_bookmarks_move_the_position_while_the_collection_is_quiet(fake, store):
    """Writes elsewhere move the server's resourceVersion; the stream's bookmarks carry the head along, so a
    resume starts from there (not from an old position the server may have compacted away)."""
    with watching(fake, store):
        fake.put(NAMESPACES, {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "elsewhere"}})
        now = str(fake.log.revision)
        eventually(lambda: read_head(store, "w")["resourceVersions"][STREAM] == now, "the bookmark in the head")
    assert recorded(store) == []


def test_a_dropped_stream_resumes_from_its_last_position_and_loses_or_repeats_nothing(fake, store, caplog):
    caplog.set_level(logging.INFO, "statusvault.watch")
    with watching(fake, store) as (_, raised):
        fake.break_watch(KC, after=1)
        for name in ("kc-1", "kc-2", "kc-3"):
            add(fake, name)
        eventually(lambda: len(recorded(store)) == 3, "three records")
    (base,) = {b for b, _, _ in recorded(store)}
    assert recorded(store) == [(base, "put", n) for n in ("kc-1", "kc-2", "kc-3")], "each once, in order"
    assert len(chains(store, "w")) == 1, "a reconnect is no loss: the chain goes on"
    assert raised == []
    assert [r.getMessage() for r in caplog.records if "broke off" in r.getMessage()], "the stream did break"


def test_a_410_on_a_watch_relists_ends_the_chain_and_starts_a_new_base(fake, store, caplog):
    caplog.set_level(logging.WARNING, "statusvault.watch")
    with watching(fake, store) as (_, raised):
        first = read_head(store, "w")["base"]
        fake.compact()  # the watch's position is compacted away: what happened since is unknown
        add(fake, "kc-1")
        eventually(lambda: len(chains(store, "w")) == 2, "a second chain")
        add(fake, "kc-2")
        eventually(lambda: ("put", "kc-2") in [(op, n) for _, op, n in recorded(store)], "kc-2 recorded")
    old, new = chains(store, "w")
    assert old.base == first and new.base != first
    assert [(b, n) for b, _, n in recorded(store) if n == "kc-2"] == [(new.base, "kc-2")]
    with open_backup(store, new.base) as reader:
        assert any(b'"kc-1"' in data for _, data in reader.objects()), "the change in the gap is in the new base"
    assert any("410 Gone" in r.getMessage() for r in caplog.records)
    assert {b.name for b in list_backups(store)} == {old.base, new.base}, "no discarded base left as a backup"
    assert raised == []


def test_a_failed_flush_stops_the_watch_and_a_restart_records_what_it_had_buffered(fake, store):
    """Nothing is lost silently: the head stays before the change that could not be stored, the watcher fails
    (the pod restarts), and the next run resumes the chain from the head and records the change again."""
    with watching(fake, store) as (_, raised):
        add(fake, "kc-1")
        eventually(lambda: len(recorded(store)) == 1, "kc-1 recorded")
        store.broken = True
        add(fake, "kc-2")
        eventually(lambda: raised, "the watcher to fail")
    assert isinstance(raised[0], StorageError) and "unreachable" in str(raised[0])
    assert [n for _, _, n in recorded(store)] == ["kc-1"]
    store.broken = False
    with watching(fake, store) as (_, raised):
        eventually(lambda: len(recorded(store)) == 2, "kc-2 recorded after the restart")
    assert [n for _, _, n in recorded(store)] == ["kc-1", "kc-2"]
    assert len(chains(store, "w")) == 1, "the same chain, continued"
    assert raised == []
