"""S3 faults never leave a backup that `list` shows as Completed but that does not verify: the real API server,
moto's S3 server behind a fault-injecting proxy (500 InternalError, 503 SlowDown, resets, answers lost after
S3 acted) on PutObject, UploadPart, CompleteMultipartUpload and GetObject. What `list` and `verify` say is read
straight from moto, past the proxy."""

from __future__ import annotations

import base64
import json
import os
import subprocess
import sys
from collections.abc import Iterator
from typing import Any

import boto3
import orjson
import pytest

from statusvault.errors import ExitStatus
from statusvault.testing.fixtures import create_with_status, ensure_namespace
from statusvault.vocabulary.kinds import NAMESPACES
from tests.builders import cr, unique
from tests.conftest import CliResult
from tests.faultproxy import FaultProxy, s3_operation
from tests.integration.crs.test_backup import s3_args

pytestmark = pytest.mark.version_neutral("S3 faults: the API server is only where the restore lands")

WIDGETS = "widgets.example.com"
ERRORS = ("500", "503", "reset")  # the request is refused or never reaches S3
WRITE_OPS = ("PutObject", "UploadPart", "CompleteMultipartUpload")


@pytest.fixture(scope="module")
def small(kube, crds) -> Iterator[str]:
    """20 Widgets with status: an archive of a few KiB, written with one PutObject."""
    ns = unique("s3small")
    ensure_namespace(kube, ns)
    for i in range(20):
        body = cr("example.com/v1", "Widget", f"w-{i}", spec={"size": i}, status={"state": "On", "n": i})
        create_with_status(kube, crds, body, ns)
    yield ns
    kube.delete(NAMESPACES, None, ns)


@pytest.fixture(scope="module")
def large(kube, crds) -> Iterator[str]:
    """14 Widgets with ~1 MB of incompressible status each: ~10.5 MB of archive, two 8 MiB parts."""
    ns = unique("s3large")
    ensure_namespace(kube, ns)
    for i in range(14):
        blob = base64.b64encode(os.urandom(750_000)).decode()
        create_with_status(kube, crds, cr("example.com/v1", "Widget", f"big-{i}", status={"blob": blob}), ns)
    yield ns
    kube.delete(NAMESPACES, None, ns)


def widgets(kube, crds, ns: str) -> dict[str, Any]:
    rt = crds.resolve(WIDGETS)
    objs = [o for page in kube.list_pages(rt, ns) for o in page]
    return {o["metadata"]["name"]: (o.get("spec"), o.get("status"), o["metadata"].get("labels")) for o in objs}


def cli(run, cluster, *args: str) -> CliResult:
    """The CLI in its own process: what it prints at exit (garbage collection included) is seen too."""
    env = {**os.environ, "STATUSVAULT_STORAGE": str(run.storage), "STATUSVAULT_STATE_DIR": str(run.state)}
    argv = [sys.executable, "-m", "statusvault", "--kubeconfig", str(cluster.kubeconfig), *args]
    proc = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=300)
    return CliResult(proc.returncode, proc.stdout, proc.stderr)


def listed(run, storage: str, endpoint: str) -> dict[str, str]:
    """Backup name -> phase, as `statusvault list` reads it from the store itself (no faults)."""
    result = run("list", "--storage", storage, *s3_args(endpoint), "-o", "json")
    assert result.code == ExitStatus.SUCCESS, result.err
    return {b["name"]: b["phase"] for b in json.loads(result.out)}


def assert_clean_failure(result) -> None:
    assert result.code == ExitStatus.ERROR, result.out + result.err
    lines = result.err.strip().splitlines()  # progress is logged before it as INFO lines
    assert lines[-1].startswith("error: ") and all(line.startswith("INFO ") for line in lines[:-1]), result.err
    assert "Traceback" not in result.err and "unexpected" not in result.err, result.err


def assert_completed_and_verifies(run, storage: str, endpoint: str, name: str) -> None:
    assert listed(run, storage, endpoint).get(name) == "Completed", name
    verified = run("verify", name, "--storage", storage, *s3_args(endpoint))
    assert verified.code == ExitStatus.SUCCESS, f"{name} is listed as Completed but does not verify: {verified.out}"


