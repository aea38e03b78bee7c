"""What a custom resource needs (dependencies.py): which schema fields are references, read against the projects'
real CRDs; the references an object makes; and which dependencies a restore takes (the trust rules)."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from statusvault.archive import ArchiveReader
from statusvault.dependencies import (
    CONFIGMAP,
    SECRET,
    DependencyIndex,
    Reference,
    crd_schema,
    move_reference,
    references,
    schema_fields,
)
from statusvault.errors import ArchiveError
from statusvault.kube.discovery import Discovery
from statusvault.model import ObjectKey
from statusvault.restore.core.plan import Action
from statusvault.restore.options import RestoreOptions
from statusvault.restore.planning.build import build_plan
from statusvault.vocabulary.kinds import CLUSTER_ROLE_BINDINGS, CONFIGMAPS, NAMESPACES, SECRETS
from tests.builders import cr, resource_type, with_meta, write_archive

VENDORED = Path(__file__).resolve().parents[2] / "fixtures" / "crds" / "vendored"


def fields_of(file: str) -> dict[str, str]:
    crd = yaml.safe_load((VENDORED / file).read_text())
    storage = next(v["name"] for v in crd["spec"]["versions"] if v.get("storage"))
    return {f.dotted: f.target for f in schema_fields(crd_schema(crd, storage)) or ()}


@pytest.mark.parametrize(
    ("file", "expected"),
    [
        ("cert-manager.io_certificates.yaml", {"spec.secretName": SECRET,
                                               "spec.keystores.pkcs12.passwordSecretRef": SECRET}),
        ("postgresql.cnpg.io_clusters.yaml", {
            "spec.superuserSecret": SECRET, "spec.bootstrap.initdb.secret": SECRET, "spec.imagePullSecrets[]": SECRET,
            "spec.backup.barmanObjectStore.s3Credentials.accessKeyId": SECRET,  # a key selector: its shape says
            "spec.certificates.serverTLSSecret": SECRET,  # a string its description says names a Secret
            "spec.envFrom[].configMapRef": CONFIGMAP, "spec.monitoring.customQueriesConfigMap[]": CONFIGMAP,
            "spec.bootstrap.initdb.postInitSQLRefs.secretRefs[]": SECRET}),
        ("postgresql.sql.crossplane.io_roles.yaml", {"spec.writeConnectionSecretToRef": SECRET,
                                                     "spec.forProvider.passwordSecretRef": SECRET}),
        ("controlplane.cluster.x-k8s.io_kubeadmcontrolplanes.yaml", {
            "spec.kubeadmConfigSpec.files[].contentFrom.secret": SECRET,
            "spec.kubeadmConfigSpec.clusterConfiguration.apiServer.extraEnvs[].valueFrom.configMapKeyRef": CONFIGMAP}),
    ],
)  # fmt: skip
def test_the_real_crds_schemas_say_where_their_references_are(file, expected):
    found = fields_of(file)
    assert {k: found.get(k) for k in expected} == expected


def test_references_that_are_not_secrets_are_not_taken_for_them():
    found = fields_of("cluster.x-k8s.io_clusters.yaml")
    assert not [f for f, t in found.items() if t], "controlPlaneRef, infrastructureRef name no Secret"
    cnpg = fields_of("postgresql.cnpg.io_clusters.yaml")
    assert "spec.certificates.serverAltDNSNames" not in cnpg and not any("status" in f for f in cnpg)


SCHEMA = {"type": "object", "properties": {"spec": {"type": "object", "properties": {
    "clientSecret": {"type": "string", "description": "The OAuth client secret itself."},
    "secretStoreRef": {"type": "object", "properties": {"name": {"type": "string"}, "kind": {"type": "string"}}},
    "credentials": {"type": "object", "properties": {"name": {"type": "string"}, "key": {"type": "string"}}},
    "tokenSecretName": {"type": "string"},
    "extra": {"type": "object", "x-kubernetes-preserve-unknown-fields": True},
    "target": {"type": "object", "properties": {"kind": {"type": "string"}, "name": {"type": "string"},
                                                "apiVersion": {"type": "string"}}},
}}}}  # fmt: skip


def test_an_object_names_what_its_schema_says_and_no_value_is_taken_for_a_name():
    source = ObjectKey("things.example.com", "team-a", "t1")
    obj = {"spec": {
        "clientSecret": "hunter2",  # a value, not a name: never looked up
        "secretStoreRef": {"name": "vault", "kind": "ClusterSecretStore"},  # a SecretStore, not a Secret
        "credentials": {"name": "creds", "key": "token"},
        "tokenSecretName": "token",
        "extra": {"deep": [{"configMapRef": {"name": "settings", "namespace": "shared"}}]},
        "target": {"kind": "Secret", "apiVersion": "v1", "name": "kinded"},
    }}  # fmt: skip
    refs = {(r.target.qualified, r.target.namespace, r.target.name, r.via)
            for r in references(obj, schema_fields(SCHEMA), source)}  # fmt: skip
    assert refs == {
        (SECRET, "team-a", "creds", "spec.credentials"),
        (SECRET, "team-a", "token", "spec.tokenSecretName"),
        (CONFIGMAP, "shared", "settings", "spec.extra.deep[0].configMapRef"),
        (SECRET, "team-a", "kinded", "spec.target"),
    }


def test_without_a_schema_field_names_alone_are_read():
    source = ObjectKey("things.example.com", "", "cluster-scoped")
    obj = {"spec": {"writeConnectionSecretToRef": {"name": "conn", "namespace": "crossplane-system"},
                    "passwordSecretRef": {"name": "no-namespace"}}}  # fmt: skip
    refs = [(r.target.namespace, r.target.name) for r in references(obj, None, source)]
    assert refs == [("crossplane-system", "conn")], "a cluster-scoped object's reference needs its namespace"


def test_a_mapped_namespace_moves_a_reference_that_names_it_only():
    obj = {"spec": {"a": [{"ref": {"name": "x", "namespace": "old"}}], "b": {"name": "y"}}}
    assert move_reference(obj, "spec.a[0].ref", {"old": "new"}) and obj["spec"]["a"][0]["ref"]["namespace"] == "new"
    assert not move_reference(obj, "spec.b", {"old": "new"}) and obj["spec"]["b"] == {"name": "y"}
    assert not move_reference(obj, "spec.a[3].ref", {"old": "new"}) and not move_reference(obj, "spec.zz", {})


@pytest.mark.parametrize("edges", [{"edges": "x"}, [], {"edges": [["a", "b"]]}, {"edges": [[1, 2, 3, 4, 5, 6, 7]]}])
def test_a_malformed_graph_is_refused(edges):
    with pytest.raises(ValueError, match="dependencies|edge"):
        DependencyIndex.of({"dependencies": edges})


# --- The restore's rules, on the planner -----------------------------------------------------------------------

KC = resource_type("xyz.example.com", "KubernetesCluster")
CHILD = resource_type("xyz.example.com", "ControlPlane")


def objects():
    kc = with_meta(cr("xyz.example.com/v1", "KubernetesCluster", "k1", status={"a": 1}), "team-a", "uid-k1")
    other = with_meta(cr("xyz.example.com/v1", "KubernetesCluster", "k2", status={"a": 2}), "team-a", "uid-k2")
    child = with_meta(cr("xyz.example.com/v1", "ControlPlane", "cp", status={"b": 1}), "team-a", "uid-cp")
    secret = lambda name, kind="Opaque": with_meta(  # noqa: E731
        {"apiVersion": "v1", "kind": "Secret", "type": kind, "metadata": {"name": name}, "data": {"v": "eA=="}},
        "team-a",
    )
    crb = with_meta({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding",
                     "metadata": {"name": "evil"}, "roleRef": {}, "subjects": []})  # fmt: skip
    entries = [
        (KC, kc),
        (KC, other),
        (CHILD, child),
        (SECRETS, secret("creds")),
        (SECRETS, secret("of-k2")),
        (SECRETS, secret("token", "kubernetes.io/service-account-token")),
        (CLUSTER_ROLE_BINDINGS, crb),
        (CONFIGMAPS, with_meta({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "cfg"}}, "team-a")),
    ]
    edge = lambda q, name, source, via, ns="team-a": [q, ns, name, KC.qualified, "team-a", source, via]  # noqa: E731
    graph = {"objects": 6, "projects": [], "missing": [], "edges": [
        edge(SECRETS.qualified, "creds", "k1", "spec.credentialsRef"),
        edge(SECRETS.qualified, "of-k2", "k2", "spec.credentialsRef"),
        edge(SECRETS.qualified, "token", "k1", "spec.tokenRef"),
        edge(CLUSTER_ROLE_BINDINGS.qualified, "evil", "k1", "ownerReferences", ""),
        edge(CONFIGMAPS.qualified, "cfg", "k1", "spec.settingsRef"),
        edge(CHILD.qualified, "cp", "k1", "ownerReferences")]}  # fmt: skip
    return entries, graph


def plan_of(tmp_path, authenticated: bool, **selection):
    from statusvault.model import Selection

    entries, graph = objects()
    reader = ArchiveReader(write_archive(tmp_path / "a.tar.gz", entries, manifest={"dependencies": graph}))
    reader.authenticated = authenticated
    live = Discovery([KC, CHILD, SECRETS, CONFIGMAPS, CLUSTER_ROLE_BINDINGS, NAMESPACES],
                     [KC, CHILD, SECRETS, CONFIGMAPS, CLUSTER_ROLE_BINDINGS, NAMESPACES])  # fmt: skip
    opts = RestoreOptions(selection=Selection(**selection))
    return build_plan(reader, options=opts, live=live, exists=lambda rt, ns, name: False, backup="b")


def taken(plan) -> dict[str, int]:
    return {f"{i.rt.resource}/{i.name}": i.depth for w in plan.waves() for i in plan.items(w)
            if i.action == Action.CREATE and i.rt.resource != "namespaces"}  # fmt: skip


def test_an_authenticated_backup_brings_the_dependencies_of_what_is_restored_first(tmp_path):
    plan = plan_of(tmp_path, authenticated=True, names=("k1",))
    got = taken(plan)
    assert got == {"kubernetesclusters/k1": 0, "controlplanes/cp": -1, "secrets/creds": -1, "configmaps/cfg": -1}, got
    assert any("a service account token (1)" in w for w in plan.warnings), plan.warnings
    assert ["secrets team-a/creds", f"{KC.qualified} team-a/k1", "spec.credentialsRef"] in plan.dependencies
    assert any(w.startswith("with 3 dependency object(s) the backup's graph brings: configmaps (1), controlplanes")
               for w in plan.warnings), plan.warnings  # fmt: skip
    assert any("clusterrolebindings.rbac.authorization.k8s.io: not a type" in w for w in plan.warnings)
    plan.close()


def test_an_unauthenticated_backup_brings_custom_dependencies_only(tmp_path):
    plan = plan_of(tmp_path, authenticated=False)
    got = taken(plan)
    assert set(got) == {"kubernetesclusters/k1", "kubernetesclusters/k2", "controlplanes/cp"}, got
    why = "secrets: the backup is not authenticated (encrypt or sign it) (3)"
    assert any(why in w for w in plan.warnings), plan.warnings
    plan.close()


def test_a_malformed_graph_fails_the_plan(tmp_path):
    entries, _ = objects()
    reader = ArchiveReader(write_archive(tmp_path / "a.tar.gz", entries, manifest={"dependencies": {"edges": 1}}))
    with pytest.raises(ArchiveError, match="malformed"):
        build_plan(reader, options=RestoreOptions(), live=Discovery([KC], [KC]), exists=lambda *a: False)


def test_edges_round_trip():
    e = Reference(ObjectKey("secrets", "a", "b"), ObjectKey("x.y", "", "c"), "spec.r")
    assert Reference.from_list(e.to_list()) == e


def test_two_fields_naming_one_secret_are_two_references():
    """docs/dependencies.md: once per reference. A field found both by the schema and as a typed reference is one."""
    from statusvault.dependencies import references

    obj = {"spec": {"tlsSecretRef": {"name": "shared"}, "backupSecretRef": {"name": "shared"}}}
    found = list(references(obj, None, ObjectKey("dbs.example.com", "team-a", "db")))
    assert sorted(r.via for r in found) == ["spec.backupSecretRef", "spec.tlsSecretRef"], found
    assert {r.target for r in found} == {ObjectKey("secrets", "team-a", "shared")}
