"""A built-in type named in --status-include-resources comes back with its status, as the user guide says: the
seed's worked example (a LoadBalancer Service's `status.loadBalancer.ingress`, restored beside a custom resource).
A rule that keeps it out is a refusal naming the rule, exit 2, never "0 objects", exit 0."""

from __future__ import annotations

import json

import pytest

from statusvault.errors import ExitStatus
from statusvault.kube.discovery import discover
from statusvault.transforms import contains
from tests.builders import cr, kc_status

pytestmark = pytest.mark.version_sensitive("a Service's status is defaulted differently by version (ipMode)")
INGRESS = {"loadBalancer": {"ingress": [{"ip": "203.0.113.10", "hostname": "lb.example.com"}]}}


def service(name: str) -> dict:
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {"name": name},
        "spec": {"type": "LoadBalancer", "ports": [{"port": 443, "targetPort": 8443}], "selector": {"app": name}},
    }


def test_the_seeds_example_restores_a_services_load_balancer_status(run, kube, crds, make, namespace):
    svc = discover(kube).by_qualified("services")
    made = kube.create(svc, namespace, service("argocd-server"))
    kube.replace(svc, namespace, "argocd-server", {**made, "status": INGRESS}, sub="status")
    make(cr("xyz.example.com/v1", "KubernetesCluster", "k-0", status=kc_status(0)), namespace)
    kc = crds.resolve("kc")
    taken = run("backup", "argocd", "-n", namespace, "--include-resources", f"services,{kc.qualified}")
    assert taken.code == 0, taken.err
    kube.delete(svc, namespace, "argocd-server")
    kube.delete(kc, namespace, "k-0")

    kept_out = run("restore", "argocd", "--status-include-resources", "Service",
                   "--include-resources", kc.qualified)  # fmt: skip
    assert kept_out.code == ExitStatus.USAGE, kept_out.out + kept_out.err
    assert "--status-include-resources names services, which --include-resources leaves out" in kept_out.err
    assert kube.get(svc, namespace, "argocd-server") is None and kube.get(kc, namespace, "k-0") is None

    restored = run("restore", "argocd", "--status-include-resources", f"Service,{kc.qualified}")
    assert restored.code == 0, restored.out + restored.err
    live = kube.get(svc, namespace, "argocd-server")["status"]
    assert contains(live, INGRESS), f"the Service with its status (the server may add defaults: ipMode): {live}"
    assert kube.get(kc, namespace, "k-0")["status"] == kc_status(0), "and the custom resource beside it"


def test_an_update_of_an_existing_service_keeps_what_the_server_assigned_it(run, kube, namespace):
    """`--existing-resource-policy update` over a live Service the backup holds: its selector (what the backup says)
    is put back; its cluster IP and node port (what the server chose) stay. Once a 422, on every run."""
    svc = discover(kube).by_qualified("services")
    body = service("web")
    body["spec"] = {**body["spec"], "type": "NodePort"}
    made = kube.create(svc, namespace, body)
    assert run("backup", "svc", "-n", namespace, "--include-resources", "services").code == 0
    drifted = {**made, "spec": {**made["spec"], "selector": {"app": "drifted"}}}
    live = kube.replace(svc, namespace, "web", drifted)

    updated = run("restore", "svc", "--include-resources", "services", "--existing-resource-policy", "update")
    assert updated.code == 0, updated.out + updated.err
    after = kube.get(svc, namespace, "web")["spec"]
    assert after["selector"] == {"app": "web"}, "the backup's content is back"
    assert (
        after["clusterIP"] == live["spec"]["clusterIP"]
        and after["ports"][0]["nodePort"] == (live["spec"]["ports"][0]["nodePort"])
    ), "what the server assigned is kept"


def test_the_seeds_commands_as_typed_back_up_the_namespace_and_restore_the_service_with_its_status(
    run, kube, crds, make, namespace
):
    """`statusvault backup argocd --namespace argocd`, the Service deleted, `restore --status-include-resources
    Service`: the namespace backup takes the namespace's objects as Velero does (not what only makes sense live:
    Events, a controller's ReplicaSets; not Secrets in clear, said with the flag that takes them) and only the CRDs of
    the custom resources it took."""
    served = discover(kube)
    svc = served.by_qualified("services")
    made = kube.create(svc, namespace, service("argocd-server"))
    kube.replace(svc, namespace, "argocd-server", {**made, "status": INGRESS}, sub="status")
    make(cr("xyz.example.com/v1", "KubernetesCluster", "k-0", status=kc_status(0)), namespace)
    kube.create(served.by_qualified("configmaps"), namespace, {"metadata": {"name": "argocd-cm"}, "data": {"a": "b"}})
    kube.create(served.by_qualified("secrets"), namespace, {"metadata": {"name": "argocd-secret"}, "data": {}})
    about = {"kind": "Service", "name": "argocd-server", "namespace": namespace}
    event = {"metadata": {"name": "e1"}, "involvedObject": about, "reason": "Test", "message": "m"}
    kube.create(served.by_qualified("events"), namespace, event)
    owner = {"apiVersion": "v1", "kind": "Service", "name": "argocd-server", "uid": made["metadata"]["uid"],
             "controller": True}  # fmt: skip
    pod = {"metadata": {"labels": {"app": "x"}}, "spec": {"containers": [{"name": "c", "image": "i"}]}}
    spec = {"replicas": 0, "selector": {"matchLabels": {"app": "x"}}, "template": pod}
    kube.create(served.by_qualified("replicasets.apps"), namespace,
                {"metadata": {"name": "owned", "ownerReferences": [owner]}, "spec": spec})  # fmt: skip

    taken = run("backup", "argocd", "--namespace", namespace, "-o", "json")
    assert taken.code == 0, taken.err
    resources = json.loads(taken.out)["resources"]
    counts = {name: r["count"] for name, r in resources.items() if r["count"]}
    assert counts["services"] == 1 and counts["configmaps"] == 1 and counts["kubernetesclusters.xyz.example.com"] == 1
    assert "events" not in counts and "replicasets.apps" not in counts and "secrets" not in counts, counts
    assert counts["customresourcedefinitions.apiextensions.k8s.io"] == 1, "only the CRD of what it took"
    assert "left out the namespace's Secrets" in taken.err and "--allow-plaintext-secrets" in taken.err
    kube.delete(svc, namespace, "argocd-server")

    restored = run("restore", "argocd", "--status-include-resources", "Service")
    assert restored.code == 0, restored.out + restored.err
    live = kube.get(svc, namespace, "argocd-server")
    assert live is not None and contains(live["status"], INGRESS), "the Service is back with its load balancer"
