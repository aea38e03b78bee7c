"""`statusvault restore` against the real API server: two passes, exact status, owners, policies, dry runs."""

from __future__ import annotations

import json

import pytest

from statusvault.errors import ExitStatus
from statusvault.kube.discovery import discover
from statusvault.kube.transport import MERGE_PATCH
from statusvault.testing.fixtures import FIXTURES, ensure_namespace, install_crds, load_objects
from statusvault.vocabulary.kinds import CRDS, NAMESPACES
from tests.builders import cr, crd, kc_status, owner_ref, unique, unique_kind
from tests.integration.crs.servers import delete_namespace, replace_schema_and_wait, wait_gone

pytestmark = pytest.mark.version_sensitive(
    "the two-pass restore against each server's create, /status, owner-reference and dry-run semantics"
)

KC = "xyz.example.com/v1"


def items(report: dict) -> dict[str, dict]:
    return {f"{i['resource']} {i['namespace']}/{i['name']}": i for i in report["items"]}


def test_seeds_kubernetescluster_deleted_then_restored_with_exact_status(run, kube, crds, namespace):
    """The user's story: the namespace is gone; every status comes back exactly as it was."""
    before = {
        o["metadata"]["name"]: o
        for o in load_objects(kube, crds, FIXTURES / "objects" / "team-a.yaml", namespace)
        if o["kind"] != "ClusterPool"
    }
    assert run("backup", "seeds", "-n", namespace).code == 0
    prod = kube.get(crds.resolve("kc"), namespace, "prod-eu")
    prod["metadata"]["finalizers"] = []  # the operator would release its finalizer on delete
    kube.replace(crds.resolve("kc"), namespace, "prod-eu", prod)
    delete_namespace(kube, namespace)

    result = run("restore", "seeds", "--status-include-resources", "kubernetesclusters.xyz.example.com", "-o", "json")
    assert result.code == 0, result.err
    for name, old in before.items():
        group, _, version = old["apiVersion"].rpartition("/")
        rt = crds.find(group, version, old["kind"])
        if rt.resource == "kubernetesclusters":
            new = kube.get(rt, namespace, name)
            assert new["status"] == old["status"]
            assert new["spec"] == old["spec"]
            assert new["metadata"]["labels"] == old["metadata"]["labels"]
            assert new["metadata"]["uid"] != old["metadata"]["uid"]
    restored = kube.get(crds.resolve("kc"), namespace, "prod-eu")
    assert restored["metadata"]["finalizers"] == ["xyz.example.com/deprovision"]
    assert restored["metadata"]["annotations"] == {"example.com/owner": "platform"}
    # --status-include-resources narrowed status restore to KubernetesClusters
    assert "status" not in kube.get(crds.resolve("databases.db.example.com"), namespace, "orders")
    assert (json.loads(result.out)["serverChanges"], json.loads(result.out)["serverWarnings"]) == ([], []), (
        "what the server returned is what was sent: nothing to report"
    )
    report = items(json.loads(result.out))
    assert report[f"kubernetesclusters.xyz.example.com {namespace}/prod-eu"]["status"] == "written"
    assert report[f"databases.db.example.com {namespace}/orders"]["status"] == "left-out"
    assert any(
        "observedGeneration is 4" in n
        for n in report[f"kubernetesclusters.xyz.example.com {namespace}/prod-eu"]["notes"]
    )


def test_objects_an_earlier_release_created_without_their_status_are_finished_whatever_the_policy(
    run, kube, crds, make, namespace
):
    """A restore killed between its two passes under another release, whose state this one cannot resume: what it
    created carries that run's field manager and no status. The plain re-run (policy none) writes their saved
    status instead of counting them as kept; an object someone else created keeps its own status."""
    kc = crds.resolve("kc")
    for i in range(4):
        make(cr(KC, "KubernetesCluster", f"k-{i}", spec={"region": "eu"}, status=kc_status(i)), namespace)
    assert run("backup", "b", "-n", namespace).code == 0
    for i in range(4):
        kube.delete(kc, namespace, f"k-{i}")
        wait_gone(kube, kc, namespace, f"k-{i}")
    for i in range(2):  # the killed run's first pass
        body = cr(KC, "KubernetesCluster", f"k-{i}", spec={"region": "eu"})
        kube.create(kc, namespace, body, manager="statusvault-restore-0123456789abcdef")
    make(cr(KC, "KubernetesCluster", "k-3", spec={"region": "us"}, status=kc_status(9)), namespace)

    result = run("restore", "b", "-n", namespace, "-o", "json")

    assert result.code == ExitStatus.SUCCESS, result.err
    for i in range(3):
        assert kube.get(kc, namespace, f"k-{i}")["status"] == kc_status(i)
    assert kube.get(kc, namespace, "k-3")["status"] == kc_status(9), "not statusvault's: left as it is"
    report = items(json.loads(result.out))
    assert report[f"kubernetesclusters.xyz.example.com {namespace}/k-0"]["status"] == "written"
    assert report[f"kubernetesclusters.xyz.example.com {namespace}/k-3"]["status"] == "kept"


