"""Continuous backup with two replicas, its metrics and its encryption, on the real API server: the Lease moves
from a killed or stopped writer to the standby and the chain restores exactly; the standby writes nothing; the
metrics endpoint follows the writer; encrypted segments hold no plaintext and need their key."""

from __future__ import annotations

import base64
import datetime as dt
import gzip
import math
import os
import signal
import socket
import time
import urllib.request
import zlib
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

from statusvault.archive.crypto import MAGIC, Key
from statusvault.errors import ExitStatus
from statusvault.storage.local import LocalStore
from statusvault.testing.fixtures import ensure_namespace
from statusvault.vocabulary.kinds import LEASES, NAMESPACES
from statusvault.watch.chains import chains, read_head
from tests.builders import cr, kc_status, unique
from tests.integration.test_watch import KC, KCS, Watcher, moment, now, phases, set_phase

pytestmark = pytest.mark.version_neutral(
    "the writer Lease is coordination.k8s.io/v1, the same on every version; WATCH per version is test_watch's"
)


class Replica(Watcher):
    """One replica of `statusvault watch run w1`, with its own identity in the Lease and its own log."""

    def __init__(self, cluster, namespace: str, storage: str, tmp: Path, holder: str, *extra: str):
        super().__init__(cluster, namespace, storage, tmp, "--holder", holder, *extra)
        self.holder, self.log = holder, tmp / f"{holder}.log"

    def writes(self) -> bool:
        return "holds the Lease and writes" in self.log.read_text()


@pytest.fixture
def target(kube):
    made: list[str] = []

    def _target() -> str:
        made.append(unique("r"))
        ensure_namespace(kube, made[-1])
        return made[-1]

    yield _target
    for name in made:
        kube.delete(NAMESPACES, None, name)


@pytest.fixture
def replicas():
    started: list[Replica] = []
    yield started
    for r in started:
        if r.proc is not None and r.proc.poll() is None:
            r.proc.kill()
            r.proc.wait(30)


def wait_for(what: str, check, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline, f"timed out waiting until {what}"
        time.sleep(0.2)


def lease_holder(kube, namespace: str) -> str | None:
    lease = kube.get(LEASES, namespace, "statusvault-watch-w1") or {}
    return (lease.get("spec") or {}).get("holderIdentity")


def head_holder(store) -> str | None:
    return (read_head(store, "w1") or {}).get("holder")


def restored(run, kube, crds, namespace: str, target: str, *args: str) -> dict[str, str]:
    result = run("restore", "w1", *args, "--namespace-mapping", f"{namespace}:{target}")
    assert result.code == 0, result.err
    items = [o for page in kube.list_pages(crds.resolve(KCS), target) for o in page]
    return {o["metadata"]["name"]: o["status"]["phase"] for o in items}


def test_the_lease_moves_to_the_standby_after_a_kill_and_the_chain_restores_exactly(
    run, kube, crds, make, namespace, target, cluster, tmp_path, replicas
):
    for name in ("a", "b"):
        make(cr(KC, "KubernetesCluster", name, status={**kc_status(), "phase": "v1"}), namespace)
    storage = str(run.storage)
    first = Replica(cluster, namespace, storage, tmp_path, "replica-1").start()
    replicas.append(first)
    first.flushed_after(now())
    second = Replica(cluster, namespace, storage, tmp_path, "replica-2").start()
    replicas.append(second)
    store = first.store()
    for i in range(5):  # longer than the Lease (3 s): the standby has tried to take it several times
        set_phase(kube, crds, namespace, "a", f"a{i}")
        first.recorded("a", f"a{i}")
        time.sleep(1)  # the test's subject: time passing while the standby tries to take the Lease
        assert lease_holder(kube, namespace) == head_holder(store) == "replica-1"
    first.flushed_after(now())
    assert not second.writes() and len(chains(store, "w1")) == 1, "the standby wrote nothing"

    first.stop(signal.SIGKILL)
    set_phase(kube, crds, namespace, "a", "while-no-writer")
    set_phase(kube, crds, namespace, "b", "while-no-writer")
    wait_for("the standby writes", lambda: head_holder(store) == "replica-2")
    set_phase(kube, crds, namespace, "a", "after-takeover")
    make(cr(KC, "KubernetesCluster", "c", status={**kc_status(), "phase": "new"}), namespace)
    second.recorded("c", "new")
    second.stop()

    assert "continuing chain" in second.log.read_text() and len(chains(store, "w1")) == 1
    assert phases(store, "a") == ["a0", "a1", "a2", "a3", "a4", "while-no-writer", "after-takeover"]
    assert phases(store, "b") == ["while-no-writer"]
    latest = {"a": "after-takeover", "b": "while-no-writer", "c": "new"}
    assert restored(run, kube, crds, namespace, target(), "--at", "latest") == latest
    assert run("verify", "w1").code == 0


def test_a_stopped_writer_flushes_what_it_held_and_hands_over_without_waiting_for_expiry(
    run, kube, crds, make, namespace, cluster, tmp_path, replicas
):
    """SIGTERM: the buffered changes are stored and the Lease released, so the standby (which would otherwise
    wait 30 s for the Lease to expire) takes over at its next try."""
    make(cr(KC, "KubernetesCluster", "a", status={**kc_status(), "phase": "v1"}), namespace)
    storage, slow = str(run.storage), ("--lease-seconds", "30")
    port = free_port()
    first = Replica(cluster, namespace, storage, tmp_path, "replica-1", *slow, "--metrics-port", str(port))
    second = Replica(cluster, namespace, storage, tmp_path, "replica-2", *slow)
    first.flush = second.flush = "30"  # the change is still buffered at the stop; the standby's head comes later
    replicas.append(first.start())
    first.flushed_after(now(), timeout=90)
    replicas.append(second.start())
    set_phase(kube, crds, namespace, "a", "held")
    wait_for("the change held by the writer", lambda: scrape(port)["statusvault_watch_buffered_records"] >= 1)
    assert phases(first.store(), "a") == [], "not flushed before the stop"
    first.stop()
    stopped = time.monotonic()
    assert "watch w1 stopped" in first.log.read_text()
    assert phases(first.store(), "a")[-1] == "held" and head_holder(first.store()) == "replica-1"
    wait_for("the standby writes", second.writes, timeout=25)
    assert time.monotonic() - stopped < 20, "taken over before the Lease could expire"
    second.stop()


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def scrape(port: int) -> dict[str, float]:
    text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10).read().decode()
    return {
        s.name: s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
        if s.name.startswith("statusvault_watch_") and s.labels.get("watch") == "w1"
    }


