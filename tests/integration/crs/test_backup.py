"""`statusvault backup` and its companions against the real API server, to a directory and to S3."""

from __future__ import annotations

import gzip
import io
import json
import tarfile
from pathlib import Path

import orjson
import pytest

from statusvault.archive import ArchiveReader
from statusvault.errors import ExitStatus
from statusvault.kube.discovery import discover
from statusvault.testing.fixtures import create_with_status, install_crds
from tests.builders import cr, crd, kc_status, unique, unique_kind
from tests.integration.crs.servers import wait_gone

pytestmark = pytest.mark.version_sensitive(
    "backups read what each server serves: discovery, LIST pages, managedFields, no core API (CRD-only)"
)

KC = "xyz.example.com/v1"


def archive_of(storage: Path, name: str) -> Path:
    return storage / "backups" / name / "archive.tar.gz"


def members(storage: Path, name: str) -> dict[str, dict]:
    reader = ArchiveReader(archive_of(storage, name))
    return {path: orjson.loads(data) for path, data in reader.objects()}


@pytest.fixture
def seeded(make, namespace, core_api):
    """Two KubernetesClusters, a Database, a LegacyApp (no /status), a Widget and (with the core API) a ConfigMap."""
    make(
        cr(
            KC,
            "KubernetesCluster",
            "prod",
            spec={"region": "eu"},
            status=kc_status(1),
            labels={"env": "prod"},
        ),
        namespace,
    )
    make(
        cr(KC, "KubernetesCluster", "dev", spec={"region": "us"}, status=kc_status(2), labels={"env": "dev"}),
        namespace,
    )
    make(
        cr(
            "db.example.com/v1",
            "Database",
            "orders",
            spec={"engine": "postgres"},
            status={"externalID": "db-123", "conditions": [{"type": "Ready", "status": "True"}]},
        ),
        namespace,
    )
    make(cr("legacy.example.com/v1", "LegacyApp", "billing", status={"externalRef": "app-1"}), namespace)
    make(cr("example.com/v1", "Widget", "gear", status={"state": "Spinning"}), namespace)
    if core_api:
        make({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "cfg"}, "data": {"a": "b"}}, namespace)
    return namespace


def test_default_selection_takes_custom_resources_with_status_and_their_crds(run, seeded, core_api):
    ns = seeded
    result = run("backup", "b1", "-n", ns, "-o", "json")
    assert result.code == 0, result.err
    files = members(run.storage, "b1")
    prod = files[f"resources/kubernetesclusters.xyz.example.com/namespaces/{ns}/prod.json"]
    assert prod["status"] == kc_status(1)
    assert prod["metadata"]["labels"] == {"env": "prod"}
    writers = prod["metadata"]["managedFields"]  # who wrote its status (through /status), not which fields
    assert [e["operation"] for e in writers] == ["Update"], writers
    assert all(set(e) <= {"manager", "operation", "subresource", "time"} for e in writers), writers
    assert files[f"resources/legacyapps.legacy.example.com/namespaces/{ns}/billing.json"]["status"] == {
        "externalRef": "app-1"
    }
    taken_configmap = f"resources/configmaps/namespaces/{ns}/cfg.json" in files
    assert taken_configmap == bool(core_api), "a namespace backup takes the namespace's built-in objects too"
    crd_names = {p.rsplit("/", 1)[1] for p in files if p.startswith("resources/customresourcedefinitions")}
    assert crd_names == {  # other tests' CRDs may be in the shared cluster too: only those of what it took
        "kubernetesclusters.xyz.example.com.json",
        "databases.db.example.com.json",
        "legacyapps.legacy.example.com.json",
        "widgets.example.com.json",
    }
    assert not any("clusterpools" in p and "/cluster/" in p and "customresource" not in p for p in files)
    report = json.loads(result.out)
    assert report["resources"]["kubernetesclusters.xyz.example.com"]["count"] == 2
    assert report["resources"]["kubernetesclusters.xyz.example.com"]["withStatus"] == 2
    assert report["resources"]["legacyapps.legacy.example.com"]["hasStatusSubresource"] is False


