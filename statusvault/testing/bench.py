"""`make bench`: statusvault against the machine's own limits, measured side by side in one run.

Seeds BENCH_N custom resources (~2 KB, status included) over 10 namespaces of a local real cluster (Kubernetes
BENCH_KUBE: 1.20 unless told, or 1.36), then measures
bare-HTTP LIST and write baselines, `statusvault backup` (directory and S3), `restore` and `verify`, and prints one
table. Figures go to bench/results.json.
"""

from __future__ import annotations

import json
import logging
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import time
import types
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import orjson

from statusvault import installed_version
from statusvault.backup import LIST_CONCURRENCY
from statusvault.testing.benchcore import (
    CRD,
    GROUP,
    KIND,
    NAMESPACES,
    PARALLEL,
    PLURAL,
    Http,
    bare_list,
    bare_list_parallel,
    cli_figures,
    item,
    log,
    make_namespaces,
    moto_bucket,
    objects,
    rate,
    run_cli,
    timed,
    timed_cpu,
    with_bytecode,
    write_all,
)
from statusvault.testing.benchdeps import measure_dependencies
from statusvault.testing.benchdeps import table as deps_table
from statusvault.testing.benchgo import go_list, go_write, goref_binary
from statusvault.testing.benchown import own_work
from statusvault.testing.benchreport import report
from statusvault.testing.benchscale import first_write, keys, measure_scale
from statusvault.testing.benchscale import table as scale_table
from statusvault.testing.benchvelero import measure_velero
from statusvault.testing.benchvelero import table as velero_table
from statusvault.testing.cluster import DEFAULT_VERSION, RELEASES, LocalCluster
from statusvault.testing.fixtures import install_crds

logging.getLogger("werkzeug").setLevel(logging.ERROR)


KUBE_VERSION = os.environ.get("BENCH_KUBE", DEFAULT_VERSION)


def machine() -> dict[str, Any]:
    from importlib.metadata import version

    return {
        "cores": os.cpu_count(),
        "python": platform.python_version(),
        "platform": platform.platform(),
        "statusvault": installed_version(),
        "kubernetes": f"{RELEASES[KUBE_VERSION].git_version} (local kube-apiserver + etcd)",
        "urllib3": version("urllib3"),
        "orjson": orjson.__version__,
    }


def measure(cluster: LocalCluster, n: int, work: Path) -> dict[str, Any]:
    http = Http(cluster.server, PARALLEL)
    env = {
        **os.environ,
        "KUBECONFIG": str(cluster.kubeconfig),
        "STATUSVAULT_STORAGE": str(work / "store"),
        "STATUSVAULT_STATE_DIR": str(work / "state"),  # restore journals (removed once a restore finishes)
        # no wait before the restore reads the cluster back (restore/results/audit.py: a metadata-only LIST per
        # namespace and a whole read of what changed): its CPU is in the restore's, the row "its audit" says how much
        "STATUSVAULT_SETTLE_SECONDS": "0",
    }
    env = with_bytecode(env)
    results: dict[str, Any] = {"n": n, "parallel": PARALLEL, "list_concurrency": LIST_CONCURRENCY}
    if only("backup") or only("restore") or only("firstwrite") or only("cpu"):
        log(f"seeding {n} objects over {NAMESPACES} namespaces")
        make_namespaces(http, "bench")
        _, seconds = timed(lambda: write_all(http, objects(n, "bench"), PARALLEL))
        log(f"  seeded in {seconds:.0f}s")
    if only("backup"):
        measure_backup(http, env, n, work, results)
    if only("restore"):
        measure_restore(http, cluster, env, n, work, results)
    elif only("firstwrite"):  # the first writes of measure_restore alone (the seeded objects at 100k: minutes)
        results.update(first_writes(http, env, work))
    elif only("cpu"):  # the CPU rounds against Go of measure_restore alone (about 2 minutes a round at 10,000)
        go = goref_binary()
        if go is None:
            raise SystemExit("BENCH_ONLY=cpu measures against the Go reference: it needs Go on PATH")
        bench_backup(env, work)
        results["cpu_rounds"] = cpu_rounds(http, cluster, env, n, work, go)
    if only("planning"):
        results["planning"] = measure_planning(env, int(os.environ.get("BENCH_PLAN_N", "100000")), work)
    if only("scale"):
        results["scale"] = measure_scale(http, env, work)
    if only("dependencies"):
        results["dependencies"] = measure_dependencies(http, env, n, work)
    if only("velero"):
        results["velero"] = measure_velero(env, work)
    return results


def only(section: str) -> bool:
    """BENCH_ONLY=backup,restore,planning,scale,firstwrite,cpu,dependencies,velero runs just those sections (all by
    default; firstwrite and cpu are parts of restore)."""
    chosen = os.environ.get("BENCH_ONLY", "")
    return not chosen or section in chosen.split(",")


