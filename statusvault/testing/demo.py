"""`make demo`: the whole story on a local cluster. Load CRs with status, back up, lose them, restore, compare.

`--cli PATH` runs that statusvault (make demo: the wheel's, installed into a virtual environment of its own, as a
user gets it) instead of the checkout's."""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time
from typing import Any

from statusvault.backup import default_backup_name
from statusvault.kube.client import KubeClient
from statusvault.kube.discovery import Discovery, discover
from statusvault.kube.transport import load_transport
from statusvault.testing.cluster import LocalCluster
from statusvault.testing.fixtures import FIXTURES, ensure_namespace, fixture_crds, install_crds, load_objects
from statusvault.vocabulary.kinds import CRDS, NAMESPACES

NAMESPACE = "team-a"


def step(text: str) -> None:
    print(f"\n==> {text}", flush=True)


CLI = [sys.executable, "-m", "statusvault"]  # or --cli


def statusvault(*args: str) -> None:
    print(f"$ statusvault {' '.join(args)}", flush=True)
    subprocess.run([*CLI, *args], check=True)


def snapshot(client: KubeClient, d: Discovery) -> dict[str, Any]:
    out = {}
    for rt in d.custom():
        for page in client.list_pages(rt, NAMESPACE if rt.namespaced else None):
            for o in page:
                out[f"{o['kind']} {o['metadata']['name']}"] = o
    return out


def wait_gone(client: KubeClient, check: Any, what: str, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while check():
        if time.monotonic() > deadline:
            raise TimeoutError(f"{what} still there after {timeout:.0f}s")
        time.sleep(0.3)


def disaster(client: KubeClient, d: Discovery, before: dict[str, Any]) -> None:
    """Lose everything: the namespace, the cluster-scoped CRs and the CRDs themselves."""
    kc = d.resolve("kubernetesclusters.xyz.example.com")
    for name in ("prod-eu",):  # the operator would release its finalizer while deprovisioning
        obj = client.get(kc, NAMESPACE, name)
        if obj:
            obj["metadata"]["finalizers"] = []
            client.replace(kc, NAMESPACE, name, obj)
    client.delete(NAMESPACES, None, NAMESPACE)
    for o in before.values():
        if "namespace" not in o["metadata"]:
            client.delete(d.resolve(o["kind"]), None, o["metadata"]["name"])
    wait_gone(client, lambda: client.get(NAMESPACES, None, NAMESPACE), "namespace")
    for crd in fixture_crds():
        client.delete(CRDS, None, crd["metadata"]["name"])
    for crd in fixture_crds():
        wait_gone(client, lambda c=crd: client.get(CRDS, None, c["metadata"]["name"]), "CRD")


def compare(before: dict[str, Any], after: dict[str, Any]) -> bool:
    rows = [("OBJECT", "STATUS BEFORE", "STATUS AFTER", "SAME")]
    ok = True
    for key, old in sorted(before.items()):
        new = after.get(key)
        same = new is not None and new.get("status") == old.get("status")
        ok &= same
        rows.append(
            (key, _brief(old.get("status")), _brief((new or {}).get("status", "(missing)")), "yes" if same else "NO")
        )
    widths = [max(len(r[i]) for r in rows) for i in range(4)]
    for r in rows:
        print("  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)))
    return ok


def _brief(status: Any) -> str:
    if not isinstance(status, dict):
        return str(status)
    for key in ("apiServerURL", "externalID", "externalRef", "poolID", "state"):
        if key in status:
            return f"{key}={status[key]}"
    return f"{len(status)} fields"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m statusvault.testing.demo")
    parser.add_argument("--cli", help="the statusvault to run [default: this checkout's]")
    cli = parser.parse_args(argv).cli
    if cli:
        CLI[:] = [cli]
        print(f"statusvault: {cli}")
    os.environ.setdefault("STATUSVAULT_STORAGE", os.path.join(os.getcwd(), ".demo", "backups"))
    step("Starting a local kube-apiserver + etcd + controller-manager (v1.20.2)")
    with LocalCluster.start() as cluster:
        os.environ["KUBECONFIG"] = str(cluster.kubeconfig)
        print(f"kubeconfig: {cluster.kubeconfig}")
        client = KubeClient(load_transport())
        step("Installing the fixture CRDs and custom resources, status written as an operator would")
        d = install_crds(client, fixture_crds())
        ensure_namespace(client, NAMESPACE)
        load_objects(client, d, FIXTURES / "objects" / "team-a.yaml", NAMESPACE)
        before = snapshot(client, d)
        statusvault("cluster-info")
        name = default_backup_name("demo")
        step(f"Backing up to {os.environ['STATUSVAULT_STORAGE']}")
        statusvault("backup", name)
        statusvault("verify", name)
        step("Disaster: the namespace, the cluster-scoped resources and the CRDs are deleted")
        disaster(client, d, before)
        print(f"custom resources left: {len(snapshot(client, discover(client)))}")
        step("Preview, then restore")
        statusvault("restore", name, "--dry-run", "client")
        statusvault("restore", name)
        step("Status before the disaster and after the restore")
        ok = compare(before, snapshot(client, discover(client)))
        print("\nEvery status came back exactly." if ok else "\nSOME STATUS DID NOT COME BACK.")
        return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
