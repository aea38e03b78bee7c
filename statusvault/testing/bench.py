"""`make bench`: statusvault against the machine's own limits, measured side by side in one run.

Seeds BENCH_N custom resources (~2 KB, status included) over 10 namespaces of a local real cluster, then measures
bare-HTTP LIST and write baselines, `statusvault backup` (directory and S3), `restore` and `verify`, and prints one
table. Figures go to bench/results.json.
"""

from __future__ import annotations

import gzip
import json
import logging
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import orjson
import urllib3

from statusvault import __version__
from statusvault.testing.benchreport import report
from statusvault.testing.cluster import ADMIN_TOKEN, LocalCluster, _free_ports
from statusvault.testing.fixtures import install_crds

logging.getLogger("werkzeug").setLevel(logging.ERROR)

GROUP, PLURAL, KIND = "bench.example.com", "benchitems", "BenchItem"
NAMESPACES = 10
PARALLEL = 16
CRD = {
    "apiVersion": "apiextensions.k8s.io/v1",
    "kind": "CustomResourceDefinition",
    "metadata": {"name": f"{PLURAL}.{GROUP}"},
    "spec": {
        "group": GROUP,
        "scope": "Namespaced",
        "names": {"plural": PLURAL, "singular": "benchitem", "kind": KIND},
        "versions": [
            {
                "name": "v1",
                "served": True,
                "storage": True,
                "subresources": {"status": {}},
                "schema": {"openAPIV3Schema": {"type": "object", "x-kubernetes-preserve-unknown-fields": True}},
            }
        ],
    },
}


def item(i: int, ns: str) -> dict[str, Any]:
    """A realistic ~2 KB object: spec, conditions, an external ID and a small history list."""
    return {
        "apiVersion": f"{GROUP}/v1",
        "kind": KIND,
        "metadata": {
            "name": f"item-{i:06d}",
            "namespace": ns,
            "labels": {"app": "bench", "shard": str(i % 7)},
            "annotations": {"example.com/owner": "platform-team", "example.com/ticket": f"OPS-{i}"},
        },
        "spec": {
            "engine": "postgres",
            "version": "15.4",
            "sizeGB": 100 + i % 50,
            "region": "eu-west-1",
            "backup": {"enabled": True, "window": "02:00-03:00", "retentionDays": 14},
            "parameters": {f"param{k}": f"value-{k}-{i}" for k in range(8)},
        },
        "status": {
            "externalID": f"db-{i:010x}",
            "endpoint": f"item-{i}.cluster-abc.eu-west-1.rds.example.com",
            "phase": "Ready",
            "observedGeneration": 3,
            "conditions": [
                {
                    "type": t,
                    "status": "True",
                    "reason": "Reconciled",
                    "message": f"{t} since provision",
                    "lastTransitionTime": "2025-10-01T08:30:00Z",
                }
                for t in ("Ready", "Provisioned", "Synced")
            ],
            "history": [
                {"event": e, "at": f"2025-0{m}-01T00:00:00Z", "by": "operator"}
                for m, e in enumerate(("created", "resized", "upgraded", "failover", "patched"), 1)
            ],
        },
    }


class Http:
    """The bare baseline client: one urllib3 pool, bearer token, orjson."""

    def __init__(self, server: str, pool: int):
        urllib3.disable_warnings()
        self.server = server
        self.pool = urllib3.PoolManager(maxsize=pool, cert_reqs="CERT_NONE")
        self.headers = {
            "Authorization": f"Bearer {ADMIN_TOKEN}",
            "Content-Type": "application/json",
            "Accept": "application/json",
        }

    def call(self, method: str, path: str, body: Any = None) -> Any:
        data = orjson.dumps(body) if body is not None else None
        resp = self.pool.request(method, self.server + path, body=data, headers=self.headers)
        if resp.status >= 300:
            raise RuntimeError(f"{method} {path}: {resp.status} {resp.data[:200]!r}")
        return orjson.loads(resp.data)

    def create_with_status(self, obj: dict[str, Any]) -> None:
        ns = obj["metadata"]["namespace"]
        base = f"/apis/{GROUP}/v1/namespaces/{ns}/{PLURAL}"
        created = self.call("POST", base, obj)
        created["status"] = obj["status"]
        self.call("PUT", f"{base}/{obj['metadata']['name']}/status", created)


