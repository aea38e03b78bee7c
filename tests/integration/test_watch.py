"""Continuous backup on the real API server: a watcher process, restores --at a moment, kill -9, 410 Gone,
broken chains, S3 (moto)."""

from __future__ import annotations

import base64
import datetime as dt
import json
import os
import signal
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

from statusvault.archive.crypto import Key
from statusvault.errors import ExitStatus
from statusvault.kube.discovery import Discovery
from statusvault.storage import open_store
from statusvault.storage.base import S3Options, segment_key, segment_manifest_key, watch_head_key
from statusvault.watch.chains import chains, read_head, walk
from tests.builders import cr, kc_status

pytestmark = pytest.mark.version_sensitive(
    "WATCH semantics (410 Gone, bookmarks, the watch cache's resourceVersions) differ by version"
)

KC = "xyz.example.com/v1"
KCS = "kubernetesclusters.xyz.example.com"


class Watcher:
    """`statusvault watch run` as its own process, as it runs in a pod."""

    def __init__(self, cluster, namespace: str, storage: str, tmp: Path, *extra: str):
        self.args = [sys.executable, "-m", "statusvault", "--kubeconfig", str(cluster.kubeconfig), "watch", "run",
                     "w1", "-n", namespace, "--include-resources", KCS, "--no-include-crds", "--storage", storage,
                     "--lease-namespace", namespace, "--lease-seconds", "3", *extra]  # fmt: skip
        self.flush = "0.5"
        self.storage, self.log, self.proc = storage, tmp / "watcher.log", None
        self.env = dict(os.environ)

    def start(self) -> Watcher:
        args = [*self.args, "--flush-interval", self.flush]
        self.proc = subprocess.Popen(args, stderr=open(self.log, "a"), env=self.env)  # noqa: SIM115
        return self

    def store(self):
        return open_store(self.storage, S3Options(endpoint_url=self.env.get("SV_S3"), addressing_style="path"))

    def flushed_after(self, t: dt.datetime, timeout: float = 60) -> None:
        """Wait until the record reaches past t (every change seen before t is in the store)."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            found = chains(self.store(), "w1")
            if found and found[-1].until > t:
                return
            assert self.proc is None or self.proc.poll() is None, self.log.read_text()
            time.sleep(0.2)
        raise AssertionError(f"not flushed past {t}: {self.log.read_text()}")

    def recorded(self, name: str, phase: str, key: Key | None = None, timeout: float = 60) -> None:
        """Wait until the store holds `phase` as the last recorded phase of `name` (that change is flushed)."""
        deadline = time.monotonic() + timeout
        while phases(self.store(), name, key, newest_chain=True)[-1:] != [phase]:
            assert time.monotonic() < deadline, f"{name} never recorded as {phase}: {self.log.read_text()}"
            assert self.proc is None or self.proc.poll() is None, self.log.read_text()
            time.sleep(0.2)

    def stop(self, sig: int = signal.SIGTERM) -> None:
        assert self.proc is not None
        self.proc.send_signal(sig)
        self.proc.wait(30)


def phases(store, name: str, key: Key | None = None, newest_chain: bool = False) -> list[str]:
    """The phases recorded for `name` across every chain of w1 (or its newest), in order, a re-delivered repeat
    counted once."""
    out: list[str] = []
    found = chains(store, "w1")
    for chain in found[-1:] if newest_chain else found:
        for rec in walk(store, chain, key):
            phase = "<deleted>" if rec["op"] == "delete" else (rec["object"].get("status") or {}).get("phase")
            if rec["object"]["metadata"]["name"] == name and out[-1:] != [phase]:
                out.append(phase)
    return out


def now() -> dt.datetime:
    return dt.datetime.now(dt.UTC)


def set_phase(kube, crds: Discovery, ns: str, name: str, phase: str) -> None:
    rt = crds.resolve(KCS)
    live = kube.get(rt, ns, name)
    live["status"]["phase"] = phase
    kube.replace(rt, ns, name, live, sub="status")


def restored(run, kube, crds, at: str, source: str, target: str, *storage: str) -> dict[str, str]:
    result = run("restore", "w1", "--at", at, "--namespace-mapping", f"{source}:{target}", *storage)
    assert result.code == 0, result.err
    items = [o for page in kube.list_pages(crds.resolve(KCS), target) for o in page]
    return {o["metadata"]["name"]: o["status"]["phase"] for o in items}


def moment(t: dt.datetime) -> str:
    return t.isoformat().replace("+00:00", "Z")


@pytest.fixture
def target(kube, namespace):
    from statusvault.testing.fixtures import ensure_namespace
    from tests.builders import unique

    made = []

    def _target() -> str:
        name = unique("r")
        ensure_namespace(kube, name)
        made.append(name)
        return name

    yield _target
    from statusvault.vocabulary.kinds import NAMESPACES

    for n in made:
        kube.delete(NAMESPACES, None, n)


def test_restore_at_a_moment_gives_that_moments_statuses_and_honours_deletions(
    run, kube, crds, make, namespace, target, cluster, tmp_path
):
    for name in ("a", "b"):
        make(cr(KC, "KubernetesCluster", name, spec={"region": "eu"}, status={**kc_status(), "phase": "v1"}), namespace)
    w = Watcher(cluster, namespace, str(run.storage), tmp_path).start()
    try:
        w.flushed_after(now())
        m0 = now()
        set_phase(kube, crds, namespace, "a", "v2")
        w.recorded("a", "v2")
        m1 = now()
        set_phase(kube, crds, namespace, "a", "v3")
        kube.delete(crds.resolve(KCS), namespace, "b")
        make(cr(KC, "KubernetesCluster", "c", status={**kc_status(), "phase": "new"}), namespace)
        w.recorded("c", "new")
        w.recorded("b", "<deleted>")
        m2 = now()
        w.flushed_after(m2)
    finally:
        w.stop()
    assert "watch w1 stopped" in w.log.read_text()
    assert restored(run, kube, crds, moment(m0), namespace, target()) == {"a": "v1", "b": "v1"}
    assert restored(run, kube, crds, moment(m1), namespace, target()) == {"a": "v2", "b": "v1"}
    assert restored(run, kube, crds, moment(m2), namespace, target()) == {"a": "v3", "c": "new"}
    assert restored(run, kube, crds, "latest", namespace, target()) == {"a": "v3", "c": "new"}
    timeline = run("list", "--timeline", "-o", "json")
    assert timeline.code == 0 and json.loads(timeline.out)[0]["watch"] == "w1"
    assert run("verify", "w1").out.startswith("Watch w1: OK (1 chain(s), ")
    early = run("restore", "w1", "--at", "2001-01-01T00:00:00Z")
    assert early.code == ExitStatus.ERROR and "cannot restore 2001-01-01" in early.err
    assert by_restore_resource(run, kube, crds, moment(m1), namespace, target()) == {"a": "v2", "b": "v1"}


def by_restore_resource(run, kube, crds, at: str, source: str, target: str) -> dict[str, str]:
    """A Restore naming the watch and spec.at, reconciled by the controller: the moment's statuses, as --at gives."""
    from statusvault.cli.specfields import crds as controller_crds
    from statusvault.testing.fixtures import ensure_namespace, install_crds
    from tests.builders import unique

    restores = install_crds(kube, controller_crds()).by_qualified("restores.statusvault.dev")
    ctl = unique("ctl-at")
    ensure_namespace(kube, ctl)
    spec = {"backup": "w1", "at": at, "namespace-mapping": [f"{source}:{target}"]}
    kube.create(restores, ctl, {"apiVersion": "statusvault.dev/v1alpha1", "kind": "Restore",
                                "metadata": {"name": "at-m1"}, "spec": spec})  # fmt: skip
    assert run("controller", "run", "-n", ctl, "--once").code == 0
    status = kube.get(restores, ctl, "at-m1")["status"]
    assert status["phase"] == "Complete", status
    items = [o for page in kube.list_pages(crds.resolve(KCS), target) for o in page]
    return {o["metadata"]["name"]: o["status"]["phase"] for o in items}


