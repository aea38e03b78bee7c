"""`make bench` at scale without seeding a cluster (BENCH_ONLY=scale): synthetic backups (bench.synthetic_backup:
the real backup engine over a generated read side) of each BENCH_SCALE_N size, then per size: the backup itself
to a directory and to a moto S3 server over HTTP (CPU per object, peak RSS), `verify`, planning (a client dry
run: time to first write when planning first) and a streamed restore (`restore --stream`, the default for an
encrypted backup above runner.STREAM_ABOVE objects) into the real cluster, timed from its start to the first
object the server holds, its RSS sampled for BENCH_STREAM_SECONDS and then stopped; and the same backup made
encrypted and signed, each restored with the default options and its key (both stream by default), timed the
same way."""

from __future__ import annotations

import base64
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from statusvault.testing.benchcore import (
    GROUP,
    NAMESPACES,
    PLURAL,
    Http,
    cli_figures,
    log,
    moto_bucket,
    run_cli,
    run_measured,
    vm_hwm_kib,
)


def measure_scale(http: Http, env: dict[str, str], work: Path) -> dict[str, Any]:
    sizes = [int(s) for s in os.environ.get("BENCH_SCALE_N", "10000,100000").split(",") if s]
    return {str(n): measure_size(http, env, work, n) for n in sizes}


def measure_size(http: Http, env: dict[str, str], work: Path, n: int) -> dict[str, Any]:
    """Each measurement BENCH_SCALE_PARTS names (default: all of backup,s3,verify,planning,stream,authenticated)."""
    name = f"scale-{n}"
    parts = set(os.environ.get("BENCH_SCALE_PARTS", "backup,s3,verify,planning,stream,authenticated").split(","))
    log(f"synthetic backup of {n} objects (the backup engine over a generated read side)")
    built = run_measured(
        [sys.executable, "-m", "statusvault.testing.benchscale", str(work / "store"), name, str(n)], env
    )
    out: dict[str, Any] = {"objects": n, "backup_dir": cli_figures(built, n)}
    if "s3" in parts:
        log(f"synthetic backup of {n} objects to S3 (moto server over HTTP)")
        with moto_bucket(env) as (endpoint, s3env):
            command = [sys.executable, "-m", "statusvault.testing.benchscale", "s3://bench/sv", name, str(n)]
            out["backup_s3"] = cli_figures(run_measured(command, {**s3env, "BENCH_S3_ENDPOINT": endpoint}), n)
    if "verify" in parts:
        log(f"verify of {n} objects")
        out["verify"] = cli_figures(run_cli(["verify", name], env), n)
    if "planning" in parts:
        log(f"planning a restore of {n} objects (client dry run)")
        mapping = ",".join(f"plan-{k}:planned{n}-{k}" for k in range(NAMESPACES))
        run = run_cli(["restore", name, "--namespace-mapping", mapping, "--dry-run", "client", "-o", "json"], env)
        head = json.loads(run.out[: run.out.index('"items": [')].rstrip().rstrip(",") + "}")
        out["planning"] = {**cli_figures(run, n), "planned_seconds": head["timings"]["planned"]}
    if "stream" in parts:
        log(f"streamed restore of {n} objects: time to the first object on the server")
        out["stream"] = first_write(http, env, name, f"streamed{n}", ["--stream"])
    if "authenticated" in parts:
        for how, args in authenticated_backups(work, name):
            log(f"restore of {n} objects, {how}, default options: time to the first object on the server")
            out[f"default_{how}"] = first_write(http, env, f"{name}-{how}", f"{how}{n}", args)
    return out


def keys(work: Path) -> tuple[Path, Path]:
    """The bench's encryption key file and signing key (made once per work directory)."""
    key, signer = work / "bench.key", work / "bench-signing.pem"
    if not key.exists():
        from statusvault.archive import signing

        key.write_text(base64.b64encode(os.urandom(32)).decode())
        signing.generate(signer)
    return key, signer