def test_an_existing_object_without_any_status_is_counted_whatever_the_policy(run, kube, crds, make, namespace):
    """Someone else's object, there before the restore and never given a status, while the backup holds one:
    policy none leaves it, and the restore says its saved status is not on it (exit 3) instead of "kept"."""
    kc = crds.resolve("kc")
    make(cr(KC, "KubernetesCluster", "k-0", spec={"region": "eu"}, status=kc_status(0)), namespace)
    assert run("backup", "b", "-n", namespace).code == 0
    kube.delete(kc, namespace, "k-0")
    wait_gone(kube, kc, namespace, "k-0")
    make(cr(KC, "KubernetesCluster", "k-0", spec={"region": "eu"}), namespace)  # its GitOps copy: no status

    counted = run("restore", "b", "-n", namespace, "-o", "json")

    assert counted.code == ExitStatus.PARTIAL_FAILURE, counted.err
    item = items(json.loads(counted.out))[f"kubernetesclusters.xyz.example.com {namespace}/k-0"]
    assert (item["result"], item["status"]) == ("skipped", "not-written")
    assert any("already exists without any status (policy none)" in n for n in item["notes"]), item
    assert "status" not in kube.get(kc, namespace, "k-0"), "policy none: left as it is"
    written = run("restore", "b", "-n", namespace, "--existing-resource-policy", "update")
    assert written.code == ExitStatus.SUCCESS, written.err
    assert kube.get(kc, namespace, "k-0")["status"] == kc_status(0)


def test_default_restores_every_custom_status_and_respects_exclude_and_annotation(run, kube, crds, make, namespace):
    make(cr(KC, "KubernetesCluster", "a", status=kc_status(1)), namespace)
    make(
        cr(
            KC,
            "KubernetesCluster",
            "optout",
            status=kc_status(2),
            annotations={"statusvault.io/restore-status": "false"},
        ),
        namespace,
    )
    make(cr("db.example.com/v1", "Database", "d", status={"externalID": "db-1"}), namespace)
    make(
        cr(
            "example.com/v1",
            "Widget",
            "w",
            status={"state": "On"},
            annotations={"statusvault.io/restore-status": "true"},
        ),
        namespace,
    )
    assert run("backup", "b", "-n", namespace).code == 0
    delete_namespace(kube, namespace)

    result = run("restore", "b", "--status-exclude-resources", "widgets.example.com,databases.db.example.com")
    assert result.code == 0, result.err
    assert kube.get(crds.resolve("kc"), namespace, "a")["status"] == kc_status(1)
    assert "status" not in kube.get(crds.resolve("kc"), namespace, "optout"), "annotation false wins"
    assert "status" not in kube.get(crds.resolve("databases.db.example.com"), namespace, "d"), "excluded"
    assert kube.get(crds.resolve("widgets.example.com"), namespace, "w")["status"] == {"state": "On"}, (
        "annotation true beats the exclude"
    )


def test_no_status_restores_objects_only(run, kube, crds, make, namespace):
    make(cr(KC, "KubernetesCluster", "a", status=kc_status(1)), namespace)
    assert run("backup", "b", "-n", namespace).code == 0
    delete_namespace(kube, namespace)
    assert run("restore", "b", "--no-status").code == 0
    obj = kube.get(crds.resolve("kc"), namespace, "a")
    assert obj is not None and "status" not in obj


def test_crd_without_status_subresource_gets_status_in_the_create_body(run, kube, crds, make, namespace):
    make(
        cr("legacy.example.com/v1", "LegacyApp", "l", spec={"replicas": 2}, status={"externalRef": "app-7"}),
        namespace,
    )
    assert run("backup", "b", "-n", namespace).code == 0
    delete_namespace(kube, namespace)
    result = run("restore", "b", "-o", "json")
    assert result.code == 0, result.err
    assert kube.get(crds.resolve("legacyapps.legacy.example.com"), namespace, "l")["status"] == {"externalRef": "app-7"}
    assert items(json.loads(result.out))[f"legacyapps.legacy.example.com {namespace}/l"]["status"] == "in-body"


def test_cluster_scoped_crs_and_their_crd_into_an_empty_cluster(run, kube, fresh_discovery):
    group = f"{unique('g')}.example.com"
    definition = crd(group, "Pool", scope="Cluster")
    d = install_crds(kube, [definition])
    rt = d.resolve(f"pools.{group}")
    obj = kube.create(rt, None, cr(f"{group}/v1", "Pool", "p1", spec={"size": 3}))
    obj["status"] = {"allocated": 2, "poolID": "pool-1"}
    kube.replace(rt, None, "p1", obj, sub="status")
    assert run("backup", "cl", "--include-resources", f"pools.{group}").code == 0

    kube.delete(rt, None, "p1")
    kube.delete(CRDS, None, f"pools.{group}")
    wait_gone(kube, CRDS, None, f"pools.{group}")
    result = run("restore", "cl", "-o", "json")
    assert result.code == 0, result.err
    live = fresh_discovery().resolve(f"pools.{group}")
    assert kube.get(live, None, "p1")["status"] == {"allocated": 2, "poolID": "pool-1"}
    report = items(json.loads(result.out))
    assert report[f"customresourcedefinitions.apiextensions.k8s.io /pools.{group}"]["result"] == "created"
    assert not any("serverChanges" in i for i in report.values()), "a CRD's defaults are not changes"


