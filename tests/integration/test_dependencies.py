"""What a custom resource needs comes with it, on the real server with the projects' real CRDs (vendored
in fixtures/crds/vendored/): a Cluster API cluster with its control plane and the Secrets CAPI owns and labels, a
cert-manager Certificate and its TLS Secret, a CloudNativePG cluster and the Secrets its spec names, a Crossplane
managed resource (cluster-scoped) with its connection and password Secrets in a namespace it names.

Backed up by namespace with --with-dependencies, the namespace destroyed, restored into a cluster without it:
every dependency exists with identical data, every status exact, nothing else created. Secret data is refused in
a plaintext backup; from an unauthenticated one, dependencies of built-in types are left out unless named."""

from __future__ import annotations

import base64
import contextlib
import json
import os
import re
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from statusvault.errors import ExitStatus, KubeApiError
from statusvault.kube.client import KubeClient
from statusvault.kube.discovery import discover
from statusvault.kube.transport import load_transport
from statusvault.testing.fixtures import create_with_status, install_crds
from statusvault.vocabulary.kinds import CONFIGMAPS, CRDS, NAMESPACES, SECRETS
from tests.builders import unique
from tests.integration.crs.servers import delete_namespace, wait_gone
from tests.killsteps import Pause, Request, kill_at

pytestmark = pytest.mark.version_sensitive(
    "the projects' CRDs (CEL rules, defaults, pruning) are judged differently by each version"
)
VENDORED = Path(__file__).resolve().parents[2] / "fixtures" / "crds" / "vendored"
ROOTS = ("clusters.cluster.x-k8s.io", "certificates.cert-manager.io", "clusters.postgresql.cnpg.io",
         "roles.postgresql.sql.crossplane.io")  # fmt: skip
KCP = "kubeadmcontrolplanes.controlplane.cluster.x-k8s.io"
WHEN = "2026-01-02T03:04:05Z"
TLS = {"tls.crt": "Y3J0", "tls.key": "a2V5"}
BASIC = {"username": "cG9zdGdyZXM=", "password": "czNjcjN0"}


def condition(kind: str = "Ready") -> dict:
    return {"type": kind, "status": "True", "reason": "Available", "message": "ready", "lastTransitionTime": WHEN}


@pytest.fixture(scope="module")
def served(kube, kube_version):
    """The projects' CRDs, for this module only: 730 KB of schemas make every OpenAPI rebuild of the server (each CRD
    another test creates) that much slower, so they are deleted at the end."""
    crds = [yaml.safe_load(p.read_text()) for p in sorted(VENDORED.glob("*.yaml"))]
    if kube_version == "1.20":  # 1.20 reads `default: ""` as null and refuses it; Cluster API itself needs >= 1.28
        crds = [without_empty_defaults(crd) for crd in crds]
    yield install_crds(kube, crds)
    for crd in crds:
        kube.delete(CRDS, None, crd["metadata"]["name"])
    for crd in crds:
        wait_gone(kube, CRDS, None, crd["metadata"]["name"])


def without_empty_defaults(schema):
    if isinstance(schema, dict):
        return {k: without_empty_defaults(v) for k, v in schema.items() if not (k == "default" and v == "")}
    if isinstance(schema, list):
        return [without_empty_defaults(v) for v in schema]
    return schema


@pytest.fixture
def key_file(tmp_path) -> str:
    path = tmp_path / "backup.key"
    path.write_text(base64.b64encode(os.urandom(32)).decode())
    return str(path)


def secret(ns: str, name: str, labels: dict | None = None, owner: dict | None = None, kind: str = "Opaque") -> dict:
    meta = {"name": name, "namespace": ns, "labels": labels or {}}
    if owner is not None:
        meta["ownerReferences"] = [owner]
    data = {"value": base64.b64encode(f"{name}-secret-value".encode()).decode()}
    if kind == "kubernetes.io/service-account-token":
        meta["annotations"] = {"kubernetes.io/service-account.name": "default"}
        data = {}
    return {"apiVersion": "v1", "kind": "Secret", "type": kind, "metadata": meta, "data": data}


def owner_of(obj: dict) -> dict:
    m = obj["metadata"]
    return {"apiVersion": obj["apiVersion"], "kind": obj["kind"], "name": m["name"], "uid": m["uid"]}