def leftovers(bucket: str, endpoint: str, name: str) -> list[str]:
    """Objects and unfinished multipart uploads of one backup."""
    s3 = boto3.client("s3", endpoint_url=endpoint, region_name="us-east-1")
    prefix = f"team/backups/{name}/"
    keys = [o["Key"] for o in s3.list_objects_v2(Bucket=bucket, Prefix=prefix).get("Contents") or []]
    uploads = s3.list_multipart_uploads(Bucket=bucket, Prefix=prefix).get("Uploads") or []
    return keys + [f"upload of {u['Key']}" for u in uploads]


def faults_on(proxy: FaultProxy, op: str) -> int:
    return sum(n for (name, fault), n in proxy.by_operation.items() if name == op and fault)


def record_figures(test: str, proxy: FaultProxy, **figures: Any) -> None:
    """Figures for docs/reliability.md, printed with -s."""
    by_op: dict[str, dict[str, int]] = {}
    for (op, fault), n in sorted(proxy.by_operation.items()):
        by_op.setdefault(op, {})[fault or "clean"] = n
    print("s3-fault-harness", orjson.dumps({"test": test, **figures, "requests": by_op}).decode())


@pytest.mark.parametrize("op, seed", [("PutObject", 3), ("UploadPart", 5), ("CompleteMultipartUpload", 7)])
def test_every_backup_listed_completed_verifies_through_write_faults(
    run, small, large, s3_endpoint, s3_proxied, bucket, op, seed
):
    """Backups, several of them multipart, while 30 % of one write operation's requests meet a fault: each
    backup either exits 0 and is listed as Completed and verifies, or fails with one line and is not listed
    as Completed; the plain re-run of a failed one succeeds."""
    proxy = s3_proxied(0.3, ops=(op,), seed=seed)
    storage = f"s3://{bucket}/team"
    namespaces = [small, large] * 3 if op == "PutObject" else [large] * 6
    attempts = {
        f"b{i}": run("backup", f"b{i}", "-n", ns, "--storage", storage, *s3_args(proxy.url))
        for i, ns in enumerate(namespaces)
    }

    assert faults_on(proxy, op) > 0, f"no fault was injected: {proxy.by_operation}"
    phases = listed(run, storage, s3_endpoint)
    failed = []
    for name, result in attempts.items():
        if result.code == ExitStatus.SUCCESS:
            assert_completed_and_verifies(run, storage, s3_endpoint, name)
        else:
            assert_clean_failure(result)
            assert phases.get(name) != "Completed", f"{name} failed but is listed as Completed"
            failed.append(name)
    proxy.rate = 0.0
    for name in failed:
        i = int(name[1:])
        again = run("backup", name, "-n", namespaces[i], "--storage", storage, *s3_args(proxy.url))
        assert again.code == ExitStatus.SUCCESS, again.err
        assert_completed_and_verifies(run, storage, s3_endpoint, name)
    record_figures(f"write-faults-{op}", proxy, rate=0.3, backups=len(attempts), completed=len(attempts) - len(failed))


# (operation, namespace, faults, the backup completes): at rate 1.0 every attempt of the operation meets one
CERTAIN = [
    pytest.param("PutObject", "small", ERRORS, False, id="archive-put-refused"),
    pytest.param("PutObject", "large", ERRORS, False, id="manifest-put-refused"),  # after a multipart archive
    pytest.param("UploadPart", "large", ("500", "503"), False, id="part-refused"),
    pytest.param("UploadPart", "large", ("reset", "lost"), False, id="part-reset"),
    pytest.param("CompleteMultipartUpload", "large", ERRORS, False, id="complete-refused"),
    # S3 stored it every time, but no answer came back: the write is recognised as done (by its write id)
    pytest.param("PutObject", "small", ("lost",), True, id="archive-put-lost"),
    pytest.param("PutObject", "large", ("lost",), True, id="manifest-put-lost"),
    pytest.param("CompleteMultipartUpload", "large", ("lost",), True, id="complete-lost"),
]


