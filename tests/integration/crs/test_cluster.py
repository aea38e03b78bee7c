"""The real API server's status semantics that statusvault is built on, and `cluster-info`."""

from __future__ import annotations

import json

import pytest

from statusvault.kube.discovery import Discovery

pytestmark = pytest.mark.version_sensitive(
    "status semantics (dropped on create, /status writes, generation) must hold on every server"
)


def test_create_drops_status_and_status_write_sets_it(kube, crds: Discovery, namespace):
    rt = crds.resolve("kubernetesclusters.xyz.example.com")
    body = {
        "apiVersion": "xyz.example.com/v1",
        "kind": "KubernetesCluster",
        "metadata": {"name": "c1", "namespace": namespace},
        "spec": {"region": "eu"},
        "status": {"apiServerURL": "https://c1:6443", "masterVersion": "1.29.4"},
    }
    created = kube.create(rt, namespace, body)
    assert "status" not in created
    assert created["metadata"]["generation"] == 1

    created["status"] = body["status"]
    written = kube.replace(rt, namespace, "c1", created, sub="status")
    assert written["status"] == body["status"]
    assert written["metadata"]["generation"] == 1
    assert kube.get(rt, namespace, "c1")["status"] == body["status"]


def test_without_status_subresource_status_travels_in_the_body(kube, crds: Discovery, namespace):
    rt = crds.resolve("legacyapps.legacy.example.com")
    assert not rt.has_status
    body = {
        "apiVersion": "legacy.example.com/v1",
        "kind": "LegacyApp",
        "metadata": {"name": "l1"},
        "status": {"externalRef": "x-1"},
    }
    assert kube.create(rt, namespace, body)["status"] == {"externalRef": "x-1"}


def test_cluster_info_lists_status_subresources(run, crds, git_version, core_api):
    result = run("cluster-info", "-o", "json")
    assert result.code == 0, result.err
    data = json.loads(result.out)
    assert data["version"] == git_version
    by_name = {r["name"]: r for r in data["resources"]}
    assert by_name["kubernetesclusters.xyz.example.com"]["statusSubresource"] is True
    assert by_name["kubernetesclusters.xyz.example.com"]["custom"] is True
    assert by_name["legacyapps.legacy.example.com"]["statusSubresource"] is False
    if core_api:
        assert by_name["services"]["statusSubresource"] is True
        assert by_name["services"]["custom"] is False
    else:
        assert "services" not in by_name


def test_cluster_info_text(run, crds):
    result = run("cluster-info")
    assert result.code == 0
    assert result.out.startswith("Server:  https://127.0.0.1:")
    line = next(ln for ln in result.out.splitlines() if ln.startswith("legacyapps.legacy.example.com"))
    assert line.split() == ["legacyapps.legacy.example.com", "v1", "LegacyApp", "yes", "no", "yes"]