class World:
    """The four projects' objects in one namespace (and the Crossplane role, cluster-scoped, naming it)."""

    def __init__(self, kube, served, ns: str):
        self.kube, self.served, self.ns = kube, served, ns
        self.role = unique("role")
        make = lambda obj, where=ns: create_with_status(kube, served, obj, where)  # noqa: E731
        cluster = make({
            "apiVersion": "cluster.x-k8s.io/v1beta1", "kind": "Cluster", "metadata": {"name": "c1"},
            "spec": {"controlPlaneRef": {"apiVersion": "controlplane.cluster.x-k8s.io/v1beta1",
                                         "kind": "KubeadmControlPlane", "name": "c1-cp"}},
            "status": {"phase": "Provisioned", "infrastructureReady": True, "controlPlaneReady": True,
                       "observedGeneration": 1},
        })  # fmt: skip
        kcp = make({
            "apiVersion": "controlplane.cluster.x-k8s.io/v1beta1", "kind": "KubeadmControlPlane",
            "metadata": {"name": "c1-cp", "ownerReferences": [owner_of(cluster)],
                         "labels": {"cluster.x-k8s.io/cluster-name": "c1"}},
            "spec": {"version": "v1.29.0", "replicas": 1,
                     "machineTemplate": {"infrastructureRef": {"apiVersion": "infrastructure.cluster.x-k8s.io/v1beta1",
                                                               "kind": "DockerMachineTemplate", "name": "c1-cp"}},
                     "kubeadmConfigSpec": {"files": [{"path": "/etc/extra", "contentFrom": {
                         "secret": {"name": "c1-files", "key": "value"}}}]}},
            "status": {"initialized": True, "ready": True, "replicas": 1, "readyReplicas": 1, "version": "v1.29.0"},
        })  # fmt: skip
        make({
            "apiVersion": "cert-manager.io/v1", "kind": "Certificate", "metadata": {"name": "web"},
            "spec": {"secretName": "web-tls", "dnsNames": ["web.example.com"], "issuerRef": {"name": "ca"}},
            "status": {"conditions": [condition()], "notAfter": WHEN, "revision": 3},
        })  # fmt: skip
        make({
            "apiVersion": "postgresql.cnpg.io/v1", "kind": "Cluster", "metadata": {"name": "db"},
            "spec": {"instances": 1, "superuserSecret": {"name": "db-superuser"}, "enableSuperuserAccess": True,
                     "imagePullSecrets": [{"name": "builder-token"}],
                     "bootstrap": {"initdb": {"database": "app", "owner": "app", "secret": {"name": "db-app"}}}},
            "status": {"phase": "Cluster in healthy state", "instances": 1, "readyInstances": 1,
                       "currentPrimary": "db-1"},
        })  # fmt: skip
        make({
            "apiVersion": "postgresql.sql.crossplane.io/v1alpha1", "kind": "Role", "metadata": {"name": self.role},
            "spec": {"forProvider": {"passwordSecretRef": {"name": "r1-pw", "namespace": ns, "key": "value"}},
                     "writeConnectionSecretToRef": {"name": "r1-conn", "namespace": ns}},
            "status": {"conditions": [condition()]},
        }, None)  # fmt: skip
        capi = {"cluster.x-k8s.io/cluster-name": "c1"}
        self.taken = {
            "c1-ca": secret(ns, "c1-ca", capi, owner_of(kcp)),  # owned by a dependency (any depth)
            "c1-kubeconfig": secret(ns, "c1-kubeconfig", capi, owner_of(cluster)),
            "c1-etcd": secret(ns, "c1-etcd", capi),  # labelled only: the cluster-api rule
            "c1-files": secret(ns, "c1-files"),  # named by the control plane (a dependency's reference)
            "web-tls": secret(ns, "web-tls", kind="kubernetes.io/tls") | {"data": TLS},
            "db-superuser": secret(ns, "db-superuser", kind="kubernetes.io/basic-auth") | {"data": BASIC},
            "db-app": secret(ns, "db-app"),
            "r1-pw": secret(ns, "r1-pw"),
            "r1-conn": secret(ns, "r1-conn"),
        }  # fmt: skip
        self.not_taken = {
            "other-ca": secret(ns, "other-ca", {"cluster.x-k8s.io/cluster-name": "other"}),
            "unrelated": secret(ns, "unrelated"),
            "builder-token": secret(ns, "builder-token", kind="kubernetes.io/service-account-token"),
        }
        for obj in [*self.taken.values(), *self.not_taken.values()]:
            kube.create(SECRETS, ns, obj)
        self.moved = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {
            "name": "capi-extra", "namespace": ns, "labels": {"clusterctl.cluster.x-k8s.io/move": ""}},
            "data": {"k": "v"}}  # fmt: skip
        kube.create(CONFIGMAPS, ns, self.moved)
        kube.create(CONFIGMAPS, ns, {"apiVersion": "v1", "kind": "ConfigMap",
                                     "metadata": {"name": "noise", "namespace": ns}, "data": {}})  # fmt: skip
        self.statuses = self.read_statuses()

    def rt(self, qualified: str):
        return self.served.by_qualified(qualified)

    def read_statuses(self) -> dict:
        k, ns = self.kube, self.ns
        return {
            "cluster": k.get(self.rt(ROOTS[0]), ns, "c1")["status"],
            "kcp": k.get(self.rt(KCP), ns, "c1-cp")["status"],
            "cert": k.get(self.rt(ROOTS[1]), ns, "web")["status"],
            "db": k.get(self.rt(ROOTS[2]), ns, "db")["status"],
            "role": k.get(self.rt(ROOTS[3]), None, self.role)["status"],
        }

    def destroy(self) -> None:
        self.kube.delete(self.rt(ROOTS[3]), None, self.role)
        wait_gone(self.kube, self.rt(ROOTS[3]), None, self.role)
        delete_namespace(self.kube, self.ns)

    def backup(self, run, name: str, *extra: str):
        return run("backup", name, "-n", self.ns, "--include-resources", ",".join(ROOTS),
                   "--include-cluster-resources", *extra)  # fmt: skip


