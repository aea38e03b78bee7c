"""Velero backup tarballs read as a source (statusvault/velero/backups.py): the documented layouts of format 1 and 1.1.0
(classic tree, preferred-version directory, other API versions left out and counted), the types the objects and the
backup's CRDs describe, the native backup written from it (verified, statuses kept), and hostile tarballs refused
with one line."""

from __future__ import annotations

import hashlib

import orjson
import pytest

from statusvault.archive.crypto import Key
from statusvault.archive.envelope import FileKek, Keyring
from statusvault.errors import ArchiveError
from statusvault.restore.runner import open_backup
from statusvault.storage.local import LocalStore
from statusvault.store import catalog
from statusvault.store.backups import BackupStore
from statusvault.velero import backups as velero
from tests.builders import cr, crd, kc_status
from tests.hostile import END, entry, gz, special
from tests.velerotar import member, tarball

KCS = "kubernetesclusters.xyz.example.com"
CRD_Q = "customresourcedefinitions.apiextensions.k8s.io"


def kc(i: int, ns: str = "team-a") -> dict:
    obj = cr("xyz.example.com/v1", "KubernetesCluster", f"kc-{i}", spec={"n": i}, status=kc_status(i))
    obj["metadata"].update(namespace=ns, uid=f"uid-{i}", resourceVersion=str(100 + i))
    return obj


def world() -> list[tuple[str, dict]]:
    ns = {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "team-a"}, "status": {"phase": "Active"}}
    return [(CRD_Q, crd("xyz.example.com", "KubernetesCluster")), ("namespaces", ns), *((KCS, kc(i)) for i in range(3))]


@pytest.mark.parametrize("version", ["1", "1.1.0"])
def test_each_format_reads_every_object_once_in_its_preferred_version(tmp_path, version):
    path = tarball(tmp_path / "nightly.tar.gz", world(), version, other_versions={KCS: "v1alpha1"})
    read = velero.read_tarball(path)

    assert read.format_version == version and read.total == 5
    assert sorted(read.objects(KCS)) == [("team-a", f"kc-{i}") for i in range(3)]
    assert {o["apiVersion"] for o in read.objects(KCS).values()} == {"xyz.example.com/v1"}, "never v1alpha1"
    assert (read.left_out, read.other_versions) == (3, {KCS: {"v1alpha1"}})
    types = {rt.qualified: rt for rt in read.types()}
    assert (types[KCS].version, types[KCS].kind, types[KCS].namespaced) == ("v1", "KubernetesCluster", True)
    assert (types[KCS].custom, types[KCS].has_status) == (True, True), "its CRD in the backup says so"
    assert (types["namespaces"].custom, types["namespaces"].namespaced) == (False, False)


def test_a_resource_only_in_its_preferred_version_directory_is_read_from_there(tmp_path):
    extra = [member(kc(7), KCS, "v1-preferredversion")]
    path = tarball(tmp_path / "b.tar.gz", [], "1.1.0", extra=extra)
    assert list(velero.read_tarball(path).objects(KCS)) == [("team-a", "kc-7")]


def v1beta1_crd(group: str, kind: str, status: bool) -> dict:
    """A CRD as an old cluster's Velero backup holds it (apiextensions.k8s.io/v1beta1, served until 1.22): one
    `subresources` and one `validation` for every version, not per version."""
    plural = kind.lower() + "s"
    spec = {
        "group": group,
        "version": "v1",
        "versions": [{"name": "v1", "served": True, "storage": True}],
        "scope": "Namespaced",
        "names": {"plural": plural, "singular": kind.lower(), "kind": kind},
        "validation": {"openAPIV3Schema": {"type": "object"}},
        **({"subresources": {"status": {}}} if status else {}),
    }
    return {"apiVersion": "apiextensions.k8s.io/v1beta1", "kind": "CustomResourceDefinition",
            "metadata": {"name": f"{plural}.{group}"}, "spec": spec}  # fmt: skip


def test_a_v1beta1_crd_of_an_old_cluster_says_which_of_its_types_have_the_status_subresource(tmp_path):
    with_sub, without = v1beta1_crd("xyz.example.com", "KubernetesCluster", True), v1beta1_crd("b.io", "Pool", False)
    pool = cr("b.io/v1", "Pool", "p1", status={"free": 3})
    pool["metadata"]["namespace"] = "team-a"
    objects = [(CRD_Q, with_sub), (CRD_Q, without), (KCS, kc(1)), ("pools.b.io", pool)]
    with velero.read_tarball(tarball(tmp_path / "old.tar.gz", objects, "1")) as read:
        types = {rt.qualified: rt for rt in read.types()}
    assert (types[KCS].custom, types[KCS].has_status) == (True, True), "spec.subresources: every version's"
    assert (types["pools.b.io"].custom, types["pools.b.io"].has_status) == (True, False), "its status: in the body"
    assert types[CRD_Q].version == "v1", "the CRDs written as v1, which every server from 1.16 on serves"
    assert read.converted_crds == {"kubernetesclusters.xyz.example.com", "pools.b.io"}