def test_a_watcher_killed_with_sigkill_and_restarted_loses_no_change(
    run, kube, crds, make, namespace, target, cluster, tmp_path
):
    make(cr(KC, "KubernetesCluster", "a", status={**kc_status(), "phase": "v1"}), namespace)
    w = Watcher(cluster, namespace, str(run.storage), tmp_path)
    w.flush = "30"  # a long interval: the kill finds changes not yet flushed
    w.start()
    try:
        w.flushed_after(now(), timeout=90)
        set_phase(kube, crds, namespace, "a", "before-kill")  # seen or not, the restarted watch resumes before it
        w.stop(signal.SIGKILL)
        set_phase(kube, crds, namespace, "a", "while-dead")
        w.flush = "0.5"
        w.start()
        w.flushed_after(now() + dt.timedelta(seconds=4))  # the Lease of the killed writer expires first
        set_phase(kube, crds, namespace, "a", "after-restart")
        w.recorded("a", "after-restart")
    finally:
        w.stop()
    log = w.log.read_text()
    assert "continuing chain" in log
    records = _all_phases(w.store())
    assert [p for p in records if p != "v1"] == ["before-kill", "while-dead", "after-restart"]
    assert restored(run, kube, crds, "latest", namespace, target()) == {"a": "after-restart"}


def test_a_watcher_killed_as_its_base_lands_starts_a_base_again_when_restarted(
    run, kube, crds, make, namespace, target, cluster, tmp_path
):
    """Killed between its first base's archive and manifest. Restarted by the same holder, it takes the Lease at
    once and often names its new base in the same second, the killed base's name: that base is replaced (it was
    refused as existing, and the watcher retried later under another name). Under another name the killed base
    stays, listed as Incomplete (never as being written: its process has ended)."""
    make(cr(KC, "KubernetesCluster", "a", status={**kc_status(), "phase": "v1"}), namespace)
    w = Watcher(cluster, namespace, str(run.storage), tmp_path)
    w.args[2:3] = ["tests.stopper", "manifest.json", "kill", str(tmp_path / "mark")]
    w.start()
    assert w.proc is not None and w.proc.wait(90) == -signal.SIGKILL, w.log.read_text()
    w = Watcher(cluster, namespace, str(run.storage), tmp_path).start()
    try:
        w.flushed_after(now(), timeout=90)
        set_phase(kube, crds, namespace, "a", "after-restart")
        w.recorded("a", "after-restart")
    finally:
        w.stop()
    log = w.log.read_text()
    assert "not usable" not in log and "already exists" not in log, log
    phases = sorted(b["phase"] for b in json.loads(run("list", "-o", "json").out))
    assert phases in (["Completed"], ["Completed", "Incomplete"]), log
    if phases == ["Completed"]:
        assert "replacing the incomplete backup a stopped run left" in log
    assert restored(run, kube, crds, "latest", namespace, target()) == {"a": "after-restart"}


