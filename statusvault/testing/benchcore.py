"""The benchmark's parts: its objects, the bare-HTTP baselines, and how a statusvault run is measured."""

from __future__ import annotations

import contextlib
import dataclasses
import gzip
import os
import resource
import subprocess
import sys
import sysconfig
import tempfile
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import orjson
import urllib3

from statusvault.testing.cluster import ADMIN_TOKEN

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


def bare_list(http: Http, out: Path, path: str = f"/apis/{GROUP}/v1/{PLURAL}") -> int:
    """Paginated LIST (limit 500), JSON-decoded, each object gzip-written: no statusvault code."""
    count, token = 0, ""
    with gzip.open(out, "wb", compresslevel=3) as gz:
        while True:
            page = http.call("GET", f"{path}?limit=500" + (f"&continue={token}" if token else ""))
            for obj in page["items"]:
                gz.write(orjson.dumps(obj))
                count += 1
            token = page["metadata"].get("continue") or ""
            if not token:
                return count


@dataclasses.dataclass
class CliRun:
    seconds: float
    peak_rss_mib: float  # of the main process (worker processes have their own)
    cpu_seconds: float  # user + system of the process and every process it waited for (its workers)
    out: str


def with_bytecode(env: dict[str, str]) -> dict[str, str]:
    """The environment for measured statusvault runs: its modules' bytecode compiled once and read, as an
    installed program has it (pip compiles at install time, else the first run writes __pycache__).

    With PYTHONDONTWRITEBYTECODE set (as in some CI and sandbox environments) every run compiled statusvault and
    its dependencies again, ~0.17 s of CPU a run that a Go binary never spends."""
    env = {k: v for k, v in env.items() if k != "PYTHONDONTWRITEBYTECODE"}
    sources = [str(Path(__file__).resolve().parents[1]), sysconfig.get_paths()["purelib"]]
    subprocess.run([sys.executable, "-m", "compileall", "-q", "-j", "0", *sources], env=env, capture_output=True)
    return env


def run_cli(args: list[str], env: dict[str, str]) -> CliRun:
    """Run statusvault in its own process, measured (run_measured)."""
    return run_measured([sys.executable, "-m", "statusvault", *args], env)


def run_measured(command: list[str], env: dict[str, str]) -> CliRun:
    """Run a command; measure wall time, peak RSS and the CPU it and its workers used.

    Peak RSS is VmHWM read from /proc while it runs: rusage's ru_maxrss would include the RSS of this (large)
    parent, which Linux carries across fork and exec. CPU comes from wait4's rusage of that one child.
    """
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        start = time.perf_counter()
        proc = subprocess.Popen(command, env=env, stdout=out, stderr=err)
        peak = 0
        while True:
            pid, status, usage = os.wait4(proc.pid, os.WNOHANG)
            if pid:
                break
            peak = max(peak, vm_hwm_kib(proc.pid))
            time.sleep(0.01)
        seconds = time.perf_counter() - start
        proc.returncode = os.waitstatus_to_exitcode(status)
        out.seek(0)
        err.seek(0)
        if proc.returncode != 0:
            raise RuntimeError(f"{' '.join(command[:6])} ... failed: {err.read().decode()[-2000:]}")
        return CliRun(seconds, peak / 1024, usage.ru_utime + usage.ru_stime, out.read().decode())


def cpu_now() -> float:
    """CPU seconds this (bench) process has used so far: the bare-HTTP baselines run in it."""
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def per_1000(cpu_seconds: float, n: int) -> float:
    return 1000 * cpu_seconds / n if n else 0.0


def vm_hwm_kib(pid: int) -> int:
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1])
    except OSError:
        pass
    return 0


def rate(n: int, seconds: float) -> float:
    return n / seconds if seconds > 0 else 0.0


def timed_cpu(fn: Callable[[], int]) -> dict[str, float]:
    """Run a bare-HTTP baseline in this process: objects/s, seconds, and its CPU per 1,000 objects."""
    cpu = cpu_now()
    n, seconds = timed(fn)
    return {"objects_per_s": rate(n, seconds), "seconds": seconds, "cpu_ms_per_object": per_1000(cpu_now() - cpu, n)}


def cli_figures(run: CliRun, n: int) -> dict[str, float]:
    return {
        "objects_per_s": rate(n, run.seconds),
        "seconds": run.seconds,
        "peak_rss_mib": run.peak_rss_mib,
        "cpu_ms_per_object": per_1000(run.cpu_seconds, n),
    }


def bare_list_parallel(http: Http, work: Path, concurrency: int) -> int:
    """The bare LIST baseline, one stream per namespace, `concurrency` at once."""

    def one(k: int) -> int:
        return bare_list(http, work / f"bare-{k}.jsonl.gz", f"/apis/{GROUP}/v1/namespaces/bench-{k}/{PLURAL}")

    with ThreadPoolExecutor(concurrency) as pool:
        return sum(pool.map(one, range(NAMESPACES)))


def log(msg: str) -> None:
    print(f"[bench] {msg}", file=sys.stderr, flush=True)


@contextlib.contextmanager
def moto_bucket(env: dict[str, str]) -> Iterator[tuple[str, dict[str, str]]]:
    """A moto S3 server over HTTP on loopback with an empty bucket "bench": its endpoint, and `env` with the
    credentials and region a statusvault process needs to reach it."""
    import boto3
    from moto.server import ThreadedMotoServer

    from statusvault.testing.controlplane import free_ports

    (port,) = free_ports(1)
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=port, verbose=False)
    server.start()
    try:
        endpoint = f"http://127.0.0.1:{port}"
        creds = {"AWS_ACCESS_KEY_ID": "bench", "AWS_SECRET_ACCESS_KEY": "bench", "AWS_DEFAULT_REGION": "us-east-1"}
        client = boto3.client(
            "s3",
            endpoint_url=endpoint,
            region_name="us-east-1",
            aws_access_key_id="bench",
            aws_secret_access_key="bench",
        )
        client.create_bucket(Bucket="bench")
        yield endpoint, {**env, **creds}
    finally:
        server.stop()