def timed(fn: Callable[[], int]) -> tuple[int, float]:
    start = time.perf_counter()
    n = fn()
    return n, time.perf_counter() - start


def objects(n: int, prefix: str) -> Iterator[dict[str, Any]]:
    for i in range(n):
        yield item(i, f"{prefix}-{i % NAMESPACES}")


def make_namespaces(http: Http, prefix: str) -> None:
    for k in range(NAMESPACES):
        http.call(
            "POST",
            "/api/v1/namespaces",
            {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": f"{prefix}-{k}"}},
        )


def write_all(http: Http, objs: Iterator[dict[str, Any]], workers: int) -> int:
    count = 0
    with ThreadPoolExecutor(workers) as pool:
        for _ in pool.map(http.create_with_status, objs):
            count += 1
    return count


def bare_list(http: Http, out: Path) -> int:
    """Paginated LIST (limit 500), JSON-decoded, each object gzip-written: no statusvault code."""
    count, token = 0, ""
    with gzip.open(out, "wb", compresslevel=3) as gz:
        while True:
            page = http.call("GET", f"/apis/{GROUP}/v1/{PLURAL}?limit=500" + (f"&continue={token}" if token else ""))
            for obj in page["items"]:
                gz.write(orjson.dumps(obj))
                count += 1
            token = page["metadata"].get("continue") or ""
            if not token:
                return count


def run_cli(args: list[str], env: dict[str, str]) -> tuple[float, float, str]:
    """Run statusvault in its own process; return (seconds, peak RSS in MiB of that process, stdout).

    Peak RSS is VmHWM read from /proc while it runs: rusage's ru_maxrss would include the RSS of this (large)
    parent, which Linux carries across fork and exec.
    """
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        start = time.perf_counter()
        proc = subprocess.Popen([sys.executable, "-m", "statusvault", *args], env=env, stdout=out, stderr=err)
        peak = 0
        while proc.poll() is None:
            peak = max(peak, _vm_hwm_kib(proc.pid))
            time.sleep(0.01)
        seconds = time.perf_counter() - start
        out.seek(0)
        err.seek(0)
        if proc.returncode != 0:
            raise RuntimeError(f"statusvault {' '.join(args)} failed: {err.read().decode()[-2000:]}")
        return seconds, peak / 1024, out.read().decode()


def _vm_hwm_kib(pid: int) -> int:
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1])
    except OSError:
        pass
    return 0


def machine() -> dict[str, Any]:
    from importlib.metadata import version

    return {
        "cores": os.cpu_count(),
        "python": platform.python_version(),
        "platform": platform.platform(),
        "statusvault": __version__,
        "kubernetes": "v1.20.2 (local kube-apiserver + etcd)",
        "urllib3": version("urllib3"),
        "orjson": orjson.__version__,
    }


def rate(n: int, seconds: float) -> float:
    return n / seconds if seconds > 0 else 0.0