def measure_backup(http: Http, env: dict[str, str], n: int, work: Path, results: dict[str, Any]) -> None:
    log("bare HTTP LIST (limit 500) + JSON + gzip, one stream")
    results["list_bare"] = timed_cpu(lambda: bare_list(http, work / "bare.jsonl.gz"))
    log(f"bare HTTP LIST of {NAMESPACES} namespaces, {LIST_CONCURRENCY} at once")
    results["list_bare_parallel"] = timed_cpu(lambda: bare_list_parallel(http, work, LIST_CONCURRENCY))
    go = goref_binary()
    if go is not None:
        log("Go reference: LIST (limit 500) + JSON + gzip, one stream")
        results["list_go"] = go_list(go, http.server, n, work)
    for concurrency, processes in ((1, 1), (LIST_CONCURRENCY, 1), (LIST_CONCURRENCY, 2)):
        log(f"statusvault backup -> directory (--list-concurrency {concurrency} --processes {processes})")
        key = f"backup_dir_{concurrency}" + (f"_p{processes}" if processes > 1 else "")
        name = key.replace("backup_dir_", "bench-dir-").replace("_", "-")
        args = ["backup", name, "--include-resources", f"{PLURAL}.{GROUP}", "--no-include-crds"]
        run = run_cli([*args, "--list-concurrency", str(concurrency), "--processes", str(processes)], env)
        results[key] = cli_figures(run, n)
    results["backup_dir"] = results[f"backup_dir_{LIST_CONCURRENCY}"]
    log("statusvault backup -> S3 (moto server over HTTP)")
    results["backup_s3"] = backup_to_s3(env, n)
    log("statusvault verify")
    results["verify"] = cli_figures(run_cli(["verify", "bench-dir-1"], env), n)


def measure_restore(
    http: Http, cluster: LocalCluster, env: dict[str, str], n: int, work: Path, results: dict[str, Any]
) -> None:
    bench_backup(env, work)
    log(f"bare HTTP create + PUT status, {PARALLEL} threads")
    make_namespaces(http, "bare")
    results["write_bare"] = timed_cpu(lambda: write_all(http, objects(n, "bare"), PARALLEL))
    go = goref_binary()
    if go is not None:
        log(f"Go reference: create + PUT status, {PARALLEL} goroutines")
        make_namespaces(http, "gowrite")
        results["write_go"] = go_write(go, cluster.server, n, "gowrite", work)

    sample = min(n, 1000)
    log(f"sequential baseline: one object at a time (create, then PUT status), {sample} objects")
    make_namespaces(http, "seq")
    _, seconds = timed(lambda: write_all(http, objects(sample, "seq"), 1))
    results["write_sequential"] = {"objects_per_s": rate(sample, seconds), "seconds": seconds, "objects": sample}
    if shutil.which("kubectl"):
        results["write_kubectl"] = kubectl_baseline(cluster, work, min(n, 100))

    for processes in PROCESSES:
        log(f"statusvault restore into empty namespaces (--processes {processes} --parallel {PARALLEL})")
        results[f"restore_p{processes}"] = restore_figures(env, n, f"p{processes}", "--processes", str(processes))
    results["restore"] = results[f"restore_p{PROCESSES[0]}"]

    log("statusvault restore --stream (writes as it reads the archive)")
    results["restore_stream"] = restore_figures(env, n, "streamed", "--processes", str(PROCESSES[0]), "--stream")

    results.update(first_writes(http, env, work))

    log("statusvault restore with a 3-rule --modifiers file")
    (work / "modifiers.yaml").write_text(MODIFIERS)
    results["restore_modifiers"] = restore_figures(
        env, n, "modified", "--processes", str(PROCESSES[0]), "--modifiers", str(work / "modifiers.yaml")
    )
    for parallel in (1, PARALLEL):
        log(f"the restore's own work: its writes answered in-process, {parallel} writer thread(s)")
        results[f"own_work_{parallel}"] = own_work(env, n, NAMESPACES, parallel)
    if go is not None:
        results["cpu_rounds"] = cpu_rounds(http, cluster, env, n, work, go)


def bench_backup(env: dict[str, str], work: Path) -> None:
    """bench-dir-1, the backup of the seeded objects every restore row restores (made once a run)."""
    if not (work / "store" / "backups" / "bench-dir-1").exists():
        run_cli(["backup", "bench-dir-1", "--include-resources", f"{PLURAL}.{GROUP}", "--no-include-crds"], env)