def test_the_native_backup_verifies_and_keeps_every_status(tmp_path):
    path = tarball(tmp_path / "nightly-20261127.tar.gz", world(), other_versions={KCS: "v1alpha1"})
    store = LocalStore(tmp_path / "store")
    key = Keyring((FileKek(Key(b"v" * 32)),))
    result = velero.import_backup(velero.read_tarball(path), store, "nightly", key=key)

    assert catalog.verify(store, "nightly", key).ok
    manifest = BackupStore(store).manifest("nightly")
    assert manifest["schedule"] == "velero:nightly-20261127.tar.gz" and result.manifest["totals"]["objects"] == 5
    assert manifest["importedFrom"] == {
        "velero": {
            "tarball": "nightly-20261127.tar.gz",
            "sha256": hashlib.sha256(path.read_bytes()).hexdigest(),
            "formatVersion": "1.1.0",
            "otherVersionsLeftOut": 3,
            "convertedCRDs": [],
        }
    }, "where it came from, in the manifest (the signed summary of a signed import)"
    assert catalog.describe(store, "nightly")["importedFrom"] == manifest["importedFrom"]
    with open_backup(store, "nightly", key) as reader:
        objects = [orjson.loads(data) for _, data in reader.objects()]
    assert {o["metadata"]["name"]: o["status"] for o in objects if o["kind"] == "KubernetesCluster"} == {
        f"kc-{i}": kc_status(i) for i in range(3)
    }


def test_objects_of_a_project_whose_dependencies_are_followed_by_default_import_as_they_are(tmp_path):
    """A Velero backup has no cluster to follow references in: Cluster API objects import without dependencies."""
    capi = cr("cluster.x-k8s.io/v1beta1", "Cluster", "c1", status={"phase": "Provisioned"})
    capi["metadata"]["namespace"] = "team-a"
    path = tarball(tmp_path / "capi.tar.gz", [("clusters.cluster.x-k8s.io", capi)])
    store = LocalStore(tmp_path / "store")

    result = velero.import_backup(velero.read_tarball(path), store, "capi", allow_plaintext_secrets=True)

    assert result.objects == 1 and "dependencies" not in result.manifest


def raw(path, members: list[bytes]):
    path.write_bytes(gz(b"".join(members) + END))
    return path


VERSION = entry("metadata/version", b"1.1.0\n")
GOOD = entry(*member(kc(0), KCS))


@pytest.mark.parametrize(
    ("members", "says"),
    [
        ([GOOD], "is not a Velero backup: it has no metadata/version"),
        ([entry("metadata/version", b"2.0.0\n"), GOOD], "format version '2.0.0': statusvault reads Velero's format 1"),
        ([VERSION, entry("resources/../../etc/x.json", b"{}")], "not a safe relative path"),
        ([VERSION, entry("/resources/a/cluster/x.json", b"{}")], "not a safe relative path"),
        ([VERSION, GOOD, GOOD], "holds member 'resources/kubernetesclusters.xyz.example.com/namespaces/team-a/kc-0"),
        ([VERSION, entry("resources/kcs/x.json", b"{}")], "outside Velero's layout"),
        ([VERSION, entry("resources/kcs/evil/cluster/x.json", b"{}")], "outside Velero's layout"),
        ([VERSION, special("resources/kcs/cluster/x.json", b"2", "/etc/passwd")], "is a symbolic link"),
        ([VERSION, entry(member(kc(0), KCS)[0], orjson.dumps(kc(1)))], "holds another object ('kc-1')"),
        ([VERSION, entry("resources/secrets/namespaces/team-a/kc-0.json", orjson.dumps(kc(0)))], "not of group ''"),
        ([VERSION, entry(member(kc(0), KCS)[0], b"[" * 10 + b"]" * 10)], "not a Kubernetes object"),
        ([VERSION, entry(member(kc(0), KCS)[0], b"{" + b'"a":1,' * 1_100_000 + b'"b":2}')], "values"),
        ([VERSION, entry(member(kc(0), KCS)[0], b"{not json")], "is not valid JSON"),
        ([VERSION, entry(member(kc(0), KCS)[0], b'{"metadata":' + b'{"a":' * 100_000 + b"1" + b"}" * 100_001)],
         "is not valid JSON: depth limit exceeded"),
    ],
    ids=["no-version", "major-2", "traversal", "absolute", "duplicate", "layout", "version-dir", "symlink",
         "other-object",
         "wrong-group", "not-an-object", "too-many-values", "bad-json", "too-deep"],
)  # fmt: skip
def test_a_hostile_tarball_is_refused_in_one_line(tmp_path, members, says):
    path = raw(tmp_path / "hostile.tar.gz", members)
    with pytest.raises(ArchiveError) as refused:
        velero.read_tarball(path)
    message = str(refused.value)
    assert says in message and "\n" not in message, message


