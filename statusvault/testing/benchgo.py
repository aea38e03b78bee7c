"""The compiled reference for `make bench`: bench/goref, a Go program (standard library only: net/http,
encoding/json, compress/gzip) that does what the bare Python client does, built once per machine with the
machine's Go and measured the same way as a statusvault run (wall time, and CPU from wait4)."""

from __future__ import annotations

import functools
import hashlib
import os
import shutil
import subprocess
from pathlib import Path
from typing import Any

import orjson

from statusvault.testing.benchcore import GROUP, PARALLEL, PLURAL, cli_figures, log, objects, run_measured
from statusvault.testing.cluster import ADMIN_TOKEN, cache_dir

SOURCE = Path(__file__).resolve().parents[2] / "bench" / "goref"


@functools.cache  # asked by the backup and the restore section: built (or found missing) once a run
def goref_binary() -> Path | None:
    """The built reference (cached by its sources' hash), or None when there is no Go or no bench/ tree."""
    go = shutil.which("go")
    if go is None or not (SOURCE / "main.go").exists():
        log("no Go toolchain or no bench/goref sources: the compiled reference is left out")
        return None
    digest = hashlib.sha256(b"".join((SOURCE / f).read_bytes() for f in ("go.mod", "main.go"))).hexdigest()[:12]
    binary = cache_dir() / "bin" / f"statusvault-goref-{digest}"
    if not binary.exists():
        version = subprocess.run([go, "version"], capture_output=True, text=True).stdout.strip()
        log(f"building the Go reference with {version}")
        env = {**os.environ, "GOTOOLCHAIN": "local", "CGO_ENABLED": "0"}
        subprocess.run([go, "build", "-trimpath", "-o", str(binary), "."], cwd=SOURCE, env=env, check=True)
    return binary


def go_write(binary: Path, server: str, n: int, prefix: str, work: Path) -> dict[str, Any]:
    """create + PUT /status of n objects, PARALLEL in flight (the objects are written to a file first)."""
    source = work / f"{prefix}.jsonl"
    with source.open("wb") as f:
        for obj in objects(n, prefix):
            f.write(orjson.dumps(obj) + b"\n")
    args = ["write", "-path", f"/apis/{GROUP}/v1", "-plural", PLURAL, "-objects", str(source)]
    return _measured(binary, server, [*args, "-parallel", str(PARALLEL)], n)


def go_list(binary: Path, server: str, n: int, work: Path) -> dict[str, Any]:
    """Paginated LIST (limit 500) of every benchmark object, decoded and gzip-written, one stream."""
    return _measured(binary, server, ["list", "-path", f"/apis/{GROUP}/v1/{PLURAL}", "-out", str(work / "go.gz")], n)


def _measured(binary: Path, server: str, args: list[str], n: int) -> dict[str, Any]:
    run = run_measured([str(binary), args[0], "-server", server, "-token", ADMIN_TOKEN, *args[1:]], dict(os.environ))
    done = orjson.loads(run.out)["objects"]
    if done != n:
        raise RuntimeError(f"the Go reference did {done} objects, not {n}")
    return cli_figures(run, n)
