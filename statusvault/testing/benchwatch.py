"""The `watch` section of `make bench` (BENCH_ONLY=watch runs it alone): recovery point under a steady rate of
status changes, the watcher's peak RSS, and restore --at against a plain restore of the same objects."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import orjson

from statusvault.storage.base import segment_manifest_key
from statusvault.storage.local import LocalStore
from statusvault.testing.benchcore import (
    GROUP,
    NAMESPACES,
    PARALLEL,
    PLURAL,
    Http,
    cli_figures,
    log,
    make_namespaces,
    objects,
    run_cli,
    vm_hwm_kib,
    write_all,
)
from statusvault.testing.cluster import LocalCluster
from statusvault.watch.chains import chains, walk
from statusvault.watch.pointintime import point_in_time
from statusvault.watch.segments import parse_record_time

RATE = float(os.environ.get("BENCH_WATCH_RATE", "200"))  # status changes per second
SECONDS = float(os.environ.get("BENCH_WATCH_SECONDS", "30"))
FLUSH = 10.0


def measure_watch(cluster: LocalCluster, n: int, work: Path) -> dict[str, Any]:
    http = Http(cluster.server, PARALLEL)
    env = {**os.environ, "KUBECONFIG": str(cluster.kubeconfig), "STATUSVAULT_STORAGE": str(work / "store"),
           "STATUSVAULT_STATE_DIR": str(work / "state")}  # fmt: skip
    log(f"watch: seeding {n} objects")
    make_namespaces(http, "watch")
    write_all(http, objects(n, "watch"), PARALLEL)
    args = [sys.executable, "-m", "statusvault", "watch", "run", "wb", "--include-resources", f"{PLURAL}.{GROUP}",
            "--no-include-crds", "--flush-interval", f"{FLUSH:g}", "--lease-namespace", "watch-0"]  # fmt: skip
    with tempfile.TemporaryFile() as err:
        proc = subprocess.Popen(args, env=env, stderr=err)
        peak = [0]
        sampler = threading.Thread(target=_sample_rss, args=(proc, peak), daemon=True)
        sampler.start()
        store = LocalStore(work / "store")
        started = time.perf_counter()
        while not chains(store, "wb"):
            if proc.poll() is not None:
                err.seek(0)
                raise RuntimeError(err.read().decode()[-2000:])
            time.sleep(0.2)
        base_seconds = time.perf_counter() - started
        log(f"watch: base of {n} in {base_seconds:.1f}s; {RATE:g} status changes/s for {SECONDS:g}s")
        changed = drive(http, n, RATE, SECONDS)
        time.sleep(FLUSH + 3)
        proc.send_signal(signal.SIGTERM)
        proc.wait(60)
    sent = len(changed)
    points = recovery_points(store, changed)
    results: dict[str, Any] = {
        "objects": n,
        "base_seconds": base_seconds,
        "changes": sent,
        "changes_per_s": sent / SECONDS,
        "flush_interval": FLUSH,
        "recovery_point_p50": _pct(points, 0.50),
        "recovery_point_p99": _pct(points, 0.99),
        "recovery_point_max": max(points) if points else None,
        "changes_found": len(points),
        "watcher_peak_rss_mib": peak[0] / 1024,
    }
    results.update(restore_at_vs_plain(store, env, n))
    return results


def _sample_rss(proc: subprocess.Popen[bytes], peak: list[int]) -> None:
    while proc.poll() is None:
        peak[0] = max(peak[0], vm_hwm_kib(proc.pid))
        time.sleep(0.05)


def body(tag: str) -> dict[str, Any]:
    return {"status": {"benchChange": tag}}


def drive(http: Http, n: int, per_s: float, seconds: float) -> dict[str, float]:
    """Change one status at a time at `per_s`; return {change id: wall time the change was sent}."""
    sent: dict[str, float] = {}
    lock = threading.Lock()

    def change(k: int) -> None:
        i = k % n
        ns, name = f"watch-{i % NAMESPACES}", f"item-{i:06d}"
        path = f"/apis/{GROUP}/v1/namespaces/{ns}/{PLURAL}/{name}/status"
        tag = f"c{k}"
        with lock:
            sent[tag] = time.time()
        headers = {**http.headers, "Content-Type": "application/merge-patch+json"}
        resp = http.pool.request("PATCH", http.server + path, body=orjson.dumps(body(tag)), headers=headers)
        if resp.status >= 300:
            raise RuntimeError(f"PATCH {path}: {resp.status}")

    start = time.perf_counter()
    with ThreadPoolExecutor(8) as pool:
        for k in range(int(per_s * seconds)):
            delay = start + k / per_s - time.perf_counter()
            if delay > 0:
                time.sleep(delay)
            pool.submit(change, k)
    return sent


def recovery_points(store: LocalStore, sent: dict[str, float]) -> list[float]:
    """Seconds from each change being sent to its segment being complete in the store."""
    out = []
    for chain in chains(store, "wb"):
        flushed_at: dict[int, float] = {}
        for rec in walk(store, chain, None):
            tag = (rec["object"].get("status") or {}).get("benchChange")
            if tag in sent:
                seq = _segment_of(store, chain.base, rec["seen"], flushed_at)
                out.append(seq - sent.pop(tag))
    return sorted(out)


def _segment_of(store: LocalStore, base: str, seen: str, cache: dict[int, float]) -> float:
    """When the segment holding a record seen at `seen` was complete: its manifest's mtime."""
    t = parse_record_time(seen)
    seq = 1
    while True:
        path = store.root / segment_manifest_key("wb", base, seq)
        m = orjson.loads(path.read_bytes())
        if parse_record_time(m["lastSeen"]) >= t:
            return cache.setdefault(seq, path.stat().st_mtime)
        seq += 1