def test_the_metrics_endpoint_follows_segments_bytes_and_lag_and_a_standby_reports_no_lag(
    run, kube, crds, make, namespace, cluster, tmp_path, replicas
):
    make(cr(KC, "KubernetesCluster", "a", status={**kc_status(), "phase": "v1"}), namespace)
    ports, textfile = (free_port(), free_port()), tmp_path / "watch.prom"
    storage = str(run.storage)
    writer = Replica(cluster, namespace, storage, tmp_path, "replica-1", "--metrics-port", str(ports[0]),
                     "--metrics-textfile", str(textfile)).start()  # fmt: skip
    replicas.append(writer)
    writer.flushed_after(now())
    standby = Replica(cluster, namespace, storage, tmp_path, "replica-2", "--metrics-port", str(ports[1])).start()
    replicas.append(standby)
    wait_for("the standby serves metrics", lambda: _serves(ports[1]))
    before = scrape(ports[0])
    assert before["statusvault_watch_leader"] == 1 and before["statusvault_watch_bases_total"] == 1
    lags = []
    for i in range(4):
        set_phase(kube, crds, namespace, "a", f"v{i + 2}")
        for _ in range(5):  # flush interval 0.5 s: the recovery point stays within it plus 2 s
            time.sleep(0.25)
            lags.append(scrape(ports[0])["statusvault_watch_lag_seconds"])
    writer.flushed_after(now())
    after, idle = scrape(ports[0]), scrape(ports[1])
    assert min(lags) >= 0 and max(lags) <= 0.5 + 2, lags
    assert after["statusvault_watch_segments_total"] >= before["statusvault_watch_segments_total"] + 4
    assert after["statusvault_watch_records_total"] >= before["statusvault_watch_records_total"] + 4
    assert after["statusvault_watch_bytes_total"] > before["statusvault_watch_bytes_total"]
    (chain,) = chains(writer.store(), "w1")
    assert after["statusvault_watch_bytes_total"] == chain.stored_bytes, "the bytes of every segment it wrote"
    assert idle["statusvault_watch_leader"] == 0 and math.isnan(idle["statusvault_watch_lag_seconds"])
    assert math.isnan(idle["statusvault_watch_buffered_records"]) and after["statusvault_watch_buffered_records"] >= 0
    assert idle["statusvault_watch_segments_total"] == 0
    writer.stop()
    assert "statusvault_watch_segments_total" in textfile.read_text()