@pytest.fixture
def world(kube, served, namespace) -> Iterator[World]:
    made = World(kube, served, namespace)
    yield made
    with contextlib.suppress(KubeApiError):  # cluster-scoped: gone with no namespace
        kube.delete(made.rt(ROOTS[3]), None, made.role)


def test_a_backup_with_dependencies_restores_what_each_resource_needs_and_nothing_else(run, kube, world, key_file):
    backed = world.backup(run, "deps", "--with-dependencies", "--encryption-key-file", key_file, "-o", "json")
    assert backed.code == 0, backed.err
    described = json.loads(run("describe", "deps", "-o", "json").out)
    edges = {(e[2], e[6]) for e in described["dependencies"]["edges"]}
    assert {("web-tls", "spec.secretName"), ("db-superuser", "spec.superuserSecret"),
            ("db-app", "spec.bootstrap.initdb.secret"), ("r1-conn", "spec.writeConnectionSecretToRef"),
            ("r1-pw", "spec.forProvider.passwordSecretRef"), ("c1-cp", "ownerReferences"),
            ("c1-ca", "ownerReferences"), ("c1-kubeconfig", "ownerReferences"),
            ("c1-etcd", "label cluster.x-k8s.io/cluster-name=<name>"),
            ("c1-ca", "label cluster.x-k8s.io/cluster-name=<name>"),  # owned and labelled: both references
            ("c1-files", "spec.kubeadmConfigSpec.files[0].contentFrom.secret"),
            ("capi-extra", "label clusterctl.cluster.x-k8s.io/move")} <= edges, edges  # fmt: skip
    taken = {e[2] for e in described["dependencies"]["edges"]}
    assert not taken & {"other-ca", "unrelated", "builder-token", "noise"}, taken
    world.destroy()
    planned = run("restore", "deps", "--encryption-key-file", key_file, "--dry-run", "client")
    assert planned.code == 0 and "DEPENDENCY" in planned.out, planned.err
    assert "dependency object(s) the backup's graph brings" in planned.out, "the line the real restore prints"
    assert re.search(rf"secrets {world.ns}/web-tls +certificates.cert-manager.io {world.ns}/web +spec.secretName",
                     planned.out), planned.out  # fmt: skip

    restored = run("restore", "deps", "--encryption-key-file", key_file, "-o", "json")

    assert restored.code == ExitStatus.SUCCESS, restored.err
    graph = json.loads(restored.out)["dependencies"]
    assert [f"secrets {world.ns}/r1-conn", f"{ROOTS[3]} {world.role}", "spec.writeConnectionSecretToRef"] in graph
    for name, saved in world.taken.items():
        live = kube.get(SECRETS, world.ns, name)
        assert live is not None and (live["data"], live["type"]) == (saved["data"], saved["type"]), name
    assert kube.get(CONFIGMAPS, world.ns, "capi-extra")["data"] == world.moved["data"]
    for name in (*world.not_taken, "noise"):
        assert kube.get(SECRETS, world.ns, name) is None and kube.get(CONFIGMAPS, world.ns, name) is None, name
    assert world.read_statuses() == world.statuses
    kcp = kube.get(world.rt(KCP), world.ns, "c1-cp")
    ca = kube.get(SECRETS, world.ns, "c1-ca")
    assert ca["metadata"]["ownerReferences"][0]["uid"] == kcp["metadata"]["uid"], "owner remapped to the new UID"
    assert "value" not in restored.out + restored.err and "c1-ca-secret" not in restored.out, "no Secret data printed"