def test_a_member_larger_than_an_object_may_be_is_refused_before_it_is_read(tmp_path, monkeypatch):
    monkeypatch.setattr(velero, "MAX_OBJECT_BYTES", 1000)
    path = raw(tmp_path / "big.tar.gz", [VERSION, entry(member(kc(0), KCS)[0], b" " * 2000)])
    with pytest.raises(ArchiveError, match="is larger than 1,000 bytes"):
        velero.read_tarball(path)


def test_members_and_objects_are_bounded_apart(tmp_path, monkeypatch):
    """Format 1.1 keeps each object at least twice: the member bound allows that, the object bound counts objects."""
    copies = [entry(*member(kc(i), KCS, version)) for i in range(3) for version in ("", "v1-preferredversion")]
    path = raw(tmp_path / "b.tar.gz", [VERSION, *copies])
    monkeypatch.setattr(velero, "MAX_OBJECTS", 3)
    with velero.read_tarball(path) as read:
        assert read.total == 3, "six members, three objects: within both bounds"
    monkeypatch.setattr(velero, "MAX_OBJECTS", 2)
    with pytest.raises(ArchiveError, match=r"^Velero backup b.tar.gz holds more than 2 objects \(the limit\)$"):
        velero.read_tarball(path)
    monkeypatch.setattr(velero, "MAX_MEMBERS", 5)
    with pytest.raises(ArchiveError, match=r"^Velero backup b.tar.gz has more than 5 members \(the limit\)$"):
        velero.read_tarball(path)


def test_a_tarball_that_is_not_gzip_is_one_line(tmp_path):
    path = tmp_path / "x.tar.gz"
    path.write_bytes(b"not gzip at all")
    with pytest.raises(ArchiveError, match=r"^x.tar.gz is not a Velero backup \(tar.gz\): "):
        velero.read_tarball(path)


def bsl_backup(store: LocalStore, name: str, phase: str | None, tmp_path) -> None:
    """A backup as a Velero backup storage location keeps it: the tarball, and velero-backup.json (unless None)."""
    path = tarball(tmp_path / f"{name}.tar.gz", world())
    store.put(velero.velero_key(name), path.read_bytes())
    if phase is not None:
        status = {"phase": phase, "formatVersion": "1.1.0", "startTimestamp": f"2026-11-2{len(name) % 9}T02:00:00Z",
                  "errors": 2 if phase == "PartiallyFailed" else 0}  # fmt: skip
        store.put(velero.velero_json_key(name), orjson.dumps({"kind": "Backup", "status": status}))


def test_a_storage_location_lists_its_backups_with_the_phase_velero_gave_them(tmp_path):
    store = LocalStore(tmp_path / "bsl")
    for name, phase in (("daily-1", "Completed"), ("daily-22", "PartiallyFailed"), ("old", None)):
        bsl_backup(store, name, phase, tmp_path)
    store.put("backups/daily-1/daily-1-logs.gz", b"logs")  # what else Velero keeps there is passed over

    listed = {b.name: (b.phase, b.format_version, b.errors) for b in velero.stored(store)}

    assert listed == {"daily-1": ("Completed", "1.1.0", 0), "daily-22": ("PartiallyFailed", "1.1.0", 2),
                      "old": ("", "", 0)}  # fmt: skip


@pytest.mark.parametrize("phase", ["Failed", "InProgress", "FailedValidation"])
def test_a_backup_velero_did_not_complete_is_refused(tmp_path, phase):
    store = LocalStore(tmp_path / "bsl")
    bsl_backup(store, "daily-1", phase, tmp_path)
    refused = pytest.raises(ArchiveError, match=f"Velero backup 'daily-1' is {phase}, not Completed")
    with refused, velero.source_path("daily-1", store):
        pass


def test_a_partially_failed_backup_is_read_with_a_warning_and_a_bad_velero_json_is_ignored(tmp_path, caplog):
    store = LocalStore(tmp_path / "bsl")
    bsl_backup(store, "daily-1", "PartiallyFailed", tmp_path)
    with velero.source_path("daily-1", store) as path:
        assert velero.read_tarball(path).total == 5
    assert "PartiallyFailed (2 error(s))" in caplog.text
    store.put(velero.velero_json_key("daily-1"), b"[not json")
    assert velero.velero_json(store, "daily-1") == {}


def test_a_velero_tarball_says_when_velero_wrote_it(tmp_path):
    """describe --from-velero shows the Velero backup's own time (its members' earliest), not the time it ran."""
    import io
    import tarfile

    from statusvault.velero import backups as velero

    path = tmp_path / "b.tar.gz"
    config_map = b'{"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c", "namespace": "a"}}'
    members = [
        ("metadata/version", b"1.1.0\n", 1_700_000_100),
        ("resources/configmaps/namespaces/a/c.json", config_map, 1_700_000_000),
    ]
    with tarfile.open(path, "w:gz", format=tarfile.PAX_FORMAT) as tar:
        for name, data, when in members:
            info = tarfile.TarInfo(name)
            info.size, info.mtime = len(data), when
            tar.addfile(info, io.BytesIO(data))
    with velero.read_tarball(path) as read:
        assert read.written_at == 1_700_000_000