def test_manifest_records_selection_versions_and_hashes(run, seeded, git_version):
    assert run("backup", "m1", "-n", seeded).code == 0
    manifest = ArchiveReader(archive_of(run.storage, "m1")).manifest()
    assert manifest["formatVersion"] == "1.2"
    assert manifest["server"]["gitVersion"] == git_version
    assert manifest["selection"]["namespaces"] == [seeded]
    widgets = manifest["resources"]["widgets.example.com"]
    assert (widgets["version"], widgets["kind"], widgets["namespaced"]) == ("v1", "Widget", True)
    assert len(manifest["files"]) == manifest["totals"]["objects"]
    assert all(len(h) == 64 for h in manifest["files"].values())
    stored = json.loads((run.storage / "backups" / "m1" / "manifest.json").read_text())
    assert stored["archive"]["size"] == archive_of(run.storage, "m1").stat().st_size


def test_two_served_versions_are_backed_up_once_in_the_preferred_version(run, make, namespace):
    make(cr("example.com/v1beta1", "Widget", "old", status={"state": "Idle"}), namespace)
    assert run("backup", "v", "-n", namespace, "--include-resources", "widgets.example.com").code == 0
    files = members(run.storage, "v")
    widget_files = [p for p in files if p.startswith("resources/widgets")]
    assert widget_files == [f"resources/widgets.example.com/namespaces/{namespace}/old.json"]
    assert files[widget_files[0]]["apiVersion"] == "example.com/v1"
    assert files[widget_files[0]]["status"] == {"state": "Idle"}


def test_a_type_only_a_non_preferred_version_serves_is_backed_up_and_restored(run, kube, namespace):
    """Two CRDs of one group: the group prefers v1 (the first one's only version), and the second one's kind is
    served only as v2alpha1, as Velero's DataUploads are. Discovery takes it in the version that serves it, so it
    is backed up with its status and restored."""
    group, kind = f"{unique('pv')}.example.com", unique_kind("Upload")
    install_crds(kube, [crd(group, "Holder"), crd(group, kind, versions=("v2alpha1",))])
    discovery = discover(kube)
    uploads = discovery.by_qualified(f"{kind.lower()}s.{group}")
    assert uploads is not None and uploads.version == "v2alpha1"
    assert discovery.by_qualified(f"holders.{group}").version == "v1", "the group's preferred version"
    status = {"phase": "Completed", "bytesDone": 4096}
    create_with_status(kube, discovery, cr(f"{group}/v2alpha1", kind, "u-1", spec={"size": 3}, status=status),
                       namespace)  # fmt: skip

    assert run("backup", "pv", "-n", namespace, "--include-resources", uploads.qualified).code == ExitStatus.SUCCESS
    kube.delete(uploads, namespace, "u-1")
    wait_gone(kube, uploads, namespace, "u-1")
    restored = run("restore", "pv", "-n", namespace)
    assert restored.code == ExitStatus.SUCCESS, restored.out + restored.err
    back = kube.get(uploads, namespace, "u-1")
    assert (back["apiVersion"], back["spec"], back["status"]) == (f"{group}/v2alpha1", {"size": 3}, status)


def test_resource_label_and_exclude_filters(run, seeded):
    ns = seeded
    assert run("backup", "f1", "-n", ns, "--include-resources", "kc", "-l", "env=prod").code == 0
    paths = set(members(run.storage, "f1"))
    assert f"resources/kubernetesclusters.xyz.example.com/namespaces/{ns}/prod.json" in paths
    assert not any(p.endswith("/dev.json") or "databases" in p.split("/")[1] for p in paths)
    assert run("backup", "f2", "-n", ns, "--exclude-resources", "databases.db.example.com,Widget").code == 0
    kinds = {p.split("/")[1] for p in members(run.storage, "f2")}
    assert "databases.db.example.com" not in kinds and "widgets.example.com" not in kinds
    assert "kubernetesclusters.xyz.example.com" in kinds


