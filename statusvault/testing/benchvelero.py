"""`make bench`'s Velero section (BENCH_ONLY=velero): a synthetic Velero backup tarball of BENCH_VELERO_N objects
(format 1.1.0: the classic tree and the preferred-version copy of each object, as Velero writes them), imported
with `statusvault import-velero` in a process of its own: CPU per object and peak RSS, which must not grow with
the backup (the objects are spooled to disk, not held)."""

from __future__ import annotations

import io
import os
import sys
import tarfile
import time
from pathlib import Path
from typing import Any

import orjson

from statusvault.testing.benchcore import CRD, GROUP, NAMESPACES, PLURAL, item, log, per_1000, run_measured


def velero_tarball(path: Path, n: int) -> None:
    """n benchmark objects (status included) and their CRD, as a Velero backup tarball of format 1.1.0."""
    resource = f"{PLURAL}.{GROUP}"
    with tarfile.open(path, "w:gz", compresslevel=3) as tar:
        _add(tar, "metadata/version", b"1.1.0\n")
        crd = {**CRD, "apiVersion": "apiextensions.k8s.io/v1"}
        crds = "resources/customresourcedefinitions.apiextensions.k8s.io/cluster"
        _add(tar, f"{crds}/{resource}.json", orjson.dumps(crd))
        for i in range(n):
            ns = f"velero-{i * NAMESPACES // n}"
            obj = item(i, ns)
            obj["metadata"].update(uid=f"uid-{i:08d}", resourceVersion=str(i + 1), generation=1)
            data = orjson.dumps(obj)
            name = obj["metadata"]["name"]
            _add(tar, f"resources/{resource}/namespaces/{ns}/{name}.json", data)
            _add(tar, f"resources/{resource}/v1-preferredversion/namespaces/{ns}/{name}.json", data)


def _add(tar: tarfile.TarFile, name: str, data: bytes) -> None:
    info = tarfile.TarInfo(name)
    info.size, info.mtime = len(data), 1_700_000_000
    tar.addfile(info, io.BytesIO(data))


def measure_velero(env: dict[str, str], work: Path) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for n in (int(v) for v in os.environ.get("BENCH_VELERO_N", "10000,100000").split(",")):
        path = work / f"velero-{n}.tar.gz"
        log(f"a synthetic Velero backup of {n} objects (format 1.1.0, two copies of each)")
        start = time.perf_counter()
        velero_tarball(path, n)
        log(f"  written in {time.perf_counter() - start:.0f}s ({path.stat().st_size >> 20} MiB); import-velero")
        command = [sys.executable, "-m", "statusvault", "import-velero", str(path), "--name", f"velero-{n}"]
        run = run_measured([*command, "--allow-plaintext-secrets", "--storage", str(work / "store")], env)
        out[str(n)] = {
            "seconds": run.seconds,
            "cpu_ms_per_object": per_1000(run.cpu_seconds, n),
            "peak_rss_mib": run.peak_rss_mib,
            "tarball_mib": path.stat().st_size / (1 << 20),
        }
        path.unlink()
    return out


def table(results: dict[str, Any]) -> str:
    rows = [("import-velero", "objects", "seconds", "CPU ms/object", "peak RSS MiB")]
    for n, fig in results.items():
        rows.append(("", n, f"{fig['seconds']:.1f}", f"{fig['cpu_ms_per_object']:.3f}", f"{fig['peak_rss_mib']:.0f}"))
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    return "\n".join("  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip() for r in rows)
