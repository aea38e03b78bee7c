"""Backups LIST several streams at once (types, -n namespaces, the namespaces of a large type) and still
write the archive exactly as one stream at a time does: same members, same order, same summaries."""

from __future__ import annotations

import orjson
import pytest

from statusvault.archive import ArchiveReader
from statusvault.backup import engine as backup
from statusvault.testing.fixtures import create_with_status, ensure_namespace
from statusvault.vocabulary.kinds import NAMESPACES
from tests.builders import cr, kc_status, unique
from tests.integration.crs.test_backup import archive_of

pytestmark = pytest.mark.version_sensitive(
    "LIST pages come from etcd on 1.20 and from the watch cache on 1.36 (consistent lists from 1.31)"
)

KC = "xyz.example.com/v1"


def contents(storage, name: str) -> tuple[list[tuple[str, dict]], dict]:
    reader = ArchiveReader(archive_of(storage, name))
    manifest = reader.manifest()
    return [(path, orjson.loads(data)) for path, data in reader.objects()], manifest


@pytest.fixture
def spread(kube, crds):
    """Objects of several types over three namespaces whose names sort differently with and without "/"
    (etcd's key order puts "x-a/..." before "x/...")."""
    base = unique("pl")
    namespaces = [base, f"{base}-a", f"{base}-b"]
    for ns in namespaces:
        ensure_namespace(kube, ns)
        for i in range(4):
            create_with_status(kube, crds, cr(KC, "KubernetesCluster", f"kc-{i}", status=kc_status(i)), ns)
            create_with_status(kube, crds, cr("example.com/v1", "Widget", f"w-{i}", status={"state": "On"}), ns)
        create_with_status(kube, crds, cr("db.example.com/v1", "Database", "db", status={"externalID": ns}), ns)
    yield namespaces
    for ns in namespaces:
        kube.delete(NAMESPACES, None, ns)


def test_parallel_lists_of_namespaces_and_types_write_the_same_archive(run, spread):
    selection = [arg for ns in spread for arg in ("-n", ns)]
    assert run("backup", "one", "--list-concurrency", "1", *selection).code == 0
    assert run("backup", "many", "--list-concurrency", "8", *selection).code == 0

    one, one_manifest = contents(run.storage, "one")
    many, many_manifest = contents(run.storage, "many")
    assert len(one) >= 27
    assert many == one
    assert many_manifest["resources"] == one_manifest["resources"]
    assert many_manifest["totals"]["objects"] == one_manifest["totals"]["objects"] == len(one)
    assert run("verify", "many").code == 0


def test_a_large_type_is_split_by_namespace_in_etcds_key_order(run, kube, crds, spread, monkeypatch):
    """With the split threshold lowered, the cluster-wide types are listed per namespace; the archive's
    objects of each type are in the order one cluster-wide LIST gives."""
    monkeypatch.setattr(backup, "SPLIT_MIN", 3)
    monkeypatch.setattr(backup, "SPLIT_PER_NAMESPACE", 0)
    kc = crds.resolve("kc")
    assert backup.split_by_namespace(kube, kc, "")[:1] != [None], "the type is split"
    assert run("backup", "split", "--include-resources", "kc,widgets.example.com", "--list-concurrency", "4").code == 0
    monkeypatch.setattr(backup, "SPLIT_MIN", 10**9)
    assert run("backup", "whole", "--include-resources", "kc,widgets.example.com", "--list-concurrency", "4").code == 0

    split, _ = contents(run.storage, "split")
    whole, _ = contents(run.storage, "whole")
    mine = [p for p, _ in split if any(f"/namespaces/{ns}/" in p for ns in spread)]
    assert len(mine) == 24
    assert [p for p, _ in split] == [p for p, _ in whole]
    listed = [f"{o['metadata']['namespace']}/{o['metadata']['name']}" for page in kube.list_pages(kc) for o in page]
    archived = [f"{o['metadata']['namespace']}/{o['metadata']['name']}" for p, o in split if o["kind"] == kc.kind]
    assert archived == listed
    base, dashed = spread[0], spread[1]
    assert archived.index(f"{dashed}/kc-0") < archived.index(f"{base}/kc-0"), "etcd's order, not sorted names"


def test_listing_in_worker_processes_writes_the_same_archive(run, spread, monkeypatch):
    streams: list[str] = []
    list_in_worker = backup.list_in_worker

    def counted(pool, stream, page_size, spool):
        streams.append(stream.label)
        return list_in_worker(pool, stream, page_size, spool)

    monkeypatch.setattr(backup, "list_in_worker", counted)
    selection = [arg for ns in spread for arg in ("-n", ns)]
    assert run("backup", "threads", "--processes", "1", "--list-concurrency", "1", *selection).code == 0
    assert not streams, "--processes 1 lists in this process"
    result = run("backup", "procs", "--processes", "2", "--list-concurrency", "3", "--page-size", "2", *selection)
    assert result.code == 0, result.err
    assert len(streams) >= 9, "every stream went through a worker process"

    threads, threads_manifest = contents(run.storage, "threads")
    procs, procs_manifest = contents(run.storage, "procs")
    assert len(threads) >= 27
    assert procs == threads
    assert procs_manifest["resources"] == threads_manifest["resources"]
    assert run("verify", "procs").code == 0


def test_a_list_refused_in_a_worker_process_fails_the_backup_cleanly(run, spread, grant, cluster):
    """The user may list KubernetesClusters only: the Widgets' LIST fails (403) in a worker process; the
    backup fails with the server's answer, as it does in threads, and leaves nothing behind."""
    ns, user = spread[0], "sv-user-4"
    grant(ns, user, [{"apiGroups": ["xyz.example.com"], "resources": ["kubernetesclusters"], "verbs": ["list"]}])
    args = ("-n", ns, "--include-resources", "kc,widgets.example.com", "--no-include-crds", "--list-concurrency", "2")
    kubeconfig = cluster.kubeconfig_for(user)
    refused = [run("backup", f"refused-{p}", "--processes", p, *args, kubeconfig=kubeconfig) for p in ("2", "1")]
    errors = [[line for line in r.err.splitlines() if line.startswith("error:")] for r in refused]
    for result, error in zip(refused, errors, strict=True):
        assert result.code != 0
        assert len(error) == 1 and "forbidden" in error[0] and "widgets" in error[0], result.err
    assert errors[0] == errors[1], "the same error as when listing in threads"
    listed = run("list").out
    assert "refused-1" not in listed and "refused-2" not in listed
    assert not list(run.storage.rglob("refused-*")), "no archive left behind"
