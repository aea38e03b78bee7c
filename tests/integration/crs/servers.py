"""Namespaces on any test server: the control planes (1.20, 1.36) have them; the 1.36 CRD-only server has none (a
namespaced custom resource may be created in any namespace name), so there a namespace is the set of objects in it."""

from __future__ import annotations

import time

from statusvault.errors import KubeApiError
from statusvault.kube.client import KubeClient
from statusvault.kube.discovery import discover
from statusvault.testing.fixtures import ensure_namespace
from statusvault.vocabulary.kinds import CRDS, NAMESPACES


def serves_namespaces(kube: KubeClient) -> bool:
    return discover(kube).by_qualified(NAMESPACES.qualified) is not None


def make_namespace(kube: KubeClient, ns: str) -> None:
    if serves_namespaces(kube):
        ensure_namespace(kube, ns)


def delete_namespace(kube: KubeClient, ns: str) -> None:
    """Delete a namespace and wait until it is gone; on a server without Namespaces, delete every custom object
    in it instead."""
    served = discover(kube)
    if served.by_qualified(NAMESPACES.qualified) is not None:
        kube.delete(NAMESPACES, None, ns)
        wait_gone(kube, NAMESPACES, None, ns)
        return
    for rt in served.custom():
        for name in kube.list_names(rt, ns) if rt.namespaced else ():
            kube.delete(rt, ns, name)


def namespace_absent(kube: KubeClient, ns: str) -> bool:
    """No such Namespace; on a server without Namespaces, no custom object in it."""
    served = discover(kube)
    if served.by_qualified(NAMESPACES.qualified) is not None:
        return kube.get(NAMESPACES, None, ns) is None
    return not any(kube.list_names(rt, ns) for rt in served.custom() if rt.namespaced)


def wait_gone(kube: KubeClient, rt, ns, name, timeout: float = 60.0) -> None:  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout
    while kube.get(rt, ns, name) is not None:
        assert time.monotonic() < deadline, f"{name} still exists"
        time.sleep(0.2)


def replace_schema_and_wait(kube: KubeClient, rt, schema: dict, probe: dict, status: dict | None = None) -> None:  # type: ignore[no-untyped-def]
    """Replace the CRD's schema, then wait until the server judges writes by it (the CRD handler swaps it in
    asynchronously): until a dry-run write of `probe` (its status, when given, through /status of a probe object)
    no longer comes back as it was sent (pruned) or is refused (a validation rule)."""
    name = rt.qualified
    live = kube.get(CRDS, None, name)
    live["spec"]["versions"][0]["schema"]["openAPIV3Schema"] = schema
    kube.replace(CRDS, None, name, live)
    ns = "default" if rt.namespaced else None
    deadline = time.monotonic() + 30
    while True:
        try:
            if status is None:
                answer = kube.create(rt, ns, probe, dry_run=True)
                taken = all(answer.get(k) == v for k, v in probe.items() if k not in ("metadata", "apiVersion", "kind"))
            else:
                current = kube.get(rt, ns, probe["metadata"]["name"]) or kube.create(rt, ns, probe)
                answer = kube.replace(
                    rt, ns, current["metadata"]["name"], {**current, "status": status}, dry_run=True, sub="status"
                )
                taken = answer.get("status") == status
        except KubeApiError as e:
            if e.code != 422:
                raise
            taken = False
        if not taken:
            if status is not None:
                kube.delete(rt, ns, probe["metadata"]["name"])
            return
        assert time.monotonic() < deadline, f"the new schema of {name} never took effect"
        time.sleep(0.2)