@pytest.mark.core_api("the garbage collector runs in the controller manager, which the CRD-only server lacks")
def test_owner_references_are_remapped_and_dependents_survive_gc(run, kube, crds, make, namespace):
    owner = make(cr(KC, "KubernetesCluster", "parent", status=kc_status(1)), namespace)
    make(
        cr("db.example.com/v1", "Database", "child", status={"externalID": "db-9"}, owners=[owner_ref(owner)]),
        namespace,
    )
    assert run("backup", "b", "-n", namespace).code == 0
    delete_namespace(kube, namespace)

    result = run("restore", "b", "-o", "json")
    assert result.code == 0, result.err
    new_owner = kube.get(crds.resolve("kc"), namespace, "parent")
    # A canary whose owner UID is the old one: once the garbage collector has removed it, it has judged the
    # restored child too (a wait on the collector itself, not on a guess of how long it takes).
    canary = cr("db.example.com/v1", "Database", "canary", owners=[owner_ref(owner)])
    kube.create(crds.resolve("databases.db.example.com"), namespace, canary)
    wait_gone(kube, crds.resolve("databases.db.example.com"), namespace, "canary")
    child = kube.get(crds.resolve("databases.db.example.com"), namespace, "child")
    assert child is not None, "the dependent was garbage-collected: its owner UID was not remapped"
    assert child["metadata"]["ownerReferences"][0]["uid"] == new_owner["metadata"]["uid"]
    assert child["metadata"]["ownerReferences"][0]["uid"] != owner["metadata"]["uid"]
    assert child["status"] == {"externalID": "db-9"}


def test_owner_absent_reference_is_dropped_with_a_warning(run, kube, crds, make, namespace):
    owner = make(cr(KC, "KubernetesCluster", "parent"), namespace)
    make(
        cr("db.example.com/v1", "Database", "child", status={"externalID": "db-9"}, owners=[owner_ref(owner)]),
        namespace,
    )
    assert run("backup", "b", "-n", namespace, "--include-resources", "databases.db.example.com").code == 0
    delete_namespace(kube, namespace)
    result = run("restore", "b", "-o", "json")
    assert result.code == 0, result.err
    child = kube.get(crds.resolve("databases.db.example.com"), namespace, "child")
    assert "ownerReferences" not in child["metadata"]
    notes = items(json.loads(result.out))[f"databases.db.example.com {namespace}/child"]["notes"]
    assert notes == ["ownerReference to KubernetesCluster parent dropped: owner not found"]
    assert "dropped: owner not found" in result.err


def test_restore_one_object_by_name(run, kube, crds, make, namespace, core_api):
    for name in ("prod", "staging"):
        make(cr(KC, "KubernetesCluster", name, status=kc_status(1)), namespace)
    assert run("backup", "b", "-n", namespace).code == 0
    delete_namespace(kube, namespace)
    result = run("restore", "b", "--include-resources", "kc", "--name", "prod", "-o", "json")
    assert result.code == 0, result.err
    restored = {i["name"] for i in json.loads(result.out)["items"]}
    assert restored >= {"prod", namespace} if core_api else "prod" in restored
    assert kube.get(crds.resolve("kc"), namespace, "prod")["status"] == kc_status(1)
    assert kube.get(crds.resolve("kc"), namespace, "staging") is None
    partly = run("restore", "b", "--name", "prod,prdo", "-o", "json")
    assert partly.code == 0, partly.err
    assert "no object in the selection is named 'prdo'" in json.loads(partly.out)["warnings"]
    nothing = run("restore", "b", "--name", "prdo")
    assert nothing.code == ExitStatus.USAGE
    assert nothing.err == "error: nothing in backup b matches --name prdo: nothing to restore\n"


def test_namespace_mapping(run, kube, crds, make, namespace):
    owner = make(cr(KC, "KubernetesCluster", "parent", status=kc_status(5)), namespace)
    make(
        cr("db.example.com/v1", "Database", "child", status={"externalID": "x"}, owners=[owner_ref(owner)]),
        namespace,
    )
    assert run("backup", "b", "-n", namespace).code == 0
    target = unique("mapped")
    result = run("restore", "b", "--namespace-mapping", f"{namespace}:{target}")
    assert result.code == 0, result.err
    try:
        moved = kube.get(crds.resolve("kc"), target, "parent")
        assert moved["status"] == kc_status(5)
        child = kube.get(crds.resolve("databases.db.example.com"), target, "child")
        assert child["metadata"]["ownerReferences"][0]["uid"] == moved["metadata"]["uid"]
        assert kube.get(crds.resolve("kc"), namespace, "parent")["metadata"]["uid"] == owner["metadata"]["uid"]
    finally:
        kube.delete(NAMESPACES, None, target)


