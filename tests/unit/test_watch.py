"""Continuous backup, pure parts: the segment format, chain retention, --at parsing, rendered RBAC."""

from __future__ import annotations

import datetime as dt
import gzip
import queue
import threading
from pathlib import Path

import pytest

from statusvault.archive.crypto import Key
from statusvault.errors import ArchiveError, ConfigError, KubeApiError, KubeConnectionError
from statusvault.model import ResourceType, Selection
from statusvault.restore.options import parse_at
from statusvault.runtime.throttle import Backoff
from statusvault.schedule import ScheduleSpec
from statusvault.storage.local import LocalStore
from statusvault.store.retention import RetentionPolicy
from statusvault.watch.chains import Chain, chain_for
from statusvault.watch.install import WatchSpec, render
from statusvault.watch.pointintime import point_name
from statusvault.watch.prune import decide_chains
from statusvault.watch.segments import SegmentBuffer, check_segment_manifest, fetched_segment, record, records
from statusvault.watch.streams import StreamSet

T0 = dt.datetime(2026, 11, 22, 10, 0, tzinfo=dt.UTC)
KC = ResourceType("xyz.example.com", "v1", "kubernetesclusters", "KubernetesCluster", True, True, True, ("list",))


def test_a_segment_round_trips_encrypted_and_a_changed_byte_is_refused(tmp_path):
    store, key = LocalStore(tmp_path), Key(b"k" * 32)
    buf = SegmentBuffer()
    buf.add(record("put", KC.qualified, "7", T0, b'{"metadata":{"name":"a"},"status":{"phase":"Ready"}}'), T0)
    buf.add(record("delete", KC.qualified, "8", T0, b'{"metadata":{"name":"a"}}'), T0)
    size, sha = buf.upload(store, "s.jsonl.gz", key)
    m = {"size": size, "sha256": sha, "encryption": key.describe()}
    with fetched_segment(store, "s.jsonl.gz", m, key, "segment 1") as path:
        assert [(r["op"], r["rv"]) for r in records(path, "segment 1")] == [("put", "7"), ("delete", "8")]
    no_key = fetched_segment(store, "s.jsonl.gz", m, None, "segment 1")
    with pytest.raises(ConfigError, match="pass --encryption-key-file"), no_key:
        pass
    data = bytearray(store.get("s.jsonl.gz"))
    data[-1] ^= 1
    store.put("s.jsonl.gz", bytes(data))
    changed = fetched_segment(store, "s.jsonl.gz", m, key, "segment 1")
    with pytest.raises(ArchiveError, match="segment 1 was modified"), changed:
        pass


@pytest.mark.parametrize(
    "line",
    [b'{"op":"patch","resource":"r","seen":"x","object":{"metadata":{"name":"a"}}}\n', b"[1]\n", b"{not json\n"],
)
def test_a_malformed_record_is_refused(tmp_path, line):
    path = tmp_path / "seg.gz"
    path.write_bytes(gzip.compress(line))
    with pytest.raises(ArchiveError, match="segment 3"):
        list(records(path, "segment 3"))


def manifest(**over):
    m = {"formatVersion": "1.0", "kind": "statusvault-watch-segment", "watch": "w", "base": "b", "seq": 2,
         "sha256": "x", "previous": "y", "size": 1, "records": 1, "until": "t", "resourceVersions": {}}  # fmt: skip
    return {**m, **over}


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"formatVersion": "2.0"}, "segment format '2.0' is not supported"),
        ({"seq": 3}, "names another place"),
        ({"kind": "other"}, "not a segment manifest"),
        ({"previous": None}, "'previous' is missing"),
    ],
)
def test_segment_manifests_are_checked(change, message):
    assert check_segment_manifest(manifest(), "w", "b", 2)["seq"] == 2
    with pytest.raises(ArchiveError, match=message):
        check_segment_manifest(manifest(**change), "w", "b", 2)


def chain(base: str, start_h: int, until_h: int) -> Chain:
    return Chain("w", base, T0 + dt.timedelta(hours=start_h), "", 3, T0 + dt.timedelta(hours=until_h))


def test_prune_keeps_every_chain_a_kept_moment_needs_and_always_the_newest():
    found = [chain("b1", 0, 1), chain("b2", 1, 2), chain("b3", 2, 3), chain("b4", 3, 4)]
    now = T0 + dt.timedelta(hours=4)
    by_ttl = {d.name: d.delete for d in decide_chains(found, RetentionPolicy(ttl=dt.timedelta(minutes=90)), now)}
    assert by_ttl == {"b1": True, "b2": True, "b3": False, "b4": False}, "b3 reaches into the window"
    by_last = {d.name: d.delete for d in decide_chains(found, RetentionPolicy(keep_last=1), now)}
    assert by_last == {"b1": True, "b2": True, "b3": True, "b4": False}