def test_select_objects_by_name_or_pattern(run, seeded):
    ns = seeded
    assert run("backup", "n1", "-n", ns, "--name", "pro*,orders").code == 0
    objects = {p.rsplit("/", 1)[1] for p in members(run.storage, "n1") if "/namespaces/" in p}
    assert objects == {"prod.json", "orders.json"}, "CRDs are kept; other objects are left out"
    assert any(p.startswith("resources/customresourcedefinitions") for p in members(run.storage, "n1"))
    result = run("describe", "n1", "-o", "json")
    assert json.loads(result.out)["selection"]["names"] == ["pro*", "orders"]


@pytest.mark.core_api("backs up ConfigMaps")
def test_builtins_when_named(run, seeded):
    assert run("backup", "cm", "-n", seeded, "--include-resources", "configmaps").code == 0
    files = members(run.storage, "cm")
    assert files[f"resources/configmaps/namespaces/{seeded}/cfg.json"]["data"] == {"a": "b"}
    assert not any(p.startswith("resources/customresourcedefinitions") for p in files)


def test_cluster_scoped_custom_resources(run, make, namespace):
    pool = unique("pool")
    make(cr("infra.example.com/v1", "ClusterPool", pool, status={"allocated": 3}))
    path = f"resources/clusterpools.infra.example.com/cluster/{pool}.json"
    assert run("backup", "all").code == 0
    assert members(run.storage, "all")[path]["status"] == {"allocated": 3}
    assert run("backup", "nsonly", "-n", namespace).code == 0
    assert path not in members(run.storage, "nsonly")
    assert run("backup", "nsplus", "-n", namespace, "--include-cluster-resources").code == 0
    assert path in members(run.storage, "nsplus")


def test_pagination_takes_every_object(run, make, namespace):
    for i in range(7):
        make(cr(KC, "KubernetesCluster", f"k{i}", status=kc_status(i)), namespace)
    assert run("backup", "pg", "-n", namespace, "--page-size", "2", "--include-resources", "kc").code == 0
    kcs = [p for p in members(run.storage, "pg") if p.startswith("resources/kubernetesclusters")]
    assert len(kcs) == 7


def test_unknown_resource_is_an_error_and_nothing_is_written(run, namespace):
    result = run("backup", "bad", "-n", namespace, "--include-resources", "nosuchthings.example.com")
    assert result.code == ExitStatus.USAGE
    assert result.err.strip().splitlines() == [
        "error: unknown resource 'nosuchthings.example.com': not served by this cluster "
        "(use resource.group, e.g. kubernetesclusters.xyz.example.com)"
    ]
    assert not run.storage.exists() or not any(run.storage.rglob("*"))


@pytest.mark.core_api("checks Namespaces")
def test_unknown_namespace_is_an_error(run):
    result = run("backup", "bad", "-n", "no-such-namespace-x")
    assert result.code == ExitStatus.USAGE
    assert "namespace 'no-such-namespace-x' does not exist" in result.err


def test_existing_name_is_refused(run, seeded):
    assert run("backup", "dup", "-n", seeded).code == 0
    result = run("backup", "dup", "-n", seeded)
    assert result.code == ExitStatus.ERROR
    assert "backup 'dup' already exists" in result.err


def test_list_describe_download_delete(run, seeded, tmp_path):
    assert run("backup", "c1", "-n", seeded).code == 0
    listed = json.loads(run("list", "-o", "json").out)
    assert [(b["name"], b["phase"]) for b in listed] == [("c1", "Completed")]
    described = json.loads(run("describe", "c1", "-o", "json").out)
    assert described["resources"]["databases.db.example.com"]["withStatus"] == 1
    assert described["archive"]["size"] > 0
    dest = tmp_path / "c1.tar.gz"
    assert run("download", "c1", "-f", str(dest)).code == 0
    assert dest.read_bytes() == archive_of(run.storage, "c1").read_bytes()
    assert run("delete", "c1", "-y").code == 0
    assert json.loads(run("list", "-o", "json").out) == []
    assert run("describe", "c1").code == ExitStatus.ERROR


