"""The hostile corpus (tests/hostile_corpus.py) through the CLI against the real API server.

Each archive is planted in the store with recomputed hashes and manifests; `restore` and `verify` exit
non-zero with one line and no traceback, and the cluster is left as it was. The biggest bombs run in a
subprocess whose peak RSS is measured."""

from __future__ import annotations

import base64
import dataclasses
import json
import os
import subprocess
import sys

import boto3
import orjson
import pytest

from statusvault.restore import runner
from statusvault.vocabulary.kinds import NAMESPACES
from tests.builders import unique
from tests.hostile import SECRET, Backup
from tests.hostile_corpus import CASES, Case
from tests.integration.crs.test_backup import s3_args
from tests.integration.crs.test_restore import delete_namespace

pytestmark = pytest.mark.version_neutral("hostile archives are refused before any request that differs by version")

RSS_LIMIT_KIB = 256 * 1024
PEAK = (
    "import json, resource, subprocess, sys\n"
    "p = subprocess.run(sys.argv[1:], capture_output=True, text=True)\n"
    "rss = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss\n"
    "print(json.dumps({'code': p.returncode, 'err': p.stderr, 'rssKiB': rss}))\n"
)


@pytest.fixture
def key_file(tmp_path) -> str:
    path = tmp_path / "corpus.key"
    path.write_text(base64.b64encode(SECRET).decode())
    return str(path)


def census(kube, crds) -> dict[str, int]:
    """How many live objects of each kind the corpus names exist, cluster-wide.

    Objects already being deleted, or in a namespace being deleted (an earlier test removed it: the namespace
    controller deletes its objects later), are left out: they vanish on the server's schedule, not because of
    anything the command under test did.
    """
    kinds = {
        "kc": crds.resolve("kubernetesclusters.xyz.example.com"),
        "pools": crds.resolve("clusterpools"),
        "namespaces": NAMESPACES,
    }
    live = {
        o["metadata"]["name"]
        for page in kube.list_pages(NAMESPACES, None)
        for o in page
        if not o["metadata"].get("deletionTimestamp")
    }

    def counted(o: dict) -> bool:
        meta = o["metadata"]
        return not meta.get("deletionTimestamp") and meta.get("namespace") in (None, *live)

    return {k: sum(1 for page in kube.list_pages(rt, None) for o in page if counted(o)) for k, rt in kinds.items()}


def plant(case: Case, storage, ns: str) -> str:
    name = f"h-{case.id.replace('_', '-')}"
    case.build(Backup.base(name, ns, case.encrypted)).write(storage, name)
    return name


def assert_refused(result, error: str = "") -> None:
    assert result.code != 0
    assert "Traceback" not in result.err + result.out and "error: unexpected" not in result.err
    assert error in result.err
    assert len(result.err.strip().splitlines()) == 1, result.err


def test_the_untwisted_base_restores(run, kube, crds, key_file):
    """The harness sees writes: the base every case twists restores (then is removed again)."""
    ns = unique("hostile")
    name = "h-base"
    Backup.base(name, ns, encrypted=True).planted().write(run.storage, name)
    before = census(kube, crds)
    try:
        result = run("restore", name, "--encryption-key-file", key_file)
        assert result.code == 0, result.err
        assert kube.get(crds.resolve("kc"), ns, "prod")["status"]["clusterID"] == "kc-000001"
        assert census(kube, crds) == {k: v + {"kc": 2, "pools": 1, "namespaces": 1}[k] for k, v in before.items()}
    finally:
        kube.delete(crds.resolve("clusterpools"), None, f"{ns}-pool")
        delete_namespace(kube, ns)  # gone, not terminating: later censuses must not see it go


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_hostile_archive_is_refused_without_a_write(run, kube, crds, key_file, case):
    ns = unique("hostile")
    name = plant(case, run.storage, ns)
    key = ["--encryption-key-file", key_file] if case.encrypted else []
    before = census(kube, crds)
    assert_refused(run("restore", name, *key), case.error)
    assert_refused(run("verify", name, *key))
    assert census(kube, crds) == before
    assert kube.get(NAMESPACES, None, ns) is None


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_no_stream_refuses_a_hostile_archive_of_any_size_without_a_write(run, kube, crds, key_file, case, monkeypatch):
    """Above the size at which an encrypted backup streams by default (made 0 here), --no-stream still checks
    every member before the first write."""
    monkeypatch.setattr(runner, "STREAM_ABOVE", 0)
    ns = unique("hostile")
    name = plant(case, run.storage, ns)
    key = ["--encryption-key-file", key_file] if case.encrypted else []
    before = census(kube, crds)
    assert_refused(run("restore", name, "--no-stream", *key), case.error)
    assert census(kube, crds) == before