def _pct(values: list[float], q: float) -> float | None:
    return values[min(len(values) - 1, int(q * len(values)))] if values else None


def restore_at_vs_plain(store: LocalStore, env: dict[str, str], n: int) -> dict[str, Any]:
    base = chains(store, "wb")[-1].base
    started = time.perf_counter()  # what --at does before its restore: the state at the moment as a v1 backup
    with point_in_time(store, "wb", None, None):
        materialised = time.perf_counter() - started
    mapping = ",".join(f"watch-{k}:at-{k}" for k in range(NAMESPACES))
    log("watch: restore wb --at latest")
    at = run_cli(["restore", "wb", "--at", "latest", "--namespace-mapping", mapping,
                                     "--parallel", str(PARALLEL)], env)  # fmt: skip
    mapping = ",".join(f"watch-{k}:plain-{k}" for k in range(NAMESPACES))
    log(f"watch: plain restore of the base {base}")
    plain = run_cli(["restore", base, "--namespace-mapping", mapping, "--parallel", str(PARALLEL)], env)
    return {
        "restore_at": cli_figures(at, n + NAMESPACES),
        "restore_plain": cli_figures(plain, n + NAMESPACES),
        "materialise_seconds": materialised,
    }


def table(r: dict[str, Any]) -> str:
    at, plain = r["restore_at"], r["restore_plain"]
    rows = [
        f"watch: {r['objects']} objects, {r['changes']} status changes at {r['changes_per_s']:.0f}/s, "
        f"flush interval {r['flush_interval']:g}s",
        f"  recovery point (change sent -> segment stored): p50 {r['recovery_point_p50']:.2f}s  "
        f"p99 {r['recovery_point_p99']:.2f}s  max {r['recovery_point_max']:.2f}s  "
        f"({r['changes_found']}/{r['changes']} changes found)   target p99 <= {r['flush_interval'] + 2:g}s",
        f"  watcher peak RSS: {r['watcher_peak_rss_mib']:.0f} MiB (base of {r['objects']} in {r['base_seconds']:.1f}s)",
        f"  restore --at latest: {at['objects_per_s']:.0f} objects/s ({at['peak_rss_mib']:.0f} MiB); plain restore "
        f"of the base: {plain['objects_per_s']:.0f} objects/s; ratio {at['objects_per_s'] / plain['objects_per_s']:.2f}"
        " (target >= 0.90)",
        f"  of which materialising the moment (base + changes -> a v1 backup, before the restore): "
        f"{r['materialise_seconds']:.1f}s",
    ]
    return "\n".join(rows)
