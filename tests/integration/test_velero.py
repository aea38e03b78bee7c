"""A Velero backup restored by statusvault on the real server: objects as the API server returned them,
status included, in Velero's tarball layout (format 1.1.0 with another API version kept, and format 1); restored
with --from-velero into an empty cluster, every status exact; imported as a native backup that verifies; a hostile
tarball refused with nothing written; the trust rules of a plaintext backup apply (its Secret is left out)."""

from __future__ import annotations

import json

import pytest

from statusvault.errors import ArchiveError, ExitStatus
from statusvault.vocabulary.kinds import CRDS, NAMESPACES
from tests.builders import cr, kc_status, unique
from tests.integration import test_dependencies
from tests.integration.crs.servers import delete_namespace
from tests.integration.test_dependencies import KCP, ROOTS, World
from tests.velerotar import member, tarball

pytestmark = pytest.mark.version_sensitive(
    "status writes and what the server returns (managedFields, defaults) differ by version: a Velero backup holds "
    "the objects as each version returned them"
)
KC = "xyz.example.com/v1"
projects = test_dependencies.served  # the fixture: the projects' real CRDs, for this module
KCS = "kubernetesclusters.xyz.example.com"


@pytest.fixture
def velero_objects(kube, crds, make, namespace):
    """Three KubernetesClusters with status, a Secret and their Namespace, as the server returns them (what Velero
    writes); the namespace is deleted afterwards, as for a restore into an empty cluster."""
    kc = crds.resolve("kc")
    for i in range(3):
        make(cr(KC, "KubernetesCluster", f"k-{i}", spec={"region": "eu"}, status=kc_status(i)), namespace)
    objects = [(KCS, kube.get(kc, namespace, f"k-{i}")) for i in range(3)]
    secret = {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "creds", "namespace": namespace}, "data": {}}
    objects += [("namespaces", kube.get(NAMESPACES, None, namespace)), ("secrets", secret)]
    delete_namespace(kube, namespace)
    return objects


@pytest.mark.parametrize("version", ["1.1.0", "1"])
def test_a_velero_tarball_restores_every_status_exactly(run, kube, crds, namespace, velero_objects, tmp_path, version):
    path = tarball(tmp_path / "nightly.tar.gz", velero_objects, version, other_versions={KCS: "v1alpha1"})

    result = run("restore", str(path), "--from-velero", "-o", "json")

    assert result.code == ExitStatus.SUCCESS, result.err
    kc = crds.resolve("kc")
    assert [kube.get(kc, namespace, f"k-{i}")["status"] for i in range(3)] == [kc_status(i) for i in range(3)]
    assert kube.get(crds.resolve("secrets"), namespace, "creds") is None, "a built-in type: only when named"
    report = json.loads(result.out)
    assert any(w.startswith("left out 1 object(s) of built-in types") for w in report["warnings"]), report["warnings"]
    if version == "1.1.0":
        assert "3 object(s) of other API versions left out" in result.err
    again = run("restore", str(path), "--from-velero")
    assert again.code == ExitStatus.SUCCESS, again.err


def test_an_imported_velero_backup_verifies_and_restores_like_any_other(run, kube, crds, namespace, velero_objects,
                                                                        tmp_path):  # fmt: skip
    path = tarball(tmp_path / "nightly.tar.gz", velero_objects, other_versions={KCS: "v1alpha1"})
    checked = run("verify", str(path), "--from-velero")
    assert checked.code == 0 and "OK (format 1.1.0, 5 objects checked; 3 object(s) of other" in checked.out, checked
    from statusvault import api

    assert api.verify(str(path), from_velero=True).ok, "the API judges a Velero backup as the command does"
    described = run("describe", str(path), "--from-velero", "-o", "json")
    assert described.code == 0 and json.loads(described.out)["resources"][KCS]["withStatus"] == 3, described.err
    told = json.loads(described.out)
    assert told["formatVersion"] == "Velero 1.1.0" and told["createdAt"] == "unknown", "the backup's own, not now"
    refused = run("import-velero", str(path), "--name", "from-velero")
    assert refused.code == ExitStatus.USAGE and "--allow-plaintext-secrets" in refused.err, "it holds a Secret"
    imported = run("import-velero", str(path), "--name", "from-velero", "--allow-plaintext-secrets", "-o", "json")
    assert imported.code == 0, imported.err
    assert json.loads(imported.out)["totals"]["withStatus"] == 4, "the clusters and their Namespace"

    assert run("verify", "from-velero").code == 0
    origin = run("describe", "from-velero")
    assert "Imported:   from Velero backup nightly.tar.gz (format 1.1.0, sha256 " in origin.out, origin.out
    assert "3 object(s) of other API versions left out" in origin.out
    restored = run("restore", "from-velero")
    assert restored.code == ExitStatus.SUCCESS, restored.err
    kc = crds.resolve("kc")
    assert [kube.get(kc, namespace, f"k-{i}")["status"] for i in range(3)] == [kc_status(i) for i in range(3)]