def test_a_plaintext_backup_may_not_hold_secret_data_unless_allowed(run, kube, world):
    refused = world.backup(run, "plain", "--with-dependencies")
    errors = [line for line in refused.err.splitlines() if not line.startswith("INFO ")]
    assert refused.code == ExitStatus.USAGE and len(errors) == 1 and "holds Secret data" in errors[0], refused.err
    assert "--allow-plaintext-secrets" in refused.err
    assert run("list").out.startswith("No backups"), "nothing lands"

    allowed = world.backup(run, "plain", "--with-dependencies", "--allow-plaintext-secrets")
    assert allowed.code == 0, allowed.err
    world.destroy()
    restored = run("restore", "plain", "-o", "json")
    assert restored.code == ExitStatus.SUCCESS, restored.err
    assert kube.get(world.rt(KCP), world.ns, "c1-cp") is not None, "a custom dependency needs no authentication"
    assert all(kube.get(SECRETS, world.ns, n) is None for n in world.taken), "built-in: only from an authenticated one"
    warnings = json.loads(restored.out)["warnings"]
    assert any("the backup is not authenticated" in w for w in warnings), warnings


def test_a_mapped_namespace_takes_the_references_that_name_it_along(run, kube, world, key_file):
    assert world.backup(run, "deps", "--with-dependencies", "--encryption-key-file", key_file).code == 0
    world.destroy()
    target = unique("moved")

    restored = run("restore", "deps", "--encryption-key-file", key_file, "--namespace-mapping", f"{world.ns}:{target}")

    assert restored.code == ExitStatus.SUCCESS, restored.err
    role = kube.get(world.rt(ROOTS[3]), None, world.role)
    assert role["spec"]["writeConnectionSecretToRef"] == {"name": "r1-conn", "namespace": target}
    assert role["spec"]["forProvider"]["passwordSecretRef"]["namespace"] == target
    assert kube.get(SECRETS, target, "r1-conn")["data"] == world.taken["r1-conn"]["data"]
    kube.delete(world.rt(ROOTS[3]), None, world.role)
    kube.delete(NAMESPACES, None, target)


def test_an_existing_dependency_is_kept_and_its_difference_reported(run, kube, world, key_file):
    assert world.backup(run, "deps", "--with-dependencies", "--encryption-key-file", key_file).code == 0
    changed = kube.get(SECRETS, world.ns, "web-tls")
    changed["data"] = {"tls.crt": "bmV3", "tls.key": "bmV3"}
    kube.replace(SECRETS, world.ns, "web-tls", changed)
    kube.delete(world.rt(ROOTS[1]), world.ns, "web")

    restored = run("restore", "deps", "--encryption-key-file", key_file, "-o", "json")

    assert restored.code == ExitStatus.SUCCESS, restored.err
    assert kube.get(SECRETS, world.ns, "web-tls")["data"] == changed["data"], "never overwritten unasked"
    warnings = json.loads(restored.out)["warnings"]
    assert any("differ from the backup" in w and "web-tls" in w for w in warnings), warnings
    assert "bmV3" not in restored.out and "Y3J0" not in restored.out


def test_a_move_takes_the_same_closure_and_keeps_its_record_encrypted(run, kube, cluster, target, world):
    args = ["move", "--from-kubeconfig", str(cluster.kubeconfig), "--to-kubeconfig", str(target.kubeconfig)]
    moved = run(*args, "-n", world.ns, "--include-resources", ",".join(ROOTS), "--include-cluster-resources",
                "--with-dependencies", "-o", "json")  # fmt: skip

    assert moved.code == ExitStatus.SUCCESS, moved.out + moved.err
    target_kube = KubeClient(load_transport(str(target.kubeconfig)))
    for name, saved in world.taken.items():
        live = target_kube.get(SECRETS, world.ns, name)
        assert live is not None and live["data"] == saved["data"], name
    assert all(target_kube.get(SECRETS, world.ns, n) is None for n in world.not_taken)
    status = target_kube.get(discover(target_kube).by_qualified(KCP), world.ns, "c1-cp")["status"]
    assert status == world.statuses["kcp"]
    record = json.loads(moved.out)["backup"]
    described = run("describe", record, "-o", "json")
    assert json.loads(described.out)["encryption"] is not None, "the record holds Secrets: encrypted with its own key"
    assert (run.state / "move-keys" / f"{record}.key").stat().st_mode & 0o077 == 0, "its key is the user's alone"