# One or two cases of each family (layout, entry types, contents, listing, JSON, manifests, encryption): every case
# costs a namespace deletion here; the bombs' memory bound is test_bombs_stay_under_256_mib's.
STREAMED_IDS = {
    "path_traversal", "symlink", "kind_swapped", "undescribed_resource", "member_over_the_limit", "json_deeply_nested",
    "tar_cut_short", "member_not_listed", "member_twice", "members_reordered", "json_null", "manifest_not_json",
    "enc_bit_flipped", "enc_hostile_inside",
}  # fmt: skip
STREAMED = [c for c in CASES if c.id in STREAMED_IDS]


@pytest.mark.parametrize("case", STREAMED, ids=[c.id for c in STREAMED])
def test_a_streamed_restore_refuses_a_hostile_archive_with_one_error(run, kube, crds, key_file, case):
    """--stream: the same error line last, a non-zero exit, no traceback. What the archive held before the bad
    member may have been written, and its own failures logged (docs/reliability.md, A1)."""
    ns = unique("hostile")
    name = plant(case, run.storage, ns)
    key = ["--encryption-key-file", key_file] if case.encrypted else []
    try:
        result = run("restore", name, "--stream", *key)
        *logged, error = result.err.strip().splitlines()
        assert all(line.startswith(("INFO ", "WARNING ")) for line in logged), result.err
        assert_refused(dataclasses.replace(result, err=error), case.error)
    finally:
        if kube.get(crds.resolve("clusterpools"), None, f"{ns}-pool") is not None:
            kube.delete(crds.resolve("clusterpools"), None, f"{ns}-pool")
        if kube.get(NAMESPACES, None, ns) is not None:
            delete_namespace(kube, ns)


BOMBS = [c for c in CASES if c.bomb]


@pytest.mark.parametrize("command", ["restore", "verify"])
@pytest.mark.parametrize("case", BOMBS, ids=[c.id for c in BOMBS])
def test_bombs_stay_under_256_mib(cluster, kube, crds, tmp_path, case, command):
    ns = unique("hostile")
    name = plant(case, tmp_path / "store", ns)
    env = {
        **os.environ,
        "STATUSVAULT_STORAGE": str(tmp_path / "store"),
        "STATUSVAULT_STATE_DIR": str(tmp_path / "state"),
    }
    cli = [sys.executable, "-m", "statusvault", "--kubeconfig", str(cluster.kubeconfig), command, name]
    proc = subprocess.run([sys.executable, "-c", PEAK, *cli], env=env, capture_output=True, text=True, check=True)
    measured = json.loads(proc.stdout)
    print(f"{case.id} {command}: peak RSS {measured['rssKiB'] / 1024:.0f} MiB")
    assert measured["code"] != 0 and "Traceback" not in measured["err"]
    assert measured["rssKiB"] < RSS_LIMIT_KIB
    assert kube.get(NAMESPACES, None, ns) is None


S3_CASES = ["path_traversal", "decompression_bomb", "enc_chunks_swapped", "summary_without_archive"]


@pytest.mark.parametrize("case_id", [*S3_CASES, "stored_size_differs"])
def test_hostile_archives_in_s3_are_refused(run, kube, crds, s3_endpoint, bucket, key_file, case_id):
    """The same refusals from an S3 store; an archive whose size is not the manifest's is not downloaded."""
    case = next(c for c in CASES if c.id == (case_id if case_id in S3_CASES else "path_traversal"))
    ns = unique("hostile")
    name = f"h-s3-{case_id.replace('_', '-')}"
    planted = case.build(Backup.base(name, ns, case.encrypted))
    if case_id == "stored_size_differs":
        planted.archive += bytes(1 << 20)
    s3 = boto3.client("s3", endpoint_url=s3_endpoint, region_name="us-east-1")
    s3.put_object(Bucket=bucket, Key=f"team/backups/{name}/archive.tar.gz", Body=planted.archive)
    s3.put_object(Bucket=bucket, Key=f"team/backups/{name}/manifest.json", Body=orjson.dumps(planted.summary))
    args = ["--storage", f"s3://{bucket}/team", *s3_args(s3_endpoint)]
    args += ["--encryption-key-file", key_file] if case.encrypted else []
    before = census(kube, crds)
    error = "the archive's size differs from its manifest" if case_id == "stored_size_differs" else case.error
    assert_refused(run("restore", name, *args), error)
    assert_refused(run("verify", name, *args))
    assert census(kube, crds) == before