def _serves(port: int) -> bool:
    try:
        return "statusvault_watch_leader" in str(scrape(port))
    except OSError:
        return False


@pytest.fixture
def keys(tmp_path):
    out = {}
    for name in ("right", "wrong"):
        out[name] = tmp_path / f"{name}.key"
        out[name].write_text(base64.b64encode(os.urandom(32)).decode())
    return {k: str(v) for k, v in out.items()}


def _plain_forms(data: bytes) -> list[bytes]:
    """The bytes as stored and, when they are gzip, as decompressed."""
    try:
        return [data, gzip.decompress(data)]
    except (OSError, EOFError, zlib.error):
        return [data]


def test_encrypted_segments_hold_no_plaintext_and_restore_only_with_their_key(
    run, kube, crds, make, namespace, target, cluster, tmp_path, keys, replicas
):
    name, secret = "zq-sealed-object", "phase-only-in-plaintext"
    make(cr(KC, "KubernetesCluster", name, status={**kc_status(), "phase": f"{secret}-1"}), namespace)
    sealed = Replica(cluster, namespace, str(run.storage), tmp_path, "replica-1", "--encryption-key-file",
                     keys["right"]).start()  # fmt: skip
    replicas.append(sealed)
    sealed.flushed_after(now())
    key = Key.from_file(keys["right"])
    set_phase(kube, crds, namespace, name, f"{secret}-2")
    sealed.recorded(name, f"{secret}-2", key)
    middle = now()
    set_phase(kube, crds, namespace, name, f"{secret}-3")
    sealed.recorded(name, f"{secret}-3", key)
    sealed.stop()

    files = [p for p in run.storage.rglob("*") if p.is_file()]
    segments = [p for p in files if p.name.endswith(".jsonl.gz")]
    assert len(segments) >= 2 and all(p.read_bytes().startswith(MAGIC) for p in segments)
    for path in files:
        for form in _plain_forms(path.read_bytes()):
            assert name.encode() not in form and secret.encode() not in form, path

    assert run("verify", "w1", "--encryption-key-file", keys["right"]).code == 0
    unchecked = run("verify", "w1")
    assert unchecked.code == 0 and "encrypted: pass --encryption-key-file" in unchecked.out
    at = ("--at", moment(middle))
    for key in (("--encryption-key-file", keys["wrong"]), ()):
        empty = target()
        refused = run("restore", "w1", *at, "--namespace-mapping", f"{namespace}:{empty}", *key)
        assert refused.code == ExitStatus.USAGE, refused.err
        assert [line for line in refused.err.splitlines() if line.strip()] == [refused.err.strip()]
        assert "encrypted" in refused.err and "Traceback" not in refused.err
        assert not [o for page in kube.list_pages(crds.resolve(KCS), empty) for o in page], "nothing written"
    right = ("--encryption-key-file", keys["right"])
    assert restored(run, kube, crds, namespace, target(), *at, *right) == {name: f"{secret}-2"}
    assert restored(run, kube, crds, namespace, target(), "--at", "latest", *right) == {name: f"{secret}-3"}


def test_a_writer_with_another_key_starts_a_new_base_instead_of_mixing_keys_in_a_chain(
    run, kube, crds, make, namespace, target, cluster, tmp_path, keys, replicas
):
    make(cr(KC, "KubernetesCluster", "a", status={**kc_status(), "phase": "v1"}), namespace)
    storage = str(run.storage)
    for i, key in enumerate((keys["right"], keys["wrong"])):
        w = Replica(cluster, namespace, storage, tmp_path, f"replica-{i}", "--encryption-key-file", key).start()
        replicas.append(w)
        w.flushed_after(now())
        set_phase(kube, crds, namespace, "a", f"v{i + 2}")
        w.recorded("a", f"v{i + 2}", Key.from_file(key))
        w.stop()
    assert "encrypted with another key" in w.log.read_text() and "starting a new base" in w.log.read_text()
    store = LocalStore(run.storage)
    first, second = chains(store, "w1")
    inside_first = moment(first.until - dt.timedelta(microseconds=1))
    assert restored(run, kube, crds, namespace, target(), "--at", inside_first,
                    "--encryption-key-file", keys["right"]) == {"a": "v2"}  # fmt: skip
    latest = restored(run, kube, crds, namespace, target(), "--at", "latest", "--encryption-key-file", keys["wrong"])
    assert latest == {"a": "v3"}
    assert run("verify", "w1", "--encryption-key-file", keys["wrong"]).code == ExitStatus.USAGE
