"""Apply rendered manifests (a schedule's CronJob, the controller's Deployment, their RBAC) to a cluster."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from statusvault.errors import ConfigError
from statusvault.kube.api import KubeApi
from statusvault.kube.discovery import Discovery
from statusvault.kube.transport import APPLY_PATCH


def apply_manifests(
    client: KubeApi, discovery: Discovery, manifests: list[dict[str, Any]], dry_run: bool
) -> Iterator[str]:
    """Server-side apply, in order, yielding `kind/name` as each one is applied; with dry_run every write
    is sent with dryRun=All. An unserved kind stops before it is written."""
    for m in manifests:
        group, _, version = m["apiVersion"].rpartition("/")
        rt = discovery.find(group, version, m["kind"])
        if rt is None:
            raise ConfigError(f"{m['apiVersion']} {m['kind']} is not served by this cluster")
        meta = m["metadata"]
        client.patch(rt, meta.get("namespace"), meta["name"], m, APPLY_PATCH, dry_run, params=(("force", "true"),))
        yield f"{m['kind'].lower()}/{meta['name']}"
