"""The watcher's decisions against the in-memory API server (tests/fake/): bookmarks move its position, a 410 Gone
on a WATCH re-lists and starts a new base, a dropped stream resumes where it was, a failed flush loses nothing."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import orjson
import pytest

from statusvault.archive import signing
from statusvault.archive.crypto import Key
from statusvault.archive.envelope import Keyring, Keys
from statusvault.errors import ArchiveError, StorageError
from statusvault.model import Selection
from statusvault.restore.runner import open_backup
from statusvault.storage.base import segment_key, segment_manifest_key
from statusvault.storage.local import LocalStore
from statusvault.store.catalog import list_backups
from statusvault.vocabulary.kinds import CRDS, NAMESPACES
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
def watching(
    fake: FakeKube, store: LocalStore, key: Key | None = None, **config: Any
) -> Iterator[tuple[WatchEngine, list[BaseException]]]:
    """A watch of the KubernetesClusters running on a thread, flushing every 50 ms; stopped on exit. The list
    collects what `run` raised. `config`: WatchConfig's other fields (signer ...)."""
    watch = WatchConfig(name="w", selection=Selection(include_resources=(KC.qualified,)), lease_namespace="sv",
                        holder="me", flush_interval=0.05, **config)  # fmt: skip
    engine = WatchEngine(fake, lambda: fake.discovery(NAMESPACES), store, watch, key)
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


def recorded(store: LocalStore, keys: Keys = None) -> list[tuple[str, str, str]]:
    """(base, op, name) of every record of every chain, in order."""
    return [
        (chain.base, r["op"], r["object"]["metadata"]["name"])
        for chain in chains(store, "w")
        for r in walk(store, chain, keys)
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


def three_segments(fake: FakeKube, store: LocalStore, key: Key | None = None, **config: Any) -> str:
    """A watch that recorded kc-1, kc-2 and kc-3 in a segment each; returns its base."""
    with watching(fake, store, key, **config):
        for n, name in enumerate(("kc-1", "kc-2", "kc-3"), 1):
            add(fake, name)
            eventually(lambda n=n: (read_head(store, "w") or {}).get("seq") == n, f"segment {n}")
    return str(read_head(store, "w")["base"])


def segment_manifest(store: LocalStore, base: str, seq: int) -> dict[str, Any]:
    return orjson.loads(store.get(segment_manifest_key("w", base, seq)))


def put_manifest(store: LocalStore, base: str, seq: int, m: dict[str, Any]) -> None:
    store.put(segment_manifest_key("w", base, seq), orjson.dumps(m))


def test_an_older_encrypted_segment_put_in_a_newer_ones_place_does_not_open(fake, store):
    """A store writer cannot read an encrypted segment, but could once replace segment 3 by segment 1 (the same
    watch, the same key) and edit the plaintext manifest to match: the restore brought kc-1 back where kc-3 was.
    A segment is sealed bound to its watch, base and sequence number (segment format 1.1)."""
    key = Key(b"w" * 32)
    base = three_segments(fake, store, key)
    assert [n for _, _, n in recorded(store, key)] == ["kc-1", "kc-2", "kc-3"]
    first, third = segment_manifest(store, base, 1), segment_manifest(store, base, 3)
    store.put(segment_key("w", base, 3), store.get(segment_key("w", base, 1)))
    put_manifest(store, base, 3, {**third, "sha256": first["sha256"], "size": first["size"]})

    with pytest.raises(ArchiveError, match="cannot decrypt the archive"):
        recorded(store, key)


def test_a_signed_watch_is_refused_once_a_segment_is_unsigned_changed_or_seen_out_of_order(fake, store, tmp_path):
    pub, public = signing.generate(tmp_path / "w.pem")
    base = three_segments(fake, store, signer=signing.FileSigner.from_file(tmp_path / "w.pem"))
    keys = Keyring((), (public,))
    assert [n for _, _, n in recorded(store, keys)] == ["kc-1", "kc-2", "kc-3"], "signed, and verified"
    second = segment_manifest(store, base, 2)

    put_manifest(store, base, 2, {k: v for k, v in second.items() if k != "signature"})
    with pytest.raises(ArchiveError, match=r"segment 2 of watch 'w' .* is not signed, and a verification key"):
        recorded(store, keys)
    put_manifest(store, base, 2, {**second, "records": 5})
    with pytest.raises(ArchiveError, match=r"signature of segment 2 of watch 'w' .* does not verify"):
        recorded(store, keys)
    put_manifest(store, base, 2, {**second, "firstSeen": "2000-01-01T00:00:00.000000Z"})
    with pytest.raises(ArchiveError, match=r"segment 2 .* was seen before segment 1 ended"):
        recorded(store)  # unsigned reading: the order in time is checked all the same