def test_incomplete_backup_is_listed_as_unusable(run, seeded):
    assert run("backup", "inc", "-n", seeded).code == 0
    (run.storage / "backups" / "inc" / "manifest.json").unlink()
    listed = json.loads(run("list", "-o", "json").out)
    assert [(b["name"], b["phase"]) for b in listed] == [("inc", "Incomplete")]
    result = run("verify", "inc")
    assert result.code == ExitStatus.ERROR
    assert "incomplete" in result.err


def test_verify_passes_then_catches_a_flipped_byte(run, seeded):
    assert run("backup", "v1", "-n", seeded).code == 0
    ok = run("verify", "v1")
    assert ok.code == 0 and ok.out.startswith("Backup v1: OK (")
    path = archive_of(run.storage, "v1")
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 0x01
    path.write_bytes(bytes(data))
    bad = run("verify", "v1", "-o", "json")
    assert bad.code == ExitStatus.ERROR
    assert json.loads(bad.out)["ok"] is False


def test_verify_names_a_modified_object_file(run, seeded):
    """A re-packed archive (valid gzip, edited object) is caught by the per-file SHA-256."""
    assert run("backup", "v2", "-n", seeded).code == 0
    path = archive_of(run.storage, "v2")
    out = io.BytesIO()
    with tarfile.open(path, "r:gz") as src, tarfile.open(fileobj=out, mode="w") as dst:
        for m in src.getmembers():
            data = src.extractfile(m).read()
            if "kubernetesclusters" in m.name and m.name.endswith("prod.json"):
                data = data.replace(b"kc-000001", b"kc-999999")
                m.size = len(data)
            dst.addfile(m, io.BytesIO(data))
    path.write_bytes(gzip.compress(out.getvalue()))
    result = run("verify", "v2", "-o", "json")
    assert result.code == ExitStatus.ERROR
    report = json.loads(result.out)
    assert report["mismatched"] == [f"resources/kubernetesclusters.xyz.example.com/namespaces/{seeded}/prod.json"]
    assert report["archiveChecksumOk"] is False


def s3_args(endpoint: str) -> list[str]:
    return ["--s3-endpoint-url", endpoint, "--s3-addressing-style", "path", "--s3-checksum", "when_required"]


def test_s3_backup_list_verify_download_delete(run, kube, seeded, core_api, s3_endpoint, bucket, tmp_path):
    storage = f"s3://{bucket}/team/prod"
    result = run("backup", "s1", "-n", seeded, "--storage", storage, *s3_args(s3_endpoint))
    assert result.code == 0, result.err
    # the 5 seeded custom resources, the ConfigMap (with the core API: a namespace backup takes built-in objects
    # too), and the CRDs of the 4 custom types it took (not every CRD the server serves)
    objects = 5 + (1 if core_api else 0) + 4
    import boto3

    keys = {o["Key"] for o in boto3.client("s3", endpoint_url=s3_endpoint).list_objects_v2(Bucket=bucket)["Contents"]}
    assert keys == {"team/prod/backups/s1/archive.tar.gz", "team/prod/backups/s1/manifest.json"}
    listed = json.loads(run("list", "--storage", storage, *s3_args(s3_endpoint), "-o", "json").out)
    assert [(b["name"], b["phase"], b["objects"]) for b in listed] == [("s1", "Completed", objects)]
    assert run("verify", "s1", "--storage", storage, *s3_args(s3_endpoint)).code == 0
    dest = tmp_path / "s1.tar.gz"
    assert run("download", "s1", "-f", str(dest), "--storage", storage, *s3_args(s3_endpoint)).code == 0
    assert ArchiveReader(dest).manifest()["totals"]["objects"] == objects
    assert run("delete", "s1", "-y", "--storage", storage, *s3_args(s3_endpoint)).code == 0
    assert "Contents" not in boto3.client("s3", endpoint_url=s3_endpoint).list_objects_v2(Bucket=bucket)


