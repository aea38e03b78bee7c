"""Flux, the real controllers, after a disaster: does it find the inventory it cannot recompute and redo nothing?

A Kustomization's `status.inventory` is Flux's only record of what it applied: it prunes from it, and an object
missing from it is never pruned. The scenario: three Kustomizations apply 50 ConfigMaps and Services from a Bucket
(moto, over HTTP). The namespaces are backed up with the documented command; then the source drops 10 of the objects
and the control plane is lost. A fresh control plane gets the restore, Flux runs again on it, and the test counts
what Flux did: the 10 dropped objects pruned (as Flux would have had the cluster lived) or left orphaned, and the 40
kept objects recreated or rewritten.

- statusvault restores, then Flux starts (its Deployment comes back with the cluster): nothing redone, 10 pruned.
- Flux runs while statusvault restores with `--pause auto --order flux` (the race a bootstrap-first rebuild has):
  the same.
- The comparison, a restore without status (what Velero does by default): its counts are recorded, not held to
  zero. docs/operators.md has the table; `make operators-report` prints the counts.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import boto3
import pytest
import yaml

from statusvault.errors import ExitStatus
from statusvault.kube.client import KubeClient
from statusvault.kube.discovery import discover
from statusvault.kube.transport import load_transport
from statusvault.testing.cluster import LocalCluster
from statusvault.testing.fixtures import ensure_namespace
from statusvault.testing.operators import Flux, apply_docs, condition, wait_for
from tests.builders import unique

pytestmark = pytest.mark.current_only(
    "the operators' releases are built against the current Kubernetes (client-go 1.36)"
)

APPS = "apps"
KUSTOMIZATIONS = ("app-a", "app-b", "app-c")
OBJECTS = 50
DROPPED = frozenset(range(40, 50))  # the source drops these after the backup
CORE_TYPES = {"ConfigMap": "configmaps", "Service": "services"}
# The documented restore: Flux's order, and the app objects too (a restore writes built-in types only when named)
FLUX_TYPES = "buckets.source.toolkit.fluxcd.io,kustomizations.kustomize.toolkit.fluxcd.io"
RESTORE = ["--order", "flux", "--include-resources", f"configmaps,services,{FLUX_TYPES}"]


def app_object(i: int) -> dict[str, Any]:
    kind = "ConfigMap" if i % 2 == 0 else "Service"
    meta = {"name": f"{kind.lower()}-{i:02d}", "namespace": APPS}
    if kind == "ConfigMap":
        return {"apiVersion": "v1", "kind": kind, "metadata": meta, "data": {"index": str(i)}}
    spec = {"selector": {"app": f"a{i}"}, "ports": [{"port": 80 + i, "targetPort": 8080}]}
    return {"apiVersion": "v1", "kind": kind, "metadata": meta, "spec": spec}


def owner(i: int) -> str:
    return KUSTOMIZATIONS[i % len(KUSTOMIZATIONS)]


def publish(s3: Any, bucket: str, indices: set[int]) -> None:
    """The source: one directory of manifests per Kustomization (Flux generates their kustomization.yaml)."""
    for k in KUSTOMIZATIONS:
        docs = [app_object(i) for i in sorted(indices) if owner(i) == k]
        s3.put_object(Bucket=bucket, Key=f"{k}/objects.yaml", Body=yaml.safe_dump_all(docs).encode())


def flux_objects(s3_endpoint: str, bucket: str) -> list[dict[str, Any]]:
    ns = Flux.NAMESPACE
    host = s3_endpoint.removeprefix("http://")
    source = {
        "apiVersion": "source.toolkit.fluxcd.io/v1", "kind": "Bucket", "metadata": {"name": "apps", "namespace": ns},
        "spec": {"interval": "5s", "provider": "generic", "bucketName": bucket, "endpoint": host, "insecure": True,
                 "region": "us-east-1", "secretRef": {"name": "bucket-credentials"}},
    }  # fmt: skip
    kustomizations = [
        {"apiVersion": "kustomize.toolkit.fluxcd.io/v1", "kind": "Kustomization",
         "metadata": {"name": k, "namespace": ns},
         "spec": {"interval": "10m", "path": f"./{k}", "prune": True, "targetNamespace": APPS,
                  "sourceRef": {"kind": "Bucket", "name": "apps"}}}
        for k in KUSTOMIZATIONS
    ]  # fmt: skip
    return [source, *kustomizations]


def bootstrap(kube: KubeClient) -> None:
    """What a rebuild's bootstrap recreates before anything is restored: the flux-system namespace and the
    Bucket's credentials (kept in a secret manager, not in the backup)."""
    ensure_namespace(kube, Flux.NAMESPACE)
    meta = {"name": "bucket-credentials", "namespace": Flux.NAMESPACE}
    secret = {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": meta,
        "stringData": {"accesskey": "testing", "secretkey": "testing"},
    }
    apply_docs(kube, discover(kube), [secret])