def measure(cluster: LocalCluster, n: int, work: Path) -> dict[str, Any]:
    http = Http(cluster.server, PARALLEL)
    env = {
        **os.environ,
        "KUBECONFIG": str(cluster.kubeconfig),
        "STATUSVAULT_STORAGE": str(work / "store"),
        "STATUSVAULT_STATE_DIR": str(work / "state"),  # restore journals (removed once a restore finishes)
    }
    results: dict[str, Any] = {"n": n, "parallel": PARALLEL}
    log(f"seeding {n} objects over {NAMESPACES} namespaces")
    make_namespaces(http, "bench")
    _, seconds = timed(lambda: write_all(http, objects(n, "bench"), PARALLEL))
    log(f"  seeded in {seconds:.0f}s")

    log("bare HTTP LIST (limit 500) + JSON + gzip")
    count, seconds = timed(lambda: bare_list(http, work / "bare.jsonl.gz"))
    assert count == n, f"listed {count} of {n}"
    results["list_bare"] = {"objects_per_s": rate(n, seconds), "seconds": seconds}

    log("statusvault backup -> directory")
    seconds, rss, _ = run_cli(
        ["backup", "bench-dir", "--include-resources", f"{PLURAL}.{GROUP}", "--no-include-crds"], env
    )
    results["backup_dir"] = {"objects_per_s": rate(n, seconds), "seconds": seconds, "peak_rss_mib": rss}

    log("statusvault backup -> S3 (moto server over HTTP)")
    results["backup_s3"] = backup_to_s3(env, n)

    log("statusvault verify")
    seconds, rss, _ = run_cli(["verify", "bench-dir"], env)
    results["verify"] = {"objects_per_s": rate(n, seconds), "seconds": seconds, "peak_rss_mib": rss}

    log(f"bare HTTP create + PUT status, {PARALLEL} threads")
    make_namespaces(http, "bare")
    _, seconds = timed(lambda: write_all(http, objects(n, "bare"), PARALLEL))
    results["write_bare"] = {"objects_per_s": rate(n, seconds), "seconds": seconds}

    sample = min(n, 1000)
    log(f"sequential baseline: one object at a time (create, then PUT status), {sample} objects")
    make_namespaces(http, "seq")
    _, seconds = timed(lambda: write_all(http, objects(sample, "seq"), 1))
    results["write_sequential"] = {"objects_per_s": rate(sample, seconds), "seconds": seconds, "objects": sample}
    if shutil.which("kubectl"):
        results["write_kubectl"] = kubectl_baseline(cluster, work, min(n, 100))

    log(f"statusvault restore into empty namespaces (--parallel {PARALLEL})")
    mapping = ",".join(f"bench-{k}:restored-{k}" for k in range(NAMESPACES))
    seconds, rss, _ = run_cli(
        ["restore", "bench-dir", "--namespace-mapping", mapping, "--parallel", str(PARALLEL)], env
    )
    results["restore"] = {"objects_per_s": rate(n + NAMESPACES, seconds), "seconds": seconds, "peak_rss_mib": rss}

    log("statusvault restore with a 3-rule --modifiers file")
    (work / "modifiers.yaml").write_text(MODIFIERS)
    mapping = ",".join(f"bench-{k}:modified-{k}" for k in range(NAMESPACES))
    seconds, rss, _ = run_cli(
        ["restore", "bench-dir", "--namespace-mapping", mapping, "--parallel", str(PARALLEL), "--modifiers",
         str(work / "modifiers.yaml")],
        env,
    )  # fmt: skip
    results["restore_modifiers"] = {
        "objects_per_s": rate(n + NAMESPACES, seconds),
        "seconds": seconds,
        "peak_rss_mib": rss,
    }
    return results


MODIFIERS = f"""
version: v1
resourceModifierRules:
- conditions: {{groupResource: {PLURAL}.{GROUP}, matches: [{{path: /spec/region, value: eu-west-1}}]}}
  patches: [{{operation: replace, path: /spec/region, value: eu-central-1}}]
- conditions: {{groupResource: "*", labelSelector: {{matchLabels: {{app: bench}}}}}}
  mergePatches: [{{patchData: '{{"metadata": {{"labels": {{"shard": null}}}}}}'}}]
- conditions: {{groupResource: {PLURAL}.{GROUP}}}
  statusPatches: [{{operation: replace, path: /status/phase, value: Restored}}]
"""