def _all_phases(store) -> list[str]:
    from statusvault.watch.chains import walk

    (chain,) = chains(store, "w1")
    return [r["object"]["status"]["phase"] for r in walk(store, chain, None)]


def _etcd_url(cluster) -> str:
    cmdline = Path(f"/proc/{cluster.pids['etcd']}/cmdline").read_bytes().split(b"\0")
    return cmdline[cmdline.index(b"--listen-client-urls") + 1].decode()


def _compact(cluster) -> None:
    url = _etcd_url(cluster)
    key = base64.b64encode(b"/").decode()
    req = urllib.request.Request(f"{url}/v3/kv/range", json.dumps({"key": key}).encode(), method="POST")
    revision = json.loads(urllib.request.urlopen(req, timeout=10).read())["header"]["revision"]
    body = json.dumps({"revision": revision, "physical": True}).encode()
    urllib.request.urlopen(urllib.request.Request(f"{url}/v3/kv/compaction", body, method="POST"), timeout=10)


def test_a_410_gone_after_compaction_is_survived_with_a_new_base(
    run, kube, crds, make, namespace, target, cluster, tmp_path
):
    make(cr(KC, "KubernetesCluster", "a", status={**kc_status(), "phase": "v1"}), namespace)
    w = Watcher(cluster, namespace, str(run.storage), tmp_path).start()
    try:
        w.flushed_after(now())
        w.stop()
        for i in range(20):
            set_phase(kube, crds, namespace, "a", f"gap-{i}")
        _compact(cluster)
        # The API server's watch cache still serves a recent position after an etcd compaction; a position
        # from before its window (as after a long outage) is answered 410 Gone, as a compacted one would be.
        store = w.store()
        head = read_head(store, "w1")
        assert head is not None
        head["resourceVersions"] = {k: "1" for k in head["resourceVersions"]}
        store.put(watch_head_key("w1"), json.dumps(head).encode())
        w.start()
        deadline = time.monotonic() + 60
        while len(chains(w.store(), "w1")) < 2 and time.monotonic() < deadline:
            time.sleep(0.2)
        set_phase(kube, crds, namespace, "a", "after-gone")
        w.recorded("a", "after-gone")
    finally:
        w.stop()
    log = w.log.read_text()
    assert "410 Gone" in log and "starting a new base" in log
    assert len(chains(w.store(), "w1")) == 2
    assert restored(run, kube, crds, "latest", namespace, target()) == {"a": "after-gone"}


def test_a_broken_chain_on_s3_is_refused_by_verify_and_restore(
    run, kube, crds, make, namespace, cluster, tmp_path, s3_endpoint, bucket
):
    make(cr(KC, "KubernetesCluster", "a", status={**kc_status(), "phase": "v1"}), namespace)
    s3 = ("--storage", f"s3://{bucket}/sv", "--s3-endpoint-url", s3_endpoint, "--s3-addressing-style", "path")
    w = Watcher(cluster, namespace, f"s3://{bucket}/sv", tmp_path, *s3[2:])
    w.env["SV_S3"] = s3_endpoint
    w.start()
    try:
        w.flushed_after(now())
        for phase in ("v2", "v3"):  # one segment each
            set_phase(kube, crds, namespace, "a", phase)
            w.recorded("a", phase)
    finally:
        w.stop()
    store = w.store()
    assert run("verify", "w1", *s3).code == 0
    head = read_head(store, "w1")
    assert head is not None and head["seq"] >= 2
    base = head["base"]
    original = store.get(segment_key("w1", base, 1))
    store.put(segment_key("w1", base, 1), original[:-1] + bytes([original[-1] ^ 1]))
    for args in (("verify", "w1"), ("restore", "w1", "--at", "latest")):
        result = run(*args, *s3)
        assert result.code == ExitStatus.ERROR
        lines = [line for line in result.err.splitlines() if line.startswith("error:")]
        assert len(lines) == 1 and "Traceback" not in result.err
    assert "segment 1 of watch 'w1'" in result.err and "modified" in result.err
    store.put(segment_key("w1", base, 1), original)
    store.delete(segment_manifest_key("w1", base, 2))
    store.delete(segment_key("w1", base, 2))
    missing = run("verify", "w1", *s3)
    assert missing.code == ExitStatus.ERROR and "segment 2 of watch 'w1' (base" in missing.out + missing.err
    assert "missing" in missing.err or "missing" in missing.out