def test_existing_policy_none_skips_and_update_writes_spec_and_status(run, kube, crds, make, namespace):
    make(
        cr(KC, "KubernetesCluster", "c", spec={"region": "eu"}, status=kc_status(1), labels={"v": "1"}),
        namespace,
    )
    assert run("backup", "b", "-n", namespace).code == 0
    rt = crds.resolve("kc")
    live = kube.get(rt, namespace, "c")
    live["spec"]["region"] = "drifted"
    live["metadata"]["labels"] = {"v": "2"}
    live = kube.replace(rt, namespace, "c", live)
    live["status"] = {"phase": "Reprovisioning"}
    kube.replace(rt, namespace, "c", live, sub="status")

    skipped = run("restore", "b", "-o", "json")
    assert skipped.code == 0, skipped.err
    entry = items(json.loads(skipped.out))[f"kubernetesclusters.xyz.example.com {namespace}/c"]
    assert (entry["result"], entry["status"]) == ("skipped", "kept"), "existed before the run: left as it is"
    assert "1 object(s) existed before the restore and were left as they are" in run("restore", "b").out
    assert kube.get(rt, namespace, "c")["spec"]["region"] == "drifted"

    updated = run("restore", "b", "--existing-resource-policy", "update", "-o", "json")
    assert updated.code == 0, updated.err
    entry = items(json.loads(updated.out))[f"kubernetesclusters.xyz.example.com {namespace}/c"]
    assert (entry["result"], entry["status"]) == ("updated", "written")
    after = kube.get(rt, namespace, "c")
    assert after["spec"]["region"] == "eu"
    assert after["metadata"]["labels"] == {"v": "1"}
    assert after["status"] == kc_status(1)
    assert after["metadata"]["uid"] == live["metadata"]["uid"]


def _snapshot(kube, crds, namespace):
    rt = crds.resolve("kc")
    return sorted(
        (o["metadata"]["name"], o["metadata"]["resourceVersion"])
        for page in kube.list_pages(rt, namespace)
        for o in page
    )


@pytest.mark.parametrize("mode", ["client", "server"])
def test_dry_runs_write_nothing(run, kube, crds, make, namespace, mode):
    make(cr(KC, "KubernetesCluster", "keep", spec={"region": "eu"}, status=kc_status(1)), namespace)
    make(cr(KC, "KubernetesCluster", "gone", status=kc_status(2)), namespace)
    assert run("backup", "b", "-n", namespace).code == 0
    kube.delete(crds.resolve("kc"), namespace, "gone")
    wait_gone(kube, crds.resolve("kc"), namespace, "gone")
    live = kube.get(crds.resolve("kc"), namespace, "keep")
    live["spec"]["region"] = "drifted"
    kube.replace(crds.resolve("kc"), namespace, "keep", live)
    before = _snapshot(kube, crds, namespace)

    result = run("restore", "b", "--dry-run", mode, "--existing-resource-policy", "update", "-o", "json")
    assert result.code == 0, result.err
    assert _snapshot(kube, crds, namespace) == before
    report = items(json.loads(result.out))
    assert report[f"kubernetesclusters.xyz.example.com {namespace}/gone"]["result"] == "would-create"
    assert report[f"kubernetesclusters.xyz.example.com {namespace}/keep"]["result"] == "would-update"
    assert report[f"kubernetesclusters.xyz.example.com {namespace}/gone"]["status"] == "would-write"


def test_dry_run_client_prints_the_plan(run, kube, make, namespace, core_api):
    make(cr(KC, "KubernetesCluster", "p", status=kc_status(1)), namespace)
    make(cr(KC, "KubernetesCluster", "q", status=kc_status(2)), namespace)
    make(cr("legacy.example.com/v1", "LegacyApp", "l", status={"x": 1}), namespace)
    assert run("backup", "b", "-n", namespace, "--no-include-crds").code == 0
    result = run("restore", "b", "--dry-run", "client")
    assert result.code == 0, result.err
    assert result.out.splitlines()[:4] == [
        "Plan for restoring b (dry run, nothing changed):",
        f"  skipped       kubernetesclusters.xyz.example.com {namespace}/p  status: kept",
        f"  skipped       kubernetesclusters.xyz.example.com {namespace}/q  status: kept",
        f"  skipped       legacyapps.legacy.example.com {namespace}/l  status: kept",
    ]
    delete_namespace(kube, namespace)
    result = run("restore", "b", "--dry-run", "client")
    expected = [
        "Plan for restoring b (dry run, nothing changed):",
        f"  would-create  namespaces {namespace}  status: not-needed",
        f"  would-create  kubernetesclusters.xyz.example.com {namespace}/p  status: would-write",
        f"  would-create  kubernetesclusters.xyz.example.com {namespace}/q  status: would-write",
        f"  would-create  legacyapps.legacy.example.com {namespace}/l  status: in-body",
    ]
    if not core_api:  # a server without Namespaces takes objects in any namespace: none to create
        del expected[1]
    assert result.out.splitlines()[: len(expected)] == expected
    assert not core_api or kube.get(NAMESPACES, None, namespace) is None