def first_writes(http: Http, env: dict[str, str], work: Path) -> dict[str, Any]:
    """The seeded objects backed up from the server encrypted and signed, each restored with the default options
    and its key: the time from the restore's start to its first object on the server."""
    key, signer = keys(work)
    seeded = ",".join(f"bench-{k}" for k in range(NAMESPACES))  # not what restores before this wrote elsewhere
    selection = ["--include-resources", f"{PLURAL}.{GROUP}", "--no-include-crds", "--namespace", seeded]
    out = {}
    for how, made, given in (
        ("encrypted", ["--encryption-key-file", str(key)], ["--encryption-key-file", str(key)]),
        ("signed", ["--signing-key-file", str(signer)], ["--verify-key-file", f"{signer}.pub"]),
    ):
        log(f"the seeded objects backed up {how} (a real backup LISTed from the server), restored with the default "
            "options: time to the first object on the server")  # fmt: skip
        if not (work / "store" / "backups" / f"bench-{how}").exists():
            run_cli(["backup", f"bench-{how}", *selection, *made], env)
        out[f"first_write_{how}"] = first_write(http, env, f"bench-{how}", f"first-{how}", given, "bench")
    return out


def cpu_rounds(
    http: Http, cluster: LocalCluster, env: dict[str, str], n: int, work: Path, go: Path
) -> dict[str, list[float]]:
    """The restore's CPU per object against the Go writer's, with the default options (what users run) and with
    --processes 1, in BENCH_CPU_ROUNDS (default 5) alternated rounds: on a shared VM one row can differ by 20 % from
    the next, so ratios from rows taken side by side, and their spread, say more than one row against another.

    The three runs take turns at going first (the one right after a busy run may meet a server still busy with it),
    and each round's objects are deleted before the next: a server's rate falls as its etcd fills, CPU per object
    follows the rate, and every round should meet the server as the first did (the seeded objects and nothing
    more) instead of drifting slower round by round."""
    rounds = int(os.environ.get("BENCH_CPU_ROUNDS", "5"))
    figures: dict[str, list[float]] = {"default": [], "restore": [], "go": [], "default_rate": [], "go_rate": []}
    figures["default_processes"] = []  # the worker processes each default run started (0: its own threads only)
    runs = list(CPU_RUNS)
    for r in range(rounds):
        order = runs[r % len(runs) :] + runs[: r % len(runs)]
        log(f"CPU round {r + 1}/{rounds}: " + ", then ".join(CPU_RUNS[k] for k in order))
        make_namespaces(http, f"gocpu{r}")
        measured = {}
        for key in order:
            if key == "go":
                measured[key] = go_write(go, cluster.server, n, f"gocpu{r}", work)
            else:  # "default" (no --processes: what users run) or "one" (--processes 1)
                measured[key] = restore_figures(env, n, f"cpu{key}{r}", *(("--processes", "1") if key == "one" else ()))
        figures["default"].append(measured["default"]["cpu_ms_per_object"])
        figures["default_rate"].append(measured["default"]["objects_per_s"])
        figures["default_processes"].append(measured["default"]["processes"])
        figures["restore"].append(measured["one"]["cpu_ms_per_object"])
        figures["go"].append(measured["go"]["cpu_ms_per_object"])
        figures["go_rate"].append(measured["go"]["objects_per_s"])
        delete_objects(http, (f"cpudefault{r}", f"cpuone{r}", f"gocpu{r}"))
    return figures


CPU_RUNS = {  # a round's runs, in the first round's order
    "default": "statusvault restore with the default options",
    "one": "statusvault restore --processes 1",
    "go": "the Go writer",
}


def delete_objects(http: Http, prefixes: tuple[str, ...]) -> None:
    """Every benchmark object in the namespaces PREFIX-k of each prefix, one DELETE of the collection per namespace,
    four at once (the server deletes a collection one object at a time: 1,000 objects take about 2.5 s)."""
    collections = [
        f"/apis/{GROUP}/v1/namespaces/{prefix}-{k}/{PLURAL}" for prefix in prefixes for k in range(NAMESPACES)
    ]
    with ThreadPoolExecutor(4) as pool:
        list(pool.map(lambda path: http.call("DELETE", path), collections))


PROCESSES = (1, 2, 4)


def restore_figures(env: dict[str, str], n: int, prefix: str, *extra: str) -> dict[str, Any]:
    """One restore of the benchmark backup into fresh namespaces; its -o json report gives the timings."""
    mapping = ",".join(f"bench-{k}:{prefix}-{k}" for k in range(NAMESPACES))
    args = ["restore", "bench-dir-1", "--namespace-mapping", mapping, "--parallel", str(PARALLEL), "-o", "json"]
    run = run_cli([*args, *extra], env)
    head = json.loads(run.out[: run.out.index('"items": [')].rstrip().rstrip(",") + "}")
    audit = head.get("audit") or {}
    return {**cli_figures(run, n + NAMESPACES), "timings": head.get("timings", {}), "processes": head["processes"],
            "audit": audit}  # fmt: skip