@pytest.mark.parametrize("op, which, faults, completes", CERTAIN)
def test_a_write_that_always_fails_or_is_always_lost(
    run, cluster, small, large, s3_endpoint, s3_proxied, bucket, op, which, faults, completes
):
    """Every attempt (botocore's retries included) meets a fault. Refused writes fail the backup with one line
    (in a process of its own: nothing more at exit), leave nothing behind, and the plain re-run succeeds;
    writes S3 did but whose answers were all lost count as done, so the backup completes and verifies."""
    proxy = s3_proxied(1.0, ops=(op,), faults=faults, seed=11)
    storage = f"s3://{bucket}/team"
    backup = ("backup", "b", "-n", small if which == "small" else large, "--storage", storage, *s3_args(proxy.url))

    result = cli(run, cluster, *backup)

    assert faults_on(proxy, op) >= 2, f"the retries must have met faults too: {proxy.by_operation}"
    if completes:
        assert result.code == ExitStatus.SUCCESS, result.err
        assert_completed_and_verifies(run, storage, s3_endpoint, "b")
    else:
        assert_clean_failure(result)
        assert leftovers(bucket, s3_endpoint, "b") == [], "a failed backup leaves nothing behind"
        proxy.rate = 0.0
        again = run(*backup)
        assert again.code == ExitStatus.SUCCESS, again.err
        assert_completed_and_verifies(run, storage, s3_endpoint, "b")
    record_figures(f"certain-{op}-{which}-{'/'.join(faults)}", proxy, rate=1.0, backups=1, completed=int(completes))


@pytest.mark.parametrize(
    "rate, key",
    [(0.3, "/"), (1.0, "/manifest.json"), (1.0, "/archive.tar.gz")],
    ids=["any-get-30%", "manifest-get-100%", "archive-get-100%"],
)
def test_restore_through_get_faults_ends_exact_or_changes_nothing(
    run, kube, crds, small, large, s3_endpoint, s3_proxied, bucket, rate, key
):
    """Restores (one archive downloaded in one GET, one in ranged GETs) while GetObjects of `key` meet faults:
    each ends exact, or fails with one line before anything is written; the plain re-run then ends exact."""
    storage = f"s3://{bucket}/team"
    for name, ns in (("small", small), ("large", large)):
        assert run("backup", name, "-n", ns, "--storage", storage, *s3_args(s3_endpoint)).code == 0
    proxy = s3_proxied(rate, ops=("GetObject",), seed=13)
    proxy.applies = lambda method, path: s3_operation(method, path) == "GetObject" and key in path.split("?")[0]
    outcomes: dict[str, int] = {}
    targets: list[str] = []
    try:
        for name, source in (("small", small), ("large", large)) * (2 if rate < 1 else 1):
            target = unique("s3restored")
            targets.append(target)
            restore = ("restore", name, "--namespace-mapping", f"{source}:{target}", "--storage", storage)
            proxy.rate = rate
            result = run(*restore, *s3_args(proxy.url))
            outcomes[target] = result.code
            if result.code != ExitStatus.SUCCESS:
                assert_clean_failure(result)
                assert kube.get(NAMESPACES, None, target) is None, "a failed restore wrote nothing"
                proxy.rate = 0.0
                again = run(*restore, *s3_args(proxy.url))
                assert again.code == ExitStatus.SUCCESS, again.out + again.err
            assert widgets(kube, crds, target) == widgets(kube, crds, source), f"{name} into {target} is not exact"
    finally:
        for target in targets:
            kube.delete(NAMESPACES, None, target)

    assert faults_on(proxy, "GetObject") > 0, f"no fault was injected: {proxy.by_operation}"
    if rate >= 1.0:
        assert all(code == ExitStatus.ERROR for code in outcomes.values()), outcomes
    record_figures(
        f"restore-get-faults-{rate}-{key}",
        proxy,
        rate=rate,
        restores=len(outcomes),
        exact_first_time=sum(code == 0 for code in outcomes.values()),
    )