@pytest.mark.core_api("restores a Service")
def test_service_load_balancer_status_restored_when_included(run, kube, crds, namespace, kube_version):
    services = crds.resolve("services")
    svc = kube.create(
        services,
        namespace,
        {
            "apiVersion": "v1",
            "kind": "Service",
            "metadata": {"name": "lb"},
            "spec": {
                "type": "LoadBalancer",
                "ports": [{"port": 80, "targetPort": 8080}],
                "selector": {"app": "x"},
            },
        },
    )
    svc["status"] = {"loadBalancer": {"ingress": [{"ip": "203.0.113.10"}]}}
    kube.replace(services, namespace, "lb", svc, sub="status")
    assert run("backup", "b", "-n", namespace, "--include-resources", "services").code == 0
    delete_namespace(kube, namespace)

    assert run("restore", "b").code == 0
    assert kube.get(services, namespace, "lb") is None, "a built-in type comes only when named"
    assert run("restore", "b", "--include-resources", "services").code == 0
    assert kube.get(services, namespace, "lb")["status"] == {"loadBalancer": {}}, "built-ins' status is opt-in"
    kube.delete(services, namespace, "lb")
    wait_gone(kube, services, namespace, "lb")
    result = run("restore", "b", "--include-resources", "services", "--status-include-resources", "*", "--strict")
    assert result.code == 0, result.out  # a built-in's defaults and its new cluster IP are not changes
    ingress = {"ip": "203.0.113.10"} | ({} if kube_version == "1.20" else {"ipMode": "VIP"})  # defaulted from 1.30
    assert kube.get(services, namespace, "lb")["status"] == {"loadBalancer": {"ingress": [ingress]}}


def test_tampered_backup_is_refused_before_any_write(run, kube, crds, make, namespace):
    make(cr(KC, "KubernetesCluster", "t", status=kc_status(1)), namespace)
    assert run("backup", "b", "-n", namespace).code == 0
    delete_namespace(kube, namespace)
    archive = run.storage / "backups" / "b" / "archive.tar.gz"
    data = bytearray(archive.read_bytes())
    data[-30] ^= 0xFF
    archive.write_bytes(bytes(data))
    result = run("restore", "b")
    assert result.code == ExitStatus.ERROR
    assert result.err.strip() == "error: backup 'b' was modified: the archive checksum differs from its manifest"
    assert kube.get(NAMESPACES, None, namespace) is None, "nothing was created"


@pytest.mark.parametrize(
    ("saved", "outcome", "message"),
    [
        ({"size": "big"}, "failed", "status write failed"),  # rejected by the new schema
        (
            {"size": 1, "note": "x"},
            "mismatch",
            "the server did not keep the saved status as sent (status.note pruned)",
        ),  # pruned
    ],
)
def test_failed_or_changed_status_write_is_a_partial_failure(run, kube, namespace, saved, outcome, message):
    """A status the server rejects or alters ends the run with exit 3, naming the object."""
    group = f"{unique('g')}.example.com"
    loose = {"type": "object", "x-kubernetes-preserve-unknown-fields": True}
    strict = {
        "type": "object",
        "properties": {
            "spec": {"type": "object", "x-kubernetes-preserve-unknown-fields": True},
            "status": {"type": "object", "properties": {"size": {"type": "integer"}}},
        },
    }
    ns = namespace
    d = install_crds(kube, [crd(group, "Thing", schema=loose)])
    rt = d.resolve(f"things.{group}")
    obj = kube.create(rt, ns, cr(f"{group}/v1", "Thing", "t1"))
    obj["status"] = saved
    kube.replace(rt, ns, "t1", obj, sub="status")
    assert run("backup", "b", "-n", ns, "--include-resources", f"things.{group}", "--no-include-crds").code == 0
    delete_namespace(kube, ns)
    probe = cr(f"{group}/v1", "Thing", "schema-probe")
    replace_schema_and_wait(kube, rt, strict, probe, {"size": 1, "note": "x"})

    result = run("restore", "b", "-o", "json")
    assert result.code == ExitStatus.PARTIAL_FAILURE, result.out
    entry = items(json.loads(result.out))[f"things.{group} {ns}/t1"]
    assert (entry["result"], entry["status"]) == ("created", outcome)
    assert message in entry["message"]
    last = result.err.strip().splitlines()[-1]
    assert (
        last.startswith("error: restore of b: 1 object(s) failed (")
        and "; 1 object(s) lack their saved status (" in last
    )
    assert last.endswith("): run the same command again to retry only those"), last


@pytest.mark.core_api("the restore creates a Namespace")
def test_server_dry_run_into_a_namespace_the_restore_would_create(run, kube, crds, make, namespace):
    make(cr(KC, "KubernetesCluster", "k", status=kc_status(1)), namespace)
    assert run("backup", "b", "-n", namespace).code == 0
    delete_namespace(kube, namespace)
    result = run("restore", "b", "--dry-run", "server", "-o", "json")
    assert result.code == 0, result.out
    entry = items(json.loads(result.out))[f"kubernetesclusters.xyz.example.com {namespace}/k"]
    assert (entry["result"], entry["status"]) == ("would-create", "would-write")
    assert entry["notes"] == ["not sent: depends on a namespace or CRD this restore creates"]
    assert kube.get(NAMESPACES, None, namespace) is None


