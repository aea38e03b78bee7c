"""--order crossplane's two-phase restore of managed resources: each is created in Observe mode (a provider only
reads the external resource then), given its saved status, then given its saved managementPolicies back."""

from __future__ import annotations

import json
import threading
from importlib import resources

import pytest

from statusvault.errors import ExitStatus, KubeApiError
from statusvault.kube.discovery import discover
from statusvault.kube.watch import collection_version
from statusvault.restore.core.pausemarkers import RECORD
from statusvault.testing.fixtures import create_with_status, install_crds
from statusvault.vocabulary.kinds import NAMESPACES
from tests.builders import cr, crd
from tests.integration.crs.servers import wait_gone

pytestmark = pytest.mark.version_neutral("managementPolicies are fields of the CRD, the same on every version")

GROUP = "s3.aws.upbound.io"  # a provider's group: the crossplane profile's managed-resources group
N = 6
POLICIES = {0: None, 1: ["*"], 2: ["Observe", "Update", "Delete"]}  # by i % 3; None: the field absent


@pytest.fixture(scope="module")
def buckets(kube):
    return install_crds(kube, [crd(GROUP, "Bucket")]).by_qualified(f"buckets.{GROUP}")


def saved(i: int) -> dict:
    return {"atProvider": {"id": f"bucket-{i}", "arn": f"arn:aws:s3:::bucket-{i}"}, "conditions": [
        {"type": "Ready", "status": "True"}, {"type": "Synced", "status": "True"}]}  # fmt: skip


class Provider:
    """Sees every Bucket as a provider's informer does, every version through a WATCH (so a Bucket restored and
    switched back between two LISTs is still seen as it was created): one not in Observe mode without
    status.atProvider.id makes it create an external record (and write its id); the policies each Bucket had when
    first seen are kept."""

    def __init__(self, kube, rt, namespace: str):
        self.kube, self.rt, self.namespace = kube, rt, namespace
        self.created: list[str] = []
        self.first_seen: dict[str, object] = {}
        self.stopped = threading.Event()
        rv = collection_version(kube, rt, namespace, "")  # from before the restore: no version is missed
        self.thread = threading.Thread(target=self._loop, args=(rv,), daemon=True)
        self.thread.start()

    def _loop(self, rv: str) -> None:
        while not self.stopped.is_set():
            try:
                for ev in self.kube.watch(self.rt, self.namespace, "", rv, timeout=1):
                    rv = ev.resource_version or rv
                    if ev.type in ("ADDED", "MODIFIED"):
                        self._reconcile(ev.object)
            except KubeApiError:
                continue

    def _reconcile(self, obj: dict) -> None:
        name, policies = obj["metadata"]["name"], (obj.get("spec") or {}).get("managementPolicies")
        self.first_seen.setdefault(name, policies)
        if policies == ["Observe"] or ((obj.get("status") or {}).get("atProvider") or {}).get("id"):
            return
        self.created.append(name)
        obj["status"] = {**(obj.get("status") or {}), "atProvider": {"id": f"new-{name}"}}
        self.kube.replace(self.rt, self.namespace, name, obj, sub="status", manager="test-provider")

    def stop(self) -> None:
        self.stopped.set()
        self.thread.join()


def test_managed_resources_are_observed_first_and_get_their_policies_back(run, kube, buckets, namespace):
    d = discover(kube)
    for i in range(N):
        spec = {"forProvider": {"region": "eu-west-1"}}
        if POLICIES[i % 3] is not None:
            spec["managementPolicies"] = POLICIES[i % 3]
        create_with_status(kube, d, cr(f"{GROUP}/v1", "Bucket", f"b-{i}", spec=spec, status=saved(i)), namespace)
    assert run("backup", "b", "-n", namespace).code == 0
    kube.delete(NAMESPACES, None, namespace)
    wait_gone(kube, NAMESPACES, None, namespace)
    provider = Provider(kube, buckets, namespace)
    try:
        result = run("restore", "b", "--order", "crossplane", "-o", "json")
    finally:
        provider.stop()

    assert result.code == ExitStatus.SUCCESS, result.err
    assert provider.created == [], "no external record was created"
    assert set(provider.first_seen) == {f"b-{i}" for i in range(N)}
    assert all(p == ["Observe"] for p in provider.first_seen.values()), provider.first_seen
    report = json.loads(result.out)
    assert (report["unpaused"], report["leftPaused"]) == (N, 0)
    for i in range(N):
        obj = kube.get(buckets, namespace, f"b-{i}")
        assert obj["status"] == saved(i)
        assert obj["spec"].get("managementPolicies") == POLICIES[i % 3]
        assert RECORD not in (obj["metadata"].get("annotations") or {})


@pytest.mark.version_sensitive("each of these fixes is shown on both servers")
def test_a_copied_profile_and_a_provider_config_usage_restore_as_they_are(run, kube, buckets, namespace, tmp_path):
    """The profile copied verbatim into a file, as its header suggests, over a backup that lacks most of what it
    names; a ProviderConfigUsage of the same API group (no spec: its fields are top-level, as Crossplane's) is no
    managed resource, so it is restored as it is, not in Observe mode."""
    usage_schema = {
        "type": "object",
        "properties": {
            "providerConfigRef": {"type": "object", "x-kubernetes-preserve-unknown-fields": True},
            "resourceRef": {"type": "object", "x-kubernetes-preserve-unknown-fields": True},
        },
    }
    crossplane = [  # Crossplane runs in the cluster: the profile names its package and composition types
        crd("pkg.crossplane.io", kind) for kind in ("DeploymentRuntimeConfig", "Provider", "Function", "Configuration")
    ] + [
        crd("apiextensions.crossplane.io", kind)
        for kind in ("CompositeResourceDefinition", "Composition", "EnvironmentConfig")
    ]
    usages = install_crds(kube, [*crossplane, crd(GROUP, "ProviderConfigUsage", status=False, schema=usage_schema)])
    usage_rt = usages.by_qualified(f"providerconfigusages.{GROUP}")
    d = discover(kube)
    spec = {"forProvider": {"region": "eu-west-1"}}
    create_with_status(kube, d, cr(f"{GROUP}/v1", "Bucket", "b-0", spec=spec, status=saved(0)), namespace)
    usage = cr(f"{GROUP}/v1", "ProviderConfigUsage", "u-0")
    usage |= {"providerConfigRef": {"name": "default"}, "resourceRef": {"kind": "Bucket", "name": "b-0"}}
    kube.create(usage_rt, namespace, usage)
    assert run("backup", "b", "-n", namespace).code == 0
    kube.delete(NAMESPACES, None, namespace)
    wait_gone(kube, NAMESPACES, None, namespace)
    copied = tmp_path / "my-order.yaml"
    copied.write_text(
        resources.files("statusvault.restore.ordering").joinpath("profiles", "crossplane.yaml").read_text()
    )

    result = run("restore", "b", "--order", str(copied), "-o", "json")

    assert result.code == ExitStatus.SUCCESS, result.err
    restored = kube.get(usage_rt, namespace, "u-0")
    assert (restored["providerConfigRef"], restored["resourceRef"]) == (
        usage["providerConfigRef"],
        usage["resourceRef"],
    )
    assert "spec" not in restored and RECORD not in (restored["metadata"].get("annotations") or {})
    assert kube.get(buckets, namespace, "b-0")["status"] == saved(0)