def test_s3_large_archive_uses_multipart(run, make, namespace, s3_endpoint, bucket):
    """~10 MB of incompressible status forces a multipart upload through the HTTP server."""
    import base64
    import os

    for i in range(14):
        blob = base64.b64encode(os.urandom(750_000)).decode()
        make(cr("example.com/v1", "Widget", f"big{i}", status={"blob": blob}), namespace)
    storage = f"s3://{bucket}"
    result = run("backup", "big", "-n", namespace, "--storage", storage, *s3_args(s3_endpoint))
    assert result.code == 0, result.err
    import boto3

    head = boto3.client("s3", endpoint_url=s3_endpoint).head_object(Bucket=bucket, Key="backups/big/archive.tar.gz")
    assert "-" in head["ETag"], "a multipart upload's ETag is <md5>-<parts>"
    assert run("verify", "big", "--storage", storage, *s3_args(s3_endpoint)).code == 0


def test_a_killed_backups_multipart_upload_is_aborted_by_the_next_backup(run, seeded, s3_endpoint, bucket):
    import boto3

    s3 = boto3.client("s3", endpoint_url=s3_endpoint)
    s3.create_multipart_upload(Bucket=bucket, Key="team/backups/killed/archive.tar.gz")
    s3.create_multipart_upload(Bucket=bucket, Key="elsewhere/archive.tar.gz")
    from statusvault.storage import open_store
    from statusvault.storage.base import S3Options

    store = open_store(f"s3://{bucket}/team", S3Options(endpoint_url=s3_endpoint))
    # moto reports every upload as initiated in 2010, so the age cut-off cannot be shown here
    assert store.sweep(3600) == 1
    left = [u["Key"] for u in s3.list_multipart_uploads(Bucket=bucket).get("Uploads") or []]
    assert left == ["elsewhere/archive.tar.gz"], "only under this store's prefix"


def test_missing_bucket_is_a_clean_error(run, seeded, s3_endpoint):
    result = run("backup", "x", "-n", seeded, "--storage", "s3://no-such-bucket-zz", *s3_args(s3_endpoint))
    assert result.code == ExitStatus.ERROR
    assert result.err.strip().splitlines() == [
        "error: bucket 'no-such-bucket-zz' does not exist (s3://no-such-bucket-zz)"
    ]


@pytest.mark.parametrize("who", ["unknown-key", "no-permission"])
def test_wrong_credentials_or_forbidden_bucket_are_clean_errors(run, seeded, s3_endpoint, bucket, monkeypatch, who):
    import boto3
    from moto.core.authorization import enable_iam_authentication

    if who == "unknown-key":
        key_id, secret, expected = "AKIAWRONGWRONGWRONG0", "wrong", "S3 rejected the credentials"
    else:  # a real IAM user of the server, with no policy: every S3 call is denied
        iam = boto3.client("iam", endpoint_url=s3_endpoint)
        user = unique("user")
        iam.create_user(UserName=user)
        key = iam.create_access_key(UserName=user)["AccessKey"]
        key_id, secret, expected = key["AccessKeyId"], key["SecretAccessKey"], "access denied to"
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", key_id)
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", secret)
    with enable_iam_authentication():
        result = run("backup", "x", "-n", seeded, "--storage", f"s3://{bucket}", *s3_args(s3_endpoint))
    monkeypatch.undo()
    assert result.code == ExitStatus.ERROR, result.err
    assert result.err.strip().splitlines() == [result.err.strip()]
    assert result.err.startswith(f"error: {expected}")
    assert "Contents" not in boto3.client("s3", endpoint_url=s3_endpoint).list_objects_v2(Bucket=bucket)


def test_unreachable_endpoint_is_a_clean_error(run, seeded):
    result = run("backup", "x", "-n", seeded, "--storage", "s3://b", *s3_args("http://127.0.0.1:1"))
    assert result.code == ExitStatus.ERROR
    assert len(result.err.strip().splitlines()) == 1
    assert result.err.startswith("error: ")