def test_the_latest_moment_and_the_newest_chain_are_the_chain_reaching_furthest():
    """A writer killed after the next chain's chain.json, before its head moved there: the writer that takes over
    continues the older chain, which then reaches further than the newer, empty one."""
    continued, stale = chain("b1", 0, 3), chain("b2", 2, 2)
    found = [continued, stale]  # as chains() lists them: by start
    assert chain_for(found, None, "w") == (continued, continued.until)
    assert chain_for(found, T0 + dt.timedelta(hours=2), "w")[0] == stale, "a moment both hold: the newer base"
    kept = {d.name: d.delete for d in decide_chains(found, RetentionPolicy(keep_last=1), T0 + dt.timedelta(hours=3))}
    assert kept == {"b1": False, "b2": True}, "the chain still being written stays"


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("latest", None),
        ("2026-11-22T10:15:00Z", dt.datetime(2026, 11, 22, 10, 15, tzinfo=dt.UTC)),
        ("2026-11-22T11:15:00+01:00", dt.datetime(2026, 11, 22, 10, 15, tzinfo=dt.UTC)),
    ],
)
def test_at_is_rfc3339_or_latest(text, expected):
    assert parse_at(text) == expected


@pytest.mark.parametrize("text", ["yesterday", "2026-11-22T10:15:00"])
def test_an_at_without_a_zone_or_unparsable_is_a_usage_error(text):
    with pytest.raises(ConfigError):
        parse_at(text)


def test_the_point_name_is_stable_for_a_moment():
    assert point_name("w", T0 + dt.timedelta(microseconds=5)) == "w-at-20261122100000-000005"


def test_rendered_watch_may_only_read_and_watch_its_types_and_hold_its_lease():
    sel = Selection(namespaces=("prod",), include_crds=False)
    spec = WatchSpec(ScheduleSpec("w", "", sel, "s3://b/p", job_namespace="sv"))
    docs = render(spec, [KC])
    assert [d["kind"] for d in docs] == ["Namespace", "ServiceAccount", "Role", "RoleBinding", "Role",
                                         "RoleBinding", "Deployment"]  # fmt: skip
    assert docs[2]["rules"] == [{"apiGroups": ["xyz.example.com"], "resources": ["kubernetesclusters"],
                                 "verbs": ["get", "list", "watch"]}]  # fmt: skip
    assert docs[4]["metadata"]["namespace"] == "sv" and docs[4]["rules"][0]["resources"] == ["leases"]
    deploy = docs[-1]
    args = deploy["spec"]["template"]["spec"]["containers"][0]["command"]
    assert deploy["spec"]["replicas"] == 2
    assert args[:6] == ["statusvault", "--log-format", "json", "watch", "run", "w"]
    assert args[args.index("-n") : args.index("-n") + 2] == ["-n", "prod"]
    assert "--lease-namespace" in args and "kubernetesclusters.xyz.example.com" in args
    assert args[args.index("--metrics-address") + 1] == "0.0.0.0", "in its pod, for Prometheus to scrape"


def test_watch_metrics_listen_on_loopback_unless_told_otherwise():
    """`watch run --metrics-port` on a laptop serves its metrics to this machine only."""
    import inspect
    import socket

    from statusvault.testing.controlplane import free_ports
    from statusvault.watch.metrics import WatchMetrics

    assert inspect.signature(WatchMetrics.serve).parameters["address"].default == "127.0.0.1"
    (port,) = free_ports(1)
    WatchMetrics().serve(port)
    with socket.create_connection(("127.0.0.1", port), timeout=5):
        pass
    listening = [line.split() for line in Path("/proc/net/tcp").read_text().splitlines()[1:]]
    local = {row[1] for row in listening if row[3] == "0A"}  # LISTEN
    assert f"0100007F:{port:04X}" in local and f"00000000:{port:04X}" not in local


class _Waits(threading.Event):
    """A stop event that records how long each wait was asked for, without waiting."""

    def __init__(self) -> None:
        super().__init__()
        self.asked: list[float] = []

    def wait(self, timeout: float | None = None) -> bool:
        self.asked.append(float(timeout or 0))
        return False


def test_a_watch_turned_away_waits_the_servers_retry_after_and_else_its_own_backoff():
    streams = StreamSet(None, [], queue.Queue())  # type: ignore[arg-type]
    streams.stop = waits = _Waits()
    throttled = KubeApiError.of("GET /apis/x: too many requests (429 TooManyRequests)", 429, retry_after=4.0)
    assert streams._pause(Backoff(), 0, throttled) == 1
    assert streams._pause(Backoff(), 5, KubeConnectionError("cannot reach the API server")) == 6
    assert 4.0 <= waits.asked[0] <= 5.0, "the server's Retry-After, spread by at most a quarter"
    assert waits.asked[1] <= Backoff().base * 2**5, "no Retry-After: the stream's own backoff (attempt 5)"