def kustomizations(kube: KubeClient) -> list[dict[str, Any]]:
    rt = discover(kube).find("kustomize.toolkit.fluxcd.io", "v1", "Kustomization")
    assert rt is not None
    return [k for k in (kube.get(rt, Flux.NAMESPACE, name) for name in KUSTOMIZATIONS) if k]


def applied(kube: KubeClient) -> bool:
    """Every Kustomization Ready, having applied the Bucket's current revision."""
    d = discover(kube)
    bucket_rt = d.find("source.toolkit.fluxcd.io", "v1", "Bucket")
    assert bucket_rt is not None
    source = kube.get(bucket_rt, Flux.NAMESPACE, "apps") or {}
    revision = ((source.get("status") or {}).get("artifact") or {}).get("revision")
    if not revision or (condition(source, "Ready") or {}).get("status") != "True":
        return False
    ks = kustomizations(kube)
    return len(ks) == len(KUSTOMIZATIONS) and all(
        (condition(k, "Ready") or {}).get("status") == "True"
        and k["status"].get("lastAppliedRevision") == revision
        and k["status"].get("observedGeneration") == k["metadata"]["generation"]
        for k in ks
    )


def app_state(kube: KubeClient) -> dict[str, tuple[str, str]]:
    """Each app object present: name -> (uid, resourceVersion)."""
    d = discover(kube)
    state = {}
    for kind in CORE_TYPES:
        rt = d.find("", "v1", kind)
        assert rt is not None
        for page in kube.list_pages(rt, APPS):
            for o in page:
                if o["metadata"]["name"] != "kubernetes":
                    state[o["metadata"]["name"]] = (o["metadata"]["uid"], o["metadata"]["resourceVersion"])
    return state


def inventory_size(kube: KubeClient) -> int:
    return sum(len(((k.get("status") or {}).get("inventory") or {}).get("entries") or []) for k in kustomizations(kube))


@pytest.fixture(scope="module")
def flux_backup(tmp_path_factory, s3_endpoint, cluster) -> Iterator[dict[str, Any]]:
    """Flux at a steady state on a control plane of its own, backed up; then the source drops 10 objects and that
    control plane is gone. Yields the store, the S3 bucket and the objects the backup holds."""
    from statusvault.cli import main

    s3 = boto3.client("s3", endpoint_url=s3_endpoint, region_name="us-east-1")
    bucket = unique("flux")
    s3.create_bucket(Bucket=bucket)
    publish(s3, bucket, set(range(OBJECTS)))
    store = tmp_path_factory.mktemp("flux-store")
    with LocalCluster.start(version="1.36") as plane:
        kube = KubeClient(load_transport(str(plane.kubeconfig)))
        bootstrap(kube)
        ensure_namespace(kube, APPS)
        with Flux.start(kube) as flux:
            apply_docs(kube, discover(kube), flux_objects(s3_endpoint, bucket))
            wait_for(lambda: applied(kube) and len(app_state(kube)) == OBJECTS, 400, "Flux applied", flux.log_tail)
            assert inventory_size(kube) == OBJECTS
            code = main(["--kubeconfig", str(plane.kubeconfig), "backup", "flux", "--storage", str(store),
                         "--namespace", f"{Flux.NAMESPACE},{APPS}"])  # fmt: skip
            assert code == ExitStatus.SUCCESS
    publish(s3, bucket, set(range(OBJECTS)) - DROPPED)
    yield {"store": store, "bucket": bucket}


def names(indices: frozenset[int] | set[int]) -> set[str]:
    return {app_object(i)["metadata"]["name"] for i in indices}