def test_a_hostile_velero_tarball_is_refused_with_nothing_written(run, kube, namespace, velero_objects, tmp_path):
    evil = ("resources/../../../etc/cron.d/x.json", b"{}")
    path = tarball(tmp_path / "evil.tar.gz", velero_objects, extra=[member(velero_objects[0][1], KCS), evil])

    refused = run("restore", str(path), "--from-velero")

    assert refused.code == ExitStatus.ERROR, refused.out + refused.err
    assert refused.err.startswith("error: Velero backup evil.tar.gz holds member") or "not a safe relative path" in (
        refused.err
    ), refused.err
    assert len(refused.err.strip().splitlines()) == 1 and "Traceback" not in refused.err
    assert kube.get(NAMESPACES, None, namespace) is None, "nothing written"
    for command in ("verify", "describe", "import-velero"):
        also = run(command, str(path), *(["--from-velero"] if command != "import-velero" else []))
        assert also.code == ExitStatus.ERROR and len(also.err.strip().splitlines()) == 1, (command, also.err)
    from statusvault import api

    with pytest.raises(ArchiveError, match="not a safe relative path|holds member"):  # the command's judge, refusing
        api.verify(str(path), from_velero=True)


def test_a_backup_in_a_velero_storage_location_is_read_by_name(run, kube, crds, namespace, velero_objects, tmp_path):
    bsl = tmp_path / "velero-bucket"
    for name, phase in (("daily-1", "Completed"), ("daily-0", "Failed")):
        (bsl / "backups" / name).mkdir(parents=True)
        tarball(bsl / "backups" / name / f"{name}.tar.gz", velero_objects)
        status = {"phase": phase, "formatVersion": "1.1.0", "startTimestamp": "2026-11-27T02:00:00Z"}
        (bsl / "backups" / name / "velero-backup.json").write_text(json.dumps({"kind": "Backup", "status": status}))

    listed = run("list", "--from-velero", "--storage", str(bsl), "-o", "json")
    assert listed.code == 0 and {(b["name"], b["phase"]) for b in json.loads(listed.out)} == {
        ("daily-0", "Failed"), ("daily-1", "Completed")}  # fmt: skip
    failed = run("restore", "daily-0", "--from-velero", "--storage", str(bsl))
    assert failed.code == ExitStatus.ERROR and "is Failed, not Completed" in failed.err, failed.err
    assert kube.get(NAMESPACES, None, namespace) is None, "nothing written"

    restored = run("restore", "daily-1", "--from-velero", "--storage", str(bsl))

    assert restored.code == ExitStatus.SUCCESS, restored.err
    assert kube.get(crds.resolve("kc"), namespace, "k-2")["status"] == kc_status(2)
    missing = run("restore", "daily-2", "--from-velero", "--storage", str(bsl))
    assert missing.code != 0 and "Velero backup 'daily-2' not found" in missing.err


def test_a_velero_backup_is_refused_where_backups_must_be_signed(run, kube, namespace, velero_objects, tmp_path):
    """A Velero backup is unauthenticated: a restore configured with a verification key refuses it, as it does any
    unsigned backup, before anything is written."""
    from statusvault.archive import signing

    public, _ = signing.generate(tmp_path / "signing.pem")
    path = tarball(tmp_path / "nightly.tar.gz", velero_objects)

    refused = run("restore", str(path), "--from-velero", "--verify-key-file", str(public))

    assert refused.code == ExitStatus.ERROR, refused.out + refused.err
    assert "is not signed, and a verification key was given" in refused.err
    assert kube.get(NAMESPACES, None, namespace) is None, "nothing written"