def _half_restored(run, kube, grant, make, namespace, cluster):
    """Back up two KubernetesClusters and a Database, then restore as a user who cannot write KC status."""
    for n in (1, 2):
        make(cr(KC, "KubernetesCluster", f"k{n}", spec={"region": "eu"}, status=kc_status(n)), namespace)
    make(cr("db.example.com/v1", "Database", "orders", spec={"engine": "pg"}, status={"externalID": "db-1"}), namespace)
    assert run("backup", "b", "-n", namespace, "--no-include-crds").code == 0
    delete_namespace(kube, namespace)
    ensure_namespace(kube, namespace)
    user, verbs = "sv-user-3", ["get", "list", "create"]
    grant(
        namespace,
        user,
        [
            {"apiGroups": ["xyz.example.com"], "resources": ["kubernetesclusters"], "verbs": verbs},
            {"apiGroups": ["db.example.com"], "resources": ["databases"], "verbs": verbs},
            {"apiGroups": ["db.example.com"], "resources": ["databases/status"], "verbs": ["update"]},
        ],
    )
    first = run("restore", "b", "-o", "json", kubeconfig=cluster.kubeconfig_for(user))
    assert first.code == ExitStatus.PARTIAL_FAILURE, first.err
    assert "run the same command again to retry only those" in first.err
    assert {(i["name"], i["status"]) for i in json.loads(first.out)["items"]} == {
        ("k1", "failed"),
        ("k2", "failed"),
        ("orders", "written"),
    }
    journals = list((run.state / "restores").glob("*.journal.sqlite"))
    assert len(journals) == 1, "the journal is kept"
    assert len(list((run.state / "restores").glob("*.plan.sqlite"))) == 1, "and the plan beside it"
    return journals[0]


@pytest.mark.core_api("an RBAC Role stops the first run halfway")
def test_an_unfinished_restore_resumes_where_it_stopped(run, kube, crds, grant, make, namespace, cluster):
    """Run 1 cannot write KubernetesCluster status (403); run 2, the same command, finishes only what is left."""
    kc, db = crds.resolve("kc"), crds.resolve("databases.db.example.com")
    _half_restored(run, kube, grant, make, namespace, cluster)
    orders_rv = kube.get(db, namespace, "orders")["metadata"]["resourceVersion"]

    second = run("restore", "b", "-o", "json")
    assert second.code == 0, second.err
    report = json.loads(second.out)
    assert report["resumed"] == 1
    assert {(i["name"], i["result"], i["status"]) for i in report["items"]} == {
        ("k1", "created", "written"),  # created by run 1: recognised as its own, not skipped as existing
        ("k2", "created", "written"),
    }
    assert kube.get(kc, namespace, "k2")["status"] == kc_status(2)
    assert kube.get(db, namespace, "orders")["metadata"]["resourceVersion"] == orders_rv, "done work is left alone"
    assert not list((run.state / "restores").iterdir()), "a finished restore removes its plan and journal"

    third = run("restore", "b", "-o", "json")
    assert third.code == 0, third.err
    assert {i["result"] for i in json.loads(third.out)["items"]} == {"skipped"}, "a new run plans afresh"


@pytest.mark.core_api("an RBAC Role stops the first run halfway")
def test_a_damaged_journal_is_refused_and_restart_discards_it(run, kube, grant, make, namespace, cluster):
    journal = _half_restored(run, kube, grant, make, namespace, cluster)
    journal.write_bytes(b"not a database")
    refused = run("restore", "b")
    assert refused.code == ExitStatus.ERROR
    assert "is unreadable" in refused.err and "--restart" in refused.err
    result = run("restore", "b", "--restart", "-o", "json")
    assert result.code == 0, result.err
    report = json.loads(result.out)
    assert report["resumed"] == 0
    assert {(i["name"], i["result"], i["status"]) for i in report["items"]} == {
        ("k1", "created", "written"),  # planned afresh: the earlier run's, without their status: finished
        ("k2", "created", "written"),
        ("orders", "skipped", "kept"),  # it has its status: policy none leaves it
    }
    assert kube.get(discover(kube).resolve("kubernetesclusters.xyz.example.com"), namespace, "k1")["status"] == (
        kc_status(1)
    )


def _deployment(kube, namespace, name, replicas):

    rt = discover(kube).resolve("deployments.apps")
    labels = {"app": name}
    body = {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": name},
        "spec": {
            "replicas": replicas,
            "selector": {"matchLabels": labels},
            "template": {"metadata": {"labels": labels}, "spec": {"containers": [{"name": "c", "image": "op:1"}]}},
        },
    }
    return rt, kube.create(rt, namespace, body)


@pytest.mark.core_api("scales a Deployment")
def test_scale_down_stops_the_operator_for_the_restore_and_brings_it_back(run, kube, crds, make, namespace):
    ops = unique("ops")
    ensure_namespace(kube, ops)
    rt, _ = _deployment(kube, ops, "kc-operator", 2)
    make(cr(KC, "KubernetesCluster", "prod", status=kc_status(1)), namespace)
    assert run("backup", "b", "-n", namespace).code == 0
    delete_namespace(kube, namespace)

    result = run("restore", "b", "--scale-down", f"{ops}/deployment/kc-operator")
    assert result.code == 0, result.err
    assert kube.get(crds.resolve("kc"), namespace, "prod")["status"] == kc_status(1)
    live = kube.get(rt, ops, "kc-operator")
    assert live["spec"]["replicas"] == 2, "scaled back"
    # only its /scale is written, to 0 and back: the count to go back to is the restore's to keep, not the workload's
    assert live["metadata"]["generation"] == 3
    assert "statusvault.io/replicas-before-restore" not in (live["metadata"].get("annotations") or {})