def disaster_restore(flux_backup: dict[str, Any], options: list[str], flux_first: bool, capsys: Any) -> dict[str, Any]:
    """A fresh control plane, the restore with `options`, Flux running (started before the restore when
    `flux_first`), until Flux has applied the source's current revision: what Flux pruned, orphaned and redid.
    Recreated: another UID than the restore created (its report's). Rewritten: another resourceVersion than right
    after the restore. The inventory the restore left is read before Flux starts (None when Flux ran during it)."""
    from statusvault.cli import main

    with LocalCluster.start(version="1.36") as plane:
        kube = KubeClient(load_transport(str(plane.kubeconfig)))
        bootstrap(kube)
        flux = Flux.start(kube) if flux_first else None
        try:
            capsys.readouterr()
            code = main(["--kubeconfig", str(plane.kubeconfig), "restore", "flux", "--storage",
                         str(flux_backup["store"]), "-o", "json", *options])  # fmt: skip
            report = capsys.readouterr().out
            assert code == ExitStatus.SUCCESS, report[-3000:]
            created = {
                i["name"]: i.get("newUid") for i in json.loads(report)["items"] if i["resource"] in CORE_TYPES.values()
            }
            restored = app_state(kube)
            assert set(restored) >= names(set(range(OBJECTS)) - DROPPED)
            inventory = None if flux else inventory_size(kube)
            flux = flux or Flux.start(kube)
            wait_for(lambda: applied(kube), 400, "Flux applied the source's revision", flux.log_tail)
            after = app_state(kube)
        finally:
            if flux:
                flux.stop()
    kept = names(set(range(OBJECTS)) - DROPPED)
    return {
        "restoredInventory": inventory,
        "pruned": len(names(DROPPED) - set(after)),
        "orphaned": len(names(DROPPED) & set(after)),
        "recreated": sum(1 for n in kept if after.get(n, ("",))[0] != created.get(n)),
        "rewritten": sum(1 for n in kept if n in restored and after.get(n) != restored[n]),
        "missing": len(kept - set(after)),
    }


def record(request: pytest.FixtureRequest, variant: str, counts: dict[str, Any]) -> None:
    """The counts of one run, for docs/operators.md (`make operators-report` prints them)."""
    with request.getfixturevalue("capsys").disabled():
        print(f"flux {variant}: {json.dumps(counts)}")


@pytest.mark.timeout(900)
def test_a_statusvault_restore_gives_flux_its_inventory_and_flux_prunes_what_the_source_dropped(
    flux_backup, request, capsys
):
    counts = disaster_restore(flux_backup, RESTORE, flux_first=False, capsys=capsys)
    record(request, "statusvault", counts)
    assert counts == {"restoredInventory": OBJECTS, "pruned": len(DROPPED), "orphaned": 0, "recreated": 0,
                      "rewritten": 0, "missing": 0}  # fmt: skip


@pytest.mark.timeout(900)  # a control plane and Flux, on a loaded machine
def test_flux_running_during_a_paused_restore_redoes_nothing(flux_backup, request, capsys):
    """Flux prunes the 10 objects only from the restored inventory, which it first saw when it was unpaused."""
    counts = disaster_restore(flux_backup, [*RESTORE, "--pause", "auto"], flux_first=True, capsys=capsys)
    record(request, "statusvault-paused", counts)
    assert counts == {"restoredInventory": None, "pruned": len(DROPPED), "orphaned": 0, "recreated": 0,
                      "rewritten": 0, "missing": 0}  # fmt: skip


@pytest.mark.comparison("a restore without status, Velero's default")
@pytest.mark.timeout(900)
def test_without_status_flux_loses_track_of_what_it_applied(flux_backup, request, capsys):
    """The comparison: Velero's default, Flux installed first (a restore without status has no saved Ready for the
    sources' gate, which waits for Flux to make them Ready). Flux has no inventory, so the objects the source dropped
    are never pruned; they are counted, not held to a number."""
    counts = disaster_restore(flux_backup, [*RESTORE, "--no-status"], flux_first=True, capsys=capsys)
    record(request, "no-status", counts)
    assert counts["missing"] == 0
    assert counts["pruned"] + counts["orphaned"] == len(DROPPED)