def test_the_projects_real_crds_restore_from_a_velero_backup_with_every_status_exact(run, kube, projects, namespace,
                                                                                     tmp_path):  # fmt: skip
    """Cluster API (a Cluster and the control plane it owns), cert-manager, CloudNativePG and a cluster-scoped
    Crossplane managed resource, with their real CRDs (fixtures/crds/vendored/), as the server returned them: a
    Velero backup of them restores into a cluster without those objects (their CRDs installed), every status
    exact and owners remapped."""
    world = World(kube, projects, namespace)
    kinds = [*ROOTS, KCP]
    objects = [
        (q, obj)
        for q in kinds
        for page in kube.list_pages(projects.by_qualified(q), None if q == ROOTS[3] else namespace)
        for obj in page
        if q != ROOTS[3] or obj["metadata"]["name"] == world.role
    ]  # fmt: skip
    crds = [(CRDS.qualified, kube.get(CRDS, None, q)) for q in kinds]
    assert len(objects) == 5 and all(o.get("status") for _, o in objects)
    path = tarball(tmp_path / "projects.tar.gz", [*crds, ("namespaces", kube.get(NAMESPACES, None, namespace)),
                                                  *objects])  # fmt: skip
    world.destroy()

    result = run("restore", str(path), "--from-velero", "-o", "json")

    assert result.code == ExitStatus.SUCCESS, result.err
    assert world.read_statuses() == world.statuses, "every status exact"
    cluster = kube.get(projects.by_qualified(ROOTS[0]), namespace, "c1")
    kcp = kube.get(projects.by_qualified(KCP), namespace, "c1-cp")
    assert [r["uid"] for r in kcp["metadata"]["ownerReferences"]] == [cluster["metadata"]["uid"]], "remapped"
    kube.delete(projects.by_qualified(ROOTS[3]), None, world.role)


def test_a_v1beta1_crd_of_a_cluster_of_1_15_or_older_is_restored_as_v1(run, kube, namespace, fresh_discovery,
                                                                       tmp_path):  # fmt: skip
    """An old cluster's Velero backup holds its CRDs as apiextensions.k8s.io/v1beta1 (one schema, subresources and
    printer columns for every version; unknown fields kept unless said otherwise), which servers from 1.22 on do not
    serve: the CRD is written as v1 with the same meaning, and its objects' statuses come back."""
    group = f"{unique('old')}.example.com"
    plural = "gizmos"
    definition = {
        "apiVersion": "apiextensions.k8s.io/v1beta1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": f"{plural}.{group}"},
        "spec": {
            "group": group,
            "version": "v1",
            "scope": "Namespaced",
            "names": {"plural": plural, "singular": "gizmo", "kind": "Gizmo"},
            "validation": {
                "openAPIV3Schema": {
                    "type": "object",
                    "properties": {"spec": {"type": "object", "properties": {"size": {"type": "integer"}}}},
                }
            },
            "subresources": {"status": {}},
            "additionalPrinterColumns": [{"name": "Size", "type": "integer", "JSONPath": ".spec.size"}],
        },
    }
    gizmos = []
    for i in range(2):
        obj = cr(f"{group}/v1", "Gizmo", f"g-{i}", spec={"size": i, "legacyField": "kept"}, status=kc_status(i))
        obj["metadata"]["namespace"] = namespace
        gizmos.append((f"{plural}.{group}", obj))
    path = tarball(tmp_path / "old.tar.gz", [(CRDS.qualified, definition), *gizmos], "1")
    delete_namespace(kube, namespace)
    try:
        result = run("restore", str(path), "--from-velero", "-o", "json")

        assert result.code == ExitStatus.SUCCESS, result.err
        assert "1 CRD(s) in a shape current servers refuse (v1beta1, or v1 without a schema) converted" in result.err
        live = kube.get(CRDS, None, f"{plural}.{group}")
        [version] = live["spec"]["versions"]
        assert version["subresources"] == {"status": {}}
        assert version["additionalPrinterColumns"][0]["jsonPath"] == ".spec.size"
        rt = fresh_discovery().resolve(f"{plural}.{group}")
        for i in range(2):
            restored = kube.get(rt, namespace, f"g-{i}")
            assert restored["status"] == kc_status(i)
            assert restored["spec"] == {"size": i, "legacyField": "kept"}, "v1beta1 kept unknown fields: so does v1"
        imported = run("import-velero", str(path), "--name", "old-cluster")
        assert imported.code == ExitStatus.SUCCESS, imported.err
        origin = run("describe", "old-cluster").out
        assert f"CRDs converted to the v1 current servers accept: {plural}.{group}" in origin, origin
    finally:
        kube.delete(CRDS, None, f"{plural}.{group}")