BACKUP_STEPS = {
    "listing-dependencies": Request("GET", "/secrets"),  # the selected objects archived, their Secrets being listed
    "dependencies-archived": Pause("backup.dependencies-archived"),  # every dependency archived, no manifest yet
}


def edges_of(run, name: str, world: World) -> set[tuple[str, ...]]:
    """The backup's edges from or to the world's objects (the cluster holds other tests' Roles, cluster-scoped)."""
    described = run("describe", name, "-o", "json")
    assert described.code == 0, described.err
    ours = (world.ns, world.role)
    return {tuple(e) for e in json.loads(described.out)["dependencies"]["edges"] if e[1] in ours or e[5] in ours}


@pytest.mark.parametrize("step", list(BACKUP_STEPS))
def test_a_backup_killed_while_following_dependencies_ends_exact_with_the_same_command(
    run, kube, world, key_file, proxied, tmp_path, step
):
    assert world.backup(run, "clean", "--with-dependencies", "--encryption-key-file", key_file).code == 0
    proxy, kubeconfig = proxied(0.0)
    args = ["--kubeconfig", str(kubeconfig), "backup", "b", "-n", world.ns, "--include-resources", ",".join(ROOTS),
            "--include-cluster-resources", "--with-dependencies", "--encryption-key-file", key_file]  # fmt: skip
    env = {"STATUSVAULT_STORAGE": str(run.storage), "STATUSVAULT_STATE_DIR": str(run.state)}

    kill_at(BACKUP_STEPS[step], args, env, {"source": proxy}, tmp_path)
    assert [b["name"] for b in json.loads(run("list", "-o", "json").out) if b["phase"] == "Completed"] == ["clean"]

    again = run(*args[2:], kubeconfig=kubeconfig)
    assert again.code == 0, again.err
    assert run("verify", "b", "--encryption-key-file", key_file).code == 0
    assert edges_of(run, "b", world) == edges_of(run, "clean", world)


def test_a_restore_killed_among_the_dependencies_ends_exact_with_the_same_command(
    run, kube, world, key_file, proxied, tmp_path
):
    assert world.backup(run, "deps", "--with-dependencies", "--encryption-key-file", key_file).code == 0
    world.destroy()
    proxy, kubeconfig = proxied(0.0)
    args = ["--kubeconfig", str(kubeconfig), "restore", "deps", "--encryption-key-file", key_file, "--parallel", "2"]
    env = {"STATUSVAULT_STORAGE": str(run.storage), "STATUSVAULT_STATE_DIR": str(run.state)}

    kill_at(Request("POST", "/secrets", nth=3), args, env, {"source": proxy}, tmp_path)
    assert kube.get(world.rt(ROOTS[0]), world.ns, "c1") is None, "dependencies are written first"

    again = run(*args[2:], "-o", "json", kubeconfig=kubeconfig)
    assert again.code == ExitStatus.SUCCESS, again.err
    for name, saved in world.taken.items():
        assert kube.get(SECRETS, world.ns, name)["data"] == saved["data"], name
    assert world.read_statuses() == world.statuses


def test_a_restore_of_dependencies_through_faults_ends_exact(run, kube, world, key_file, proxied):
    """429s, 5xx, resets and lost answers (a create the server made whose answer never came) on the way to the
    server: the dependencies and their dependents all come back exact, once each."""
    assert world.backup(run, "faulty", "--with-dependencies", "--encryption-key-file", key_file).code == 0
    world.destroy()
    proxy, kubeconfig = proxied(0.15, seed=11, retry_after="0.1")

    result = run("restore", "faulty", "--encryption-key-file", key_file, "--parallel", "4", "-o", "json",
                 kubeconfig=kubeconfig)  # fmt: skip

    assert result.code == ExitStatus.SUCCESS, result.err
    assert sum(proxy.counts.values()) > 0, "faults were injected"
    for name, saved in world.taken.items():
        assert kube.get(SECRETS, world.ns, name)["data"] == saved["data"], name
    assert world.read_statuses() == world.statuses
    items = json.loads(result.out)["items"]
    assert len({(i["resource"], i["namespace"], i["name"]) for i in items}) == len(items), "one result per object"