@pytest.mark.core_api("scales a Deployment")
def test_scale_down_after_a_crashed_run_restores_the_remembered_replicas(run, kube, crds, make, namespace):
    """A run that died with the operator at 0 left the count in an annotation; the next run scales back to it."""
    ops = unique("ops")
    ensure_namespace(kube, ops)
    rt, _ = _deployment(kube, ops, "db-operator", 0)
    remembered = {"metadata": {"annotations": {"statusvault.io/replicas-before-restore": "3"}}}
    kube.patch(rt, ops, "db-operator", remembered, MERGE_PATCH)  # no resourceVersion: the controller writes too
    make(cr(KC, "KubernetesCluster", "prod", status=kc_status(1)), namespace)
    assert run("backup", "b", "-n", namespace).code == 0
    delete_namespace(kube, namespace)
    assert run("restore", "b", "--scale-down", f"{ops}/deployments/db-operator").code == 0
    assert kube.get(rt, ops, "db-operator")["spec"]["replicas"] == 3


@pytest.mark.core_api("scales a Deployment")
def test_scale_down_of_an_unknown_workload_changes_nothing(run, kube, crds, make, namespace):
    make(cr(KC, "KubernetesCluster", "prod", status=kc_status(1)), namespace)
    assert run("backup", "b", "-n", namespace).code == 0
    delete_namespace(kube, namespace)
    bad = run("restore", "b", "--scale-down", "nowhere/deployment")
    assert bad.code == ExitStatus.USAGE and "expected NAMESPACE/KIND/NAME" in bad.err
    missing = run("restore", "b", "--scale-down", f"{namespace}-ops/deployment/ghost")
    assert missing.code == ExitStatus.USAGE and "does not exist" in missing.err
    assert kube.get(crds.resolve("kc"), namespace, "prod") is None, "nothing was restored"


def test_dry_run_client_shows_how_existing_objects_differ_from_the_backup(run, kube, crds, make, namespace):
    prod = cr(KC, "KubernetesCluster", "prod", spec={"region": "eu"}, status=kc_status(1), labels={"a": "b"})
    make(prod, namespace)
    assert run("backup", "b", "-n", namespace, "--no-include-crds").code == 0
    kc = crds.resolve("kc")
    live = kube.get(kc, namespace, "prod")
    live["spec"]["region"] = "us"
    live["metadata"]["labels"]["drift"] = "yes"
    live = kube.replace(kc, namespace, "prod", live)
    live["status"]["masterVersion"] = "9.9.9"
    kube.replace(kc, namespace, "prod", live, sub="status")

    result = run("restore", "b", "--dry-run", "client", "--existing-resource-policy", "update")
    assert result.code == 0, result.err
    lines = result.out.splitlines()
    at = lines.index(f"  would-update  kubernetesclusters.xyz.example.com {namespace}/prod  status: would-write")
    assert lines[at + 1 : at + 4] == [
        '      - /metadata/labels/drift: "yes"',
        '      ~ /spec/region: "us" -> "eu"',
        f'      ~ /status/masterVersion: "9.9.9" -> "{kc_status(1)["masterVersion"]}"',
    ]
    as_json = run("restore", "b", "--dry-run", "client", "-o", "json")
    entry = items(json.loads(as_json.out))[f"kubernetesclusters.xyz.example.com {namespace}/prod"]
    assert entry["result"] == "skipped" and {"path": "/spec/region", "live": "us", "backup": "eu"} in entry["diff"]
    assert kube.get(kc, namespace, "prod")["spec"]["region"] == "us", "a dry run changes nothing"


def test_a_cancelled_restore_starts_no_object_and_says_why(run, kube, crds, make, namespace, fresh_discovery):
    """The controller cancels a restore when its Lease is lost: nothing more is written, the report says so."""
    import threading

    from statusvault.restore.runner import RestoreRequest, run_restore
    from statusvault.storage import LocalStore

    make(cr(KC, "KubernetesCluster", "prod", status=kc_status(1)), namespace)
    assert run("backup", "b", "-n", namespace).code == 0
    delete_namespace(kube, namespace)
    cancel = threading.Event()
    cancel.set()
    request = RestoreRequest(store=LocalStore(run.storage), backup="b", cancel=cancel)
    report = run_restore(kube, lambda refresh: fresh_discovery(), request)
    try:
        assert report.aborted.startswith("cancelled: this process no longer holds the right to restore")
        assert "created" not in report.counts()["results"], "only the existing CRDs were reported (skipped)"
    finally:
        report.close()
    assert kube.get(crds.resolve("kc"), namespace, "prod") is None


# --- options that compose: cluster scope, resource names, values compared by value ---


def gadgets_and_pools(kube, namespace: str) -> tuple[str, object, object]:
    """A namespaced Gadget and a cluster-scoped Pool of a new group, each with a status."""
    group = f"{unique('cmp')}.example.com"
    kind = unique_kind("Gadget")
    d = install_crds(kube, [crd(group, kind), crd(group, "Pool", scope="Cluster")])
    gadgets, pools = d.resolve(f"{kind.lower()}s.{group}"), d.resolve(f"pools.{group}")
    for rt, ns, name in ((gadgets, namespace, "g"), (pools, None, f"p-{namespace}")):
        obj = kube.create(rt, ns, cr(f"{group}/v1", rt.kind, name, spec={"size": 1}))
        obj["status"] = {"id": name}
        kube.replace(rt, ns, name, obj, sub="status")
    return group, gadgets, pools


