from __future__ import annotations

import gzip
import io
import tarfile

import pytest

from statusvault.archive import ArchiveReader, member_path, parse_member_path
from statusvault.errors import ArchiveError
from statusvault.model import ObjectKey
from tests.builders import cr, resource_type, with_meta, write_archive

KC = resource_type("xyz.example.com", "KubernetesCluster")
POOL = resource_type("infra.example.com", "Pool", namespaced=False)


@pytest.mark.parametrize(
    ("key", "path"),
    [
        (
            ObjectKey("kubernetesclusters.xyz.example.com", "team-a", "prod"),
            "resources/kubernetesclusters.xyz.example.com/namespaces/team-a/prod.json",
        ),
        (ObjectKey("pools.infra.example.com", "", "p1"), "resources/pools.infra.example.com/cluster/p1.json"),
        (ObjectKey("services", "ns", "web"), "resources/services/namespaces/ns/web.json"),
    ],
)
def test_member_paths_round_trip(key, path):
    assert member_path(key) == path
    assert parse_member_path(path) == key


@pytest.mark.parametrize(
    "bad",
    [
        "/etc/passwd",
        "resources/../../x.json",
        "resources/a/namespaces/ns/../x.json",
        "manifest.txt",
        "resources/a/other/x.json",
        "resources/a/cluster/x.yaml",
        "resources//cluster/x.json",
    ],
)
def test_paths_outside_the_layout_are_refused(bad):
    with pytest.raises(ArchiveError):
        parse_member_path(bad)


def entries():
    return [
        (KC, with_meta(cr("xyz.example.com/v1", "KubernetesCluster", f"k{i}", status={"i": i}), "ns")) for i in range(5)
    ] + [(POOL, with_meta(cr("infra.example.com/v1", "Pool", "p")))]


def test_round_trip_and_verify(tmp_path):
    path = write_archive(tmp_path / "a.tar.gz", entries())
    reader = ArchiveReader(path)
    assert len(reader.manifest()["files"]) == 6
    objs = dict(reader.objects())
    assert b'"status":{"i":3}' in objs["resources/kubernetesclusters.xyz.example.com/namespaces/ns/k3.json"]
    report = reader.verify()
    assert report.ok and report.files_checked == 6


def test_manifest_is_the_last_member(tmp_path):
    path = write_archive(tmp_path / "a.tar.gz", entries())
    with tarfile.open(path) as tar:
        assert tar.getnames()[-1] == "manifest.json"


def _repack(src, dst, edit):
    out = io.BytesIO()
    with tarfile.open(src) as t, tarfile.open(fileobj=out, mode="w") as o:
        for m in t.getmembers():
            data = t.extractfile(m).read() if m.isfile() else b""
            for m2, d2 in edit(m, data):
                o.addfile(m2, io.BytesIO(d2))
    dst.write_bytes(gzip.compress(out.getvalue()))
    return dst


def test_a_modified_member_is_reported_and_refused(tmp_path):
    path = write_archive(tmp_path / "a.tar.gz", entries())

    def edit(m, data):
        if m.name.endswith("k2.json"):
            data = data.replace(b'"i":2', b'"i":9')
        yield m, data

    bad = _repack(path, tmp_path / "b.tar.gz", edit)
    report = ArchiveReader(bad).verify()
    assert report.mismatched == ["resources/kubernetesclusters.xyz.example.com/namespaces/ns/k2.json"]
    with pytest.raises(ArchiveError, match="checksum mismatch for .*k2.json"):
        list(ArchiveReader(bad).objects())


def test_missing_and_unexpected_members_are_reported(tmp_path):
    path = write_archive(tmp_path / "a.tar.gz", entries())

    def edit(m, data):
        if m.name.endswith("k1.json"):
            return
        if m.name.endswith("k4.json"):
            extra = tarfile.TarInfo("resources/kubernetesclusters.xyz.example.com/namespaces/ns/evil.json")
            body = b'{"kind":"KubernetesCluster","metadata":{"name":"evil","namespace":"ns"}}'
            extra.size = len(body)
            yield extra, body
        yield m, data

    report = ArchiveReader(_repack(path, tmp_path / "b.tar.gz", edit)).verify()
    assert report.missing == ["resources/kubernetesclusters.xyz.example.com/namespaces/ns/k1.json"]
    assert report.unexpected == ["resources/kubernetesclusters.xyz.example.com/namespaces/ns/evil.json"]
    assert not report.ok


def test_unknown_major_version_is_refused(tmp_path):
    path = write_archive(tmp_path / "a.tar.gz", entries(), format_version="2.0")
    with pytest.raises(ArchiveError, match="archive format 2.0 is not supported"):
        ArchiveReader(path).manifest()


@pytest.mark.parametrize(
    "content", [b"", b"not a tarball at all", gzip.compress(b"garbage" * 100, mtime=0)], ids=["empty", "text", "gzip"]
)
def test_malformed_archives_are_refused(tmp_path, content):
    path = tmp_path / "x.tar.gz"
    path.write_bytes(content)
    with pytest.raises(ArchiveError):
        ArchiveReader(path).manifest()
    assert not ArchiveReader(path).verify().ok


def test_archive_without_manifest_is_incomplete(tmp_path):
    path = write_archive(tmp_path / "a.tar.gz", entries())

    def edit(m, data):
        if m.name != "manifest.json":
            yield m, data

    with pytest.raises(ArchiveError, match="no manifest.json: the backup is incomplete"):
        ArchiveReader(_repack(path, tmp_path / "b.tar.gz", edit)).manifest()


def test_restore_reads_refuse_members_out_of_manifest_order(tmp_path):
    path = write_archive(tmp_path / "a.tar.gz", entries())
    held = []

    def edit(m, data):  # swap k1 and k2: same content, another order
        if m.name.endswith("k1.json"):
            held.append((m, data))
            return
        yield m, data
        if m.name.endswith("k2.json"):
            yield held.pop()

    reordered = ArchiveReader(_repack(path, tmp_path / "b.tar.gz", edit))
    with pytest.raises(ArchiveError, match="not listed in the manifest at its place"):
        list(reordered.objects())


def test_a_manifest_in_another_layout_is_still_read(tmp_path):
    """Readers must not depend on the writer's byte layout: a pretty-printed manifest works too."""
    import json as stdlib_json

    path = write_archive(tmp_path / "a.tar.gz", entries())

    def edit(m, data):
        if m.name == "manifest.json":
            data = stdlib_json.dumps(stdlib_json.loads(data), indent=2).encode()
            m.size = len(data)
        yield m, data

    reader = ArchiveReader(_repack(path, tmp_path / "b.tar.gz", edit))
    assert len(list(reader.objects())) == 6
    assert reader.head()["formatVersion"] == "1.0" and "files" not in reader.head()
    assert reader.verify().ok


def test_members_out_of_the_manifests_order_fail_verification(tmp_path):
    """Restores walk the file list in step with the archive: a reordered archive is damaged, and verify says so."""
    path = write_archive(tmp_path / "a.tar.gz", entries())
    held = []

    def edit(m, data):
        if m.name.endswith("k1.json"):
            held.append((m, data))
            return
        yield m, data
        if m.name.endswith("k2.json"):
            yield from held

    report = ArchiveReader(_repack(path, tmp_path / "b.tar.gz", edit)).verify()
    assert report.misordered == ["resources/kubernetesclusters.xyz.example.com/namespaces/ns/k1.json"]
    assert not report.mismatched and not report.missing and not report.unexpected
    assert not report.ok