class SyntheticLister:
    """What the backup engine needs of a cluster, answering LISTs with generated objects: a backup of any
    size in seconds, written by the real engine, for measuring what a restore does before its first write."""

    transport = types.SimpleNamespace(host="https://synthetic.invalid")
    server = "https://synthetic.invalid"

    def __init__(self, n: int):
        self.n = n

    def server_version(self) -> dict[str, Any]:
        return {"gitVersion": "v1.20.2"}

    def list_pages(self, rt: Any, namespace: str | None, selector: str = "", limit: int = 500) -> Iterator[Any]:
        for start in range(0, self.n, limit):
            page = []
            for i in range(start, min(self.n, start + limit)):
                obj = item(i, f"plan-{i * NAMESPACES // self.n}")  # etcd's order: namespace, then name
                obj["metadata"].update(uid=f"uid-{i:08d}", resourceVersion=str(i + 1), generation=1)
                page.append(obj)
            yield page


def synthetic_backup(store: Any, name: str, n: int, **request: Any) -> Any:
    """A backup of n generated benchmark objects, written by the real backup engine; returns its result.
    `request`: BackupRequest's other fields (key, signer)."""
    from statusvault.backup import BackupEngine, BackupRequest
    from statusvault.kube.discovery import Discovery
    from statusvault.model import ResourceType, Selection

    rt = ResourceType(GROUP, "v1", PLURAL, KIND, True, has_status=True, custom=True, verbs=("list", "create"))
    selection = Selection(include_resources=(rt.qualified,), include_crds=False)
    backup = BackupRequest(store=store, name=name, selection=selection, **request)
    return BackupEngine(SyntheticLister(n), Discovery([rt], [rt]), backup).run()  # type: ignore[arg-type]


def measure_planning(env: dict[str, str], n: int, work: Path) -> dict[str, Any]:
    """Time to first write: a restore of n objects plans (reads, checks and decides every object) before it
    writes anything. A client dry run of a synthetic n-object backup runs exactly that planning."""
    from statusvault.storage.local import LocalStore

    log(f"planning a restore of {n} objects (synthetic backup made by the backup engine)")
    synthetic_backup(LocalStore(work / "store"), "plan-bench", n)
    mapping = ",".join(f"plan-{k}:planned-{k}" for k in range(NAMESPACES))
    run = run_cli(["restore", "plan-bench", "--namespace-mapping", mapping, "--dry-run", "client", "-o", "json"], env)
    head = json.loads(run.out[: run.out.index('"items": [')].rstrip().rstrip(",") + "}")
    return {"objects": n, "planned_seconds": head["timings"]["planned"], "peak_rss_mib": run.peak_rss_mib}


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
    with moto_bucket(env) as (endpoint, s3env):
        args = ["backup", "bench-s3", "--storage", "s3://bench/sv", "--s3-endpoint-url", endpoint]
        args += ["--s3-addressing-style", "path", "--include-resources", f"{PLURAL}.{GROUP}", "--no-include-crds"]
        run = run_cli(args, s3env)
    return cli_figures(run, n)


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


def main() -> int:
    n = int(os.environ.get("BENCH_N", "10000"))
    out = Path(os.environ.get("BENCH_OUT", "bench/results.json"))
    with (
        tempfile.TemporaryDirectory(prefix="statusvault-bench-") as tmp,
        LocalCluster.start(version=KUBE_VERSION) as cluster,
    ):
        from statusvault.kube.client import KubeClient
        from statusvault.kube.transport import load_transport

        install_crds(KubeClient(load_transport(str(cluster.kubeconfig))), [CRD])
        if os.environ.get("BENCH_ONLY") == "writers":  # the writer models alone (benchwriters.py)
            from statusvault.testing import benchwriters

            rounds = int(os.environ.get("BENCH_CPU_ROUNDS", "5"))
            writers = benchwriters.measure_writers(cluster, n, rounds)
            print(benchwriters.table(writers))
            return _save(out, f"writers-{n}", {**writers, "machine": machine(), "table": benchwriters.table(writers)})
        if os.environ.get("BENCH_ONLY") == "watch":  # the continuous-backup section alone
            from statusvault.testing import benchwatch

            watch = benchwatch.measure_watch(cluster, n, Path(tmp))
            print(benchwatch.table(watch))
            return _save(out, f"watch-{n}", {**watch, "machine": machine(), "table": benchwatch.table(watch)})
        results = measure(cluster, n, Path(tmp))
    results["machine"] = machine()
    results["date"] = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    table = report(results)
    if "scale" in results:
        table += "\n\n" + scale_table(results["scale"])
    if "dependencies" in results:
        table += "\n\n" + deps_table(results["dependencies"])
    if "velero" in results:
        table += "\n\n" + velero_table(results["velero"])
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
