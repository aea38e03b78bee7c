"""Namespaces on either server: the 1.20 cluster has them; the 1.36 CRD server has none (a namespaced custom
resource may be created in any namespace name), so there a namespace is the set of objects in it."""

from __future__ import annotations

import time

from statusvault.kinds import NAMESPACES
from statusvault.kube.client import KubeClient
from statusvault.kube.discovery import discover
from statusvault.testing.fixtures import ensure_namespace


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