def authenticated_backups(work: Path, name: str) -> list[tuple[str, list[str]]]:
    """The synthetic backup `name` made again encrypted (a key file) and signed (a signing key file), in the same
    store; returns (how, the restore's arguments that open or verify it). Made in this process: not measured."""
    from statusvault.archive import signing
    from statusvault.archive.crypto import Key
    from statusvault.archive.envelope import FileKek, Keyring
    from statusvault.storage.local import LocalStore
    from statusvault.testing.bench import synthetic_backup

    key, signer = keys(work)
    store, n = LocalStore(work / "store"), int(name.rsplit("-", 1)[1])
    synthetic_backup(store, f"{name}-encrypted", n, key=Keyring((FileKek(Key.from_file(key)),)))
    synthetic_backup(store, f"{name}-signed", n, signer=signing.FileSigner.from_file(signer))
    return [("encrypted", ["--encryption-key-file", str(key)]), ("signed", ["--verify-key-file", f"{signer}.pub"])]


def first_write(
    http: Http, env: dict[str, str], name: str, prefix: str, extra: list[str], source: str = "plan"
) -> dict[str, Any]:
    """Start a restore (with `extra`: --stream for the plaintext synthetic backup, which streams only when asked;
    a key for an encrypted or signed one, which streams by default), poll the server for the first object it
    wrote; then sample its peak RSS for BENCH_STREAM_SECONDS (default 15) while it writes, and stop it."""
    mapping = ",".join(f"{source}-{k}:{prefix}-{k}" for k in range(NAMESPACES))
    args = ["restore", name, *extra, "--namespace-mapping", mapping, "--parallel", "16", "--processes", "1"]
    started = time.perf_counter()
    proc = subprocess.Popen(
        [sys.executable, "-m", "statusvault", *args], env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )
    first, peak = 0.0, 0
    path = f"/apis/{GROUP}/v1/namespaces/{prefix}-0/{PLURAL}?limit=1"
    seconds = float(os.environ.get("BENCH_STREAM_SECONDS", "15"))
    try:
        while not first and proc.poll() is None:
            peak = max(peak, vm_hwm_kib(proc.pid))
            try:
                if http.call("GET", path)["items"]:
                    first = time.perf_counter() - started
            except RuntimeError:  # its namespace is not there yet
                pass
            time.sleep(0.02)
        while proc.poll() is None and time.perf_counter() - started < first + seconds:
            peak = max(peak, vm_hwm_kib(proc.pid))
            time.sleep(0.1)
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGINT)
            proc.wait(60)
    return {"first_write_seconds": first, "peak_rss_mib": peak / 1024, "sampled_seconds": seconds}


def _first(r: dict[str, Any], key: str) -> str:
    return f"{r[key]['first_write_seconds']:.2f}s" if key in r else "-"


def table(results: dict[str, Any]) -> str:
    lines = [
        "size       backup ms/obj  RSS   backup S3 ms/obj  RSS   verify ms/obj  RSS   planning s  ms/obj  RSS   "
        "stream first write   RSS   default first write: encrypted  signed"
    ]
    for n, r in results.items():
        cells = [f"{n:<10}", _cpu(r, "backup_dir", 14), _cpu(r, "backup_s3", 17), _cpu(r, "verify", 14)]
        p = r.get("planning")
        cells.append(f"{p['planned_seconds']:<11.1f} {p['cpu_ms_per_object']:<7.3f} {p['peak_rss_mib']:<5.0f}" if p
                     else f"{'-':<11} {'-':<7} {'-':<5}")  # fmt: skip
        s = r.get("stream")
        cells.append(f"{s['first_write_seconds']:<20.2f} {s['peak_rss_mib']:<5.0f}" if s else f"{'-':<20} {'-':<5}")
        cells.append(f"{_first(r, 'default_encrypted'):<30} {_first(r, 'default_signed')}")
        lines.append(" ".join(cells))
    return "\n".join(lines)


def _cpu(r: dict[str, Any], key: str, width: int) -> str:
    fig = r.get(key)
    return f"{fig['cpu_ms_per_object']:<{width}.3f} {fig['peak_rss_mib']:<5.0f}" if fig else f"{'-':<{width}} {'-':<5}"


if __name__ == "__main__":  # the synthetic backup, in a process of its own so that it is measured alone
    from statusvault.storage import S3Options, open_store
    from statusvault.testing.bench import synthetic_backup

    s3 = S3Options(endpoint_url=os.environ.get("BENCH_S3_ENDPOINT"), addressing_style="path")
    synthetic_backup(open_store(sys.argv[1], s3), sys.argv[2], int(sys.argv[3]))
