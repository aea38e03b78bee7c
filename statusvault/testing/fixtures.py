"""Load fixture CRDs and custom resources (with their status) into a cluster, for tests and the demo."""

from __future__ import annotations

import copy
import time
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import yaml

from statusvault.errors import KubeApiError
from statusvault.kube.client import KubeClient
from statusvault.kube.discovery import Discovery, discover, established
from statusvault.model import KubeObject
from statusvault.vocabulary.kinds import CRDS, NAMESPACES

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures"


def read_docs(path: Path) -> list[KubeObject]:
    with open(path) as f:
        return [d for d in yaml.safe_load_all(f) if d]


def install_crds(client: KubeClient, crds: Iterable[KubeObject], timeout: float = 60.0) -> Discovery:
    """Create CRDs (existing ones are left alone), wait until Established and served; return discovery."""
    crds = list(crds)
    for crd in crds:
        try:
            client.create(CRDS, None, crd)
        except KubeApiError as e:
            if e.code != 409:
                raise
    deadline = time.monotonic() + timeout
    for crd in crds:
        while not established(client.get(CRDS, None, crd["metadata"]["name"])):
            if time.monotonic() > deadline:
                raise TimeoutError(f"CRD {crd['metadata']['name']} not Established")
            time.sleep(0.1)
    wanted = {c["metadata"]["name"] for c in crds}
    while True:
        d = discover(client)
        if wanted <= {rt.qualified for rt in d.preferred}:
            return d
        if time.monotonic() > deadline:
            raise TimeoutError(f"CRDs not in discovery: {wanted}")
        time.sleep(0.2)


def create_with_status(
    client: KubeClient, discovery: Discovery, obj: KubeObject, namespace: str | None = None
) -> KubeObject:
    """Create `obj` and give it its status as an operator would: via /status when the CRD has it."""
    obj = copy.deepcopy(obj)
    group, _, version = obj["apiVersion"].rpartition("/")
    rt = discovery.find(group, version, obj["kind"])
    if rt is None:
        raise LookupError(f"{obj['apiVersion']} {obj['kind']} is not served")
    ns = namespace or obj["metadata"].get("namespace") if rt.namespaced else None
    if ns:
        obj["metadata"]["namespace"] = ns
    status = obj.get("status")
    created = client.create(rt, ns, obj)
    if status and rt.has_status:
        created["status"] = status
        created = client.replace(rt, ns, created["metadata"]["name"], created, sub="status")
    return created


def load_objects(client: KubeClient, discovery: Discovery, path: Path, namespace: str) -> list[KubeObject]:
    return [create_with_status(client, discovery, doc, namespace) for doc in read_docs(path)]


def fixture_crds() -> list[KubeObject]:
    return [doc for p in sorted((FIXTURES / "crds").glob("*.yaml")) for doc in read_docs(p)]


def ensure_namespace(client: KubeClient, name: str) -> None:

    try:
        client.create(NAMESPACES, None, {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}})
    except KubeApiError as e:
        if e.code != 409:
            raise


def summary(objs: Iterable[KubeObject]) -> list[dict[str, Any]]:
    return [{"kind": o["kind"], "name": o["metadata"]["name"], "status": o.get("status")} for o in objs]