def backup_to_s3(env: dict[str, str], n: int) -> dict[str, Any]:
    import boto3
    from moto.server import ThreadedMotoServer

    (port,) = _free_ports(1)
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=port, verbose=False)
    server.start()
    try:
        endpoint = f"http://127.0.0.1:{port}"
        s3env = {
            **env,
            "AWS_ACCESS_KEY_ID": "bench",
            "AWS_SECRET_ACCESS_KEY": "bench",
            "AWS_DEFAULT_REGION": "us-east-1",
        }
        boto3.client(
            "s3",
            endpoint_url=endpoint,
            region_name="us-east-1",
            aws_access_key_id="bench",
            aws_secret_access_key="bench",
        ).create_bucket(Bucket="bench")
        seconds, rss, _ = run_cli(
            [
                "backup",
                "bench-s3",
                "--storage",
                "s3://bench/sv",
                "--s3-endpoint-url",
                endpoint,
                "--s3-addressing-style",
                "path",
                "--include-resources",
                f"{PLURAL}.{GROUP}",
                "--no-include-crds",
            ],
            s3env,
        )
    finally:
        server.stop()
    return {"objects_per_s": rate(n, seconds), "seconds": seconds, "peak_rss_mib": rss}


def kubectl_baseline(cluster: LocalCluster, work: Path, sample: int) -> dict[str, Any]:
    """What a shell loop does: `kubectl create -f` then `kubectl replace --subresource=status -f`, per object."""
    log(f"kubectl loop baseline, {sample} objects")
    make_namespaces(Http(cluster.server, 1), "kctl")
    env = {**os.environ, "KUBECONFIG": str(cluster.kubeconfig)}
    start = time.perf_counter()
    for obj in objects(sample, "kctl"):
        path = work / "obj.json"
        path.write_bytes(orjson.dumps(obj))
        subprocess.run(["kubectl", "create", "-f", str(path)], env=env, check=True, capture_output=True)
        live = json.loads(
            subprocess.run(
                ["kubectl", "get", "-f", str(path), "-o", "json"], env=env, check=True, capture_output=True
            ).stdout
        )
        live["status"] = obj["status"]
        path.write_bytes(orjson.dumps(live))
        subprocess.run(
            ["kubectl", "replace", "--subresource=status", "-f", str(path)], env=env, check=True, capture_output=True
        )
    seconds = time.perf_counter() - start
    return {"objects_per_s": rate(sample, seconds), "seconds": seconds, "objects": sample}


def log(msg: str) -> None:
    print(f"[bench] {msg}", file=sys.stderr, flush=True)


def main() -> int:
    n = int(os.environ.get("BENCH_N", "10000"))
    out = Path(os.environ.get("BENCH_OUT", "bench/results.json"))
    with tempfile.TemporaryDirectory(prefix="statusvault-bench-") as tmp, LocalCluster.start() as cluster:
        from statusvault.kube.client import KubeClient
        from statusvault.kube.transport import load_transport

        install_crds(KubeClient(load_transport(str(cluster.kubeconfig))), [CRD])
        if os.environ.get("BENCH_ONLY") == "watch":  # the continuous-backup section alone
            from statusvault.testing import benchwatch

            watch = benchwatch.measure_watch(cluster, n, Path(tmp))
            print(benchwatch.table(watch))
            return _save(out, f"watch-{n}", {**watch, "machine": machine(), "table": benchwatch.table(watch)})
        results = measure(cluster, n, Path(tmp))
    results["machine"] = machine()
    results["date"] = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    table = report(results)
    print(table)
    out.parent.mkdir(parents=True, exist_ok=True)
    previous = json.loads(out.read_text()) if out.exists() else {}
    previous[str(n)] = {**results, "table": table}
    out.write_text(json.dumps(previous, indent=2))
    print(f"\nresults written to {out}")
    return 0


def _save(out: Path, key: str, results: dict[str, Any]) -> int:
    out.parent.mkdir(parents=True, exist_ok=True)
    previous = json.loads(out.read_text()) if out.exists() else {}
    previous[key] = {**results, "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}
    out.write_text(json.dumps(previous, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
