"""The `dependencies` section of `make bench` (BENCH_ONLY=dependencies): a backup of N custom resources (BENCH_N,
10,000 by default), each naming a Secret of its own (`spec.credentialsSecretRef`), taken without and with
--with-dependencies, encrypted: what following the references costs in time, CPU per selected object and peak
memory (docs/development/benchmarks.md)."""

from __future__ import annotations

import base64
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from statusvault.testing.benchcore import (
    GROUP,
    NAMESPACES,
    PARALLEL,
    PLURAL,
    Http,
    cli_figures,
    item,
    log,
    make_namespaces,
    run_cli,
)
from statusvault.testing.benchscale import keys

PREFIX = "deps"


def seed(http: Http, n: int) -> None:
    """N items over the namespaces, each with its Secret."""
    make_namespaces(http, PREFIX)

    def one(i: int) -> None:
        ns = f"{PREFIX}-{i % NAMESPACES}"
        obj = item(i, ns)
        obj["spec"]["credentialsSecretRef"] = {"name": f"creds-{i:06d}"}
        secret = {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": f"creds-{i:06d}", "namespace": ns},
                  "data": {"password": base64.b64encode(f"pw-{i}".encode()).decode()}}  # fmt: skip
        http.call("POST", f"/api/v1/namespaces/{ns}/secrets", secret)
        http.create_with_status(obj)

    with ThreadPoolExecutor(PARALLEL) as pool:
        list(pool.map(one, range(n)))


def measure_dependencies(http: Http, env: dict[str, str], n: int, work: Path) -> dict[str, Any]:
    log(f"seeding {n} objects, each with a Secret it names, over {NAMESPACES} namespaces")
    seed(http, n)
    key, _ = keys(work)
    namespaces = ",".join(f"{PREFIX}-{k}" for k in range(NAMESPACES))
    args = ["--include-resources", f"{PLURAL}.{GROUP}", "--no-include-crds", "-n", namespaces]
    args += ["--encryption-key-file", str(key)]
    out: dict[str, Any] = {"n": n}
    for label, extra in (("without", []), ("with", ["--with-dependencies"])):
        log(f"statusvault backup of {n} objects {label} their dependencies (encrypted)")
        out[label] = cli_figures(run_cli(["backup", f"deps-{label}", *args, *extra], env), n)  # raises if it fails
    return out


def table(figures: dict[str, Any]) -> str:
    """The section's lines: each backup's time, CPU per selected object and peak RSS, and the difference."""
    n, without, with_ = figures["n"], figures["without"], figures["with"]
    rows = [
        f"Dependencies: backup of {n:,} objects, each naming a Secret of its own (encrypted)",
        f"  {'':26}{'seconds':>10}{'CPU ms/object':>15}{'peak RSS MiB':>14}",
    ]
    for label, f in (("without dependencies", without), ("--with-dependencies", with_)):
        rows.append(f"  {label:26}{f['seconds']:>10.2f}{f['cpu_ms_per_object']:>15.3f}{f['peak_rss_mib']:>14.0f}")
    extra = with_["cpu_ms_per_object"] - without["cpu_ms_per_object"]
    rows.append(f"  following the references (and archiving {n:,} Secrets) costs {extra:.3f} ms CPU per object")
    return "\n".join(rows)