def test_cluster_api_objects_bring_their_dependencies_unasked_but_never_secrets_in_clear(run, kube, world, key_file):
    capi = ("-n", world.ns, "--include-resources", ROOTS[0])
    sealed = run("backup", "sealed", *capi, "--encryption-key-file", key_file)
    assert sealed.code == 0, sealed.err
    taken = {e[2] for e in json.loads(run("describe", "sealed", "-o", "json").out)["dependencies"]["edges"]}
    assert taken == {"c1-cp", "c1-ca", "c1-kubeconfig", "c1-etcd", "c1-files", "capi-extra"}, taken

    plain = run("backup", "plain", *capi)
    assert plain.code == 0 and "left out the Secrets the rules of cluster-api bring" in plain.err, plain.err
    deps = json.loads(run("describe", "plain", "-o", "json").out)["dependencies"]
    assert {e[2] for e in deps["edges"]} == {"c1-cp", "capi-extra"} and deps["projects"] == ["cluster-api"]
    assert deps["leftOut"] == {"Secret data in a backup not encrypted": 4}, deps  # c1-ca, -kubeconfig, -etcd, -files

    off = run("backup", "off", *capi, "--no-with-dependencies")
    assert off.code == 0 and json.loads(run("describe", "off", "-o", "json").out)["dependencies"] is None
    other = run("backup", "other", "-n", world.ns, "--include-resources", ROOTS[1])  # cert-manager: off by default
    assert other.code == 0 and json.loads(run("describe", "other", "-o", "json").out)["dependencies"] is None


def test_ownership_is_followed_through_built_in_types_whatever_order_they_are_listed_in(run, kube, namespace, key_file):
    """A custom resource owns a Service, which owns a Secret (OpenShift's service-ca operator sets exactly this
    owner): the backup takes both, whatever order it lists Secrets and Services in, and the restore brings them
    back owned by the new objects' UIDs."""
    from tests.builders import cr, crd

    group = f"{unique('chain')}.example.com"
    rt = install_crds(kube, [crd(group, "Database")]).by_qualified(f"databases.{group}")
    served = discover(kube)
    db = create_with_status(kube, served, cr(f"{group}/v1", "Database", "pg", status={"id": "db-1"}), namespace)
    services = served.by_qualified("services")
    svc = kube.create(services, namespace, {
        "apiVersion": "v1", "kind": "Service",
        "metadata": {"name": "pg-rw", "ownerReferences": [owner_of(db)]},
        "spec": {"ports": [{"port": 5432}], "selector": {"app": "pg"}},
    })  # fmt: skip
    kube.create(SECRETS, namespace, secret(namespace, "pg-rw-tls", owner=owner_of(svc)))
    kube.create(SECRETS, namespace, secret(namespace, "unrelated"))

    backed = run("backup", "chain", "-n", namespace, "--include-resources", rt.qualified, "--with-dependencies",
                 "--encryption-key-file", key_file)  # fmt: skip
    assert backed.code == 0, backed.err
    edges = {
        (e[2], e[5], e[6]) for e in json.loads(run("describe", "chain", "-o", "json").out)["dependencies"]["edges"]
    }
    assert ("pg-rw", "pg", "ownerReferences") in edges and ("pg-rw-tls", "pg-rw", "ownerReferences") in edges, edges
    assert not any(e[0] == "unrelated" for e in edges)
    delete_namespace(kube, namespace)

    restored = run("restore", "chain", "--encryption-key-file", key_file)
    assert restored.code == ExitStatus.SUCCESS, restored.out + restored.err
    new_db, new_svc = kube.get(rt, namespace, "pg"), kube.get(services, namespace, "pg-rw")
    tls = kube.get(SECRETS, namespace, "pg-rw-tls")
    assert new_db["status"] == {"id": "db-1"}
    assert new_svc["metadata"]["ownerReferences"][0]["uid"] == new_db["metadata"]["uid"]
    assert tls["metadata"]["ownerReferences"][0]["uid"] == new_svc["metadata"]["uid"], "owned by the new Service"
    assert kube.get(SECRETS, namespace, "unrelated") is None