def test_a_v1_crd_without_a_schema_as_velero_writes_it_is_restored_with_its_objects(
    run, kube, namespace, fresh_discovery, tmp_path
):
    """`apiextensions.k8s.io/v1` with `preserveUnknownFields: true` and no schema, the shape an older server returned
    for a CRD without one and Velero writes with EnableAPIGroupVersions: a current server refuses it ("schemas are
    required"), so it is written with a schema keeping every field, and its objects come back with their statuses;
    verify and import say it was converted."""
    group = f"{unique('noschema')}.example.com"
    plural = "gadgets"
    definition = {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": f"{plural}.{group}"},
        "spec": {
            "group": group,
            "scope": "Namespaced",
            "preserveUnknownFields": True,
            "names": {"plural": plural, "singular": "gadget", "kind": "Gadget", "listKind": "GadgetList"},
            "versions": [{"name": "v1", "served": True, "storage": True, "subresources": {"status": {}}}],
        },
    }
    gadgets = []
    for i in range(2):
        obj = cr(f"{group}/v1", "Gadget", f"g-{i}", spec={"size": i, "anything": {"deep": "kept"}}, status=kc_status(i))
        obj["metadata"]["namespace"] = namespace
        gadgets.append((f"{plural}.{group}", obj))
    path = tarball(tmp_path / "noschema.tar.gz", [(CRDS.qualified, definition), *gadgets], "1.1.0")
    delete_namespace(kube, namespace)
    try:
        verified = run("verify", str(path), "--from-velero")
        assert verified.code == ExitStatus.SUCCESS and "converted" in verified.out + verified.err, verified.err
        result = run("restore", str(path), "--from-velero", "-o", "json")
        assert result.code == ExitStatus.SUCCESS, result.out + result.err
        rt = fresh_discovery().resolve(f"{plural}.{group}")
        for i in range(2):
            restored = kube.get(rt, namespace, f"g-{i}")
            assert restored["status"] == kc_status(i)
            assert restored["spec"] == {"size": i, "anything": {"deep": "kept"}}, "every field kept, as before"
    finally:
        kube.delete(CRDS, None, f"{plural}.{group}")


def test_importing_a_velero_backup_with_secrets_says_what_is_wrong_and_restoring_one_prints_no_import_lines(
    run, kube, crds, namespace, velero_objects, tmp_path
):
    """import-velero of a tarball holding a Secret, unencrypted: the refusal names the Secrets and the options that
    take them (never an --include-resources the user did not give); a restore --from-velero prints the restore's
    lines, not the internal import's "backed up N ..." lines."""
    path = tarball(tmp_path / "with-secret.tar.gz", velero_objects, "1.1.0")
    refused = run("import-velero", str(path))
    assert refused.code == ExitStatus.USAGE, refused.err
    assert "holds Secrets" in refused.err and "--allow-plaintext-secrets" in refused.err
    assert "--include-resources" not in refused.err

    restored = run("restore", str(path), "--from-velero")
    assert restored.code == ExitStatus.SUCCESS, restored.err
    assert "backed up" not in restored.err, restored.err


def test_veleros_restore_status_annotation_is_honoured_as_statusvaults_own(
    run, kube, crds, namespace, velero_objects, tmp_path
):
    """An object its controller marked `velero.io/restore-status: "false"` (Velero's design for object-level status
    restore) comes back without its status, as statusvault's own annotation would say; the others with theirs."""
    objects = []
    for qualified, obj in velero_objects:
        if obj["metadata"]["name"] == "k-1":
            meta = {**obj["metadata"], "annotations": {**obj["metadata"].get("annotations", {}),
                                                       "velero.io/restore-status": "false"}}  # fmt: skip
            obj = {**obj, "metadata": meta}
        objects.append((qualified, obj))
    path = tarball(tmp_path / "annotated.tar.gz", objects, "1.1.0")

    result = run("restore", str(path), "--from-velero", "-o", "json")

    assert result.code == ExitStatus.SUCCESS, result.out + result.err
    kc = crds.resolve("kc")
    assert kube.get(kc, namespace, "k-1").get("status") in (None, {}), "left without status, as its annotation says"
    assert [kube.get(kc, namespace, f"k-{i}")["status"] for i in (0, 2)] == [kc_status(0), kc_status(2)]