def test_no_include_cluster_resources_leaves_cluster_scoped_objects_without_a_namespace(run, kube, namespace):
    group, gadgets, pools = gadgets_and_pools(kube, namespace)
    assert run("backup", "b", "--include-resources", f"{gadgets.qualified},{pools.qualified}").code == 0
    pool = kube.get(pools, None, f"p-{namespace}")
    pool["spec"] = {"size": 9}
    kube.replace(pools, None, f"p-{namespace}", pool)
    kube.delete(gadgets, namespace, "g")

    result = run("restore", "b", "--no-include-cluster-resources", "--existing-resource-policy", "update", "-o", "json")

    assert result.code == ExitStatus.SUCCESS, result.out + result.err
    assert kube.get(pools, None, f"p-{namespace}")["spec"] == {"size": 9}, "the live cluster-scoped object is untouched"
    assert not [i for i in json.loads(result.out)["items"] if i["resource"] == pools.qualified]
    assert kube.get(gadgets, namespace, "g")["status"] == {"id": "g"}


def test_every_option_that_takes_resources_reads_a_kind_and_refuses_a_typo_before_any_write(run, kube, namespace):
    group, gadgets, _ = gadgets_and_pools(kube, namespace)
    assert run("backup", "b", "-n", namespace, "--include-resources", gadgets.kind).code == 0
    kube.delete(gadgets, namespace, "g")
    marker = ["--pause-annotation", "example.com/hold=true", "--pause-resources", gadgets.kind]

    typo = run("restore", "b", *marker, "--keep-paused", "Gadgte")
    assert typo.code == ExitStatus.USAGE and "--keep-paused Gadgte: no resource of that name" in typo.err, typo.err
    assert len(typo.err.strip().splitlines()) == 1
    assert kube.get(gadgets, namespace, "g") is None, "nothing written"

    result = run("restore", "b", *marker, "--keep-paused", gadgets.kind.lower(), "-o", "json")
    assert result.code == ExitStatus.SUCCESS, result.out + result.err
    obj = kube.get(gadgets, namespace, "g")
    assert obj["status"] == {"id": "g"} and obj["metadata"]["annotations"]["example.com/hold"] == "true"
    assert json.loads(result.out)["leftPaused"] == 1


def test_an_observed_generation_held_as_a_string_is_compared_by_value(run, kube, namespace):
    """Argo Rollouts keeps status.observedGeneration as a string: "1" is generation 1, not a stale status."""
    group = f"{unique('og')}.example.com"
    rollouts = install_crds(kube, [crd(group, "Rollout")]).resolve(f"rollouts.{group}")
    for name, observed in (("same", "1"), ("older", "4"), ("int", 1)):
        obj = kube.create(rollouts, namespace, cr(f"{group}/v1", "Rollout", name, spec={"replicas": 1}))
        obj["status"] = {"observedGeneration": observed}
        kube.replace(rollouts, namespace, name, obj, sub="status")
    assert run("backup", "b", "-n", namespace, "--include-resources", f"rollouts.{group}").code == 0
    delete_namespace(kube, namespace)

    result = run("restore", "b", "-o", "json")

    assert result.code == ExitStatus.SUCCESS, result.out + result.err
    noted = {
        i["name"] for i in json.loads(result.out)["items"] if any("observedGeneration" in n for n in i.get("notes", ()))
    }
    assert noted == {"older"}
    assert kube.get(rollouts, namespace, "same")["status"] == {"observedGeneration": "1"}


@pytest.mark.core_api("the restore creates the namespace it maps into")
def test_objects_whose_crd_was_missing_are_restored_by_the_same_command_once_it_is_installed(run, kube, namespace):
    """The user guide: fix the cause, run the same command again. The first run planned the objects unavailable,
    and no namespace for them, so the second one, with the CRD installed, met 'namespace not found' forever."""
    group = f"{unique('late')}.example.com"
    kind = unique_kind("Late")
    definition = crd(group, kind)
    gadgets = install_crds(kube, [definition]).resolve(f"{kind.lower()}s.{group}")
    obj = kube.create(gadgets, namespace, cr(f"{group}/v1", kind, "g", spec={"size": 1}))
    kube.replace(gadgets, namespace, "g", {**obj, "status": {"id": "g"}}, sub="status")
    assert run("backup", "b", "-n", namespace, "--include-resources", gadgets.qualified).code == 0
    kube.delete(CRDS, None, gadgets.qualified)
    wait_gone(kube, CRDS, None, gadgets.qualified)
    moved = unique("moved")
    args = ("restore", "b", "--namespace-mapping", f"{namespace}:{moved}", "--exclude-resources", CRDS.qualified)

    first = run(*args)
    assert first.code == ExitStatus.PARTIAL_FAILURE, first.out + first.err
    install_crds(kube, [definition])
    again = run(*args)

    assert again.code == ExitStatus.SUCCESS, again.out + again.err
    assert kube.get(gadgets, moved, "g")["status"] == {"id": "g"}
    delete_namespace(kube, moved)
