"""Read what fencing needs from the cluster (RBAC, workloads, status managers) and plan it for a restore plan.

Reading RBAC the user may not list is a FenceError under `--fence auto` (nothing is written: the plan is not
guessed), a warning in the plan under `--fence best-effort`.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Iterator

from statusvault.errors import KubeApiError, StatusVaultError
from statusvault.kinds import (
    CLUSTER_ROLE_BINDINGS,
    CLUSTER_ROLES,
    DAEMONSETS,
    DEPLOYMENTS,
    ROLE_BINDINGS,
    ROLES,
    STATEFULSETS,
)
from statusvault.kube.api import KubeApi
from statusvault.model import KubeObject, ResourceType
from statusvault.restore.fencing import FencePlan, Rbac, Target, plan_fencing, status_managers
from statusvault.restore.options import RestoreOptions
from statusvault.restore.plan import RestorePlan

log = logging.getLogger(__name__)
MANAGER_SAMPLE = 200  # objects per resource whose managedFields are read for the status managers


class FenceError(StatusVaultError):
    """Fencing cannot be planned (RBAC the user may not read): nothing was written."""


def read_fence_plan(client: KubeApi, plan: RestorePlan, opts: RestoreOptions) -> FencePlan:
    """The fencing of the restore `plan`, from the cluster's RBAC and workloads."""
    targets = [
        Target(plan.types[q], frozenset(ns for ns in namespaces if ns))
        for q, namespaces in sorted(plan.status_namespaces().items())
        if q in plan.types
    ]
    warnings: list[str] = []
    try:
        rbac = Rbac(
            _all(client, CLUSTER_ROLES),
            _all(client, ROLES),
            _all(client, CLUSTER_ROLE_BINDINGS),
            _all(client, ROLE_BINDINGS),
        )
        workloads = [w for rt in (DEPLOYMENTS, STATEFULSETS, DAEMONSETS) for w in _all(client, rt)]
    except KubeApiError as e:
        if opts.fence != "best-effort":
            raise FenceError(
                f"--fence {opts.fence}: cannot read the cluster's RBAC and workloads ({e}); the controllers to fence "
                "are not guessed and nothing was written: use an account that may list them, or --fence best-effort"
            ) from e
        warnings.append(f"cannot read the cluster's RBAC and workloads ({e}): NOTHING was fenced")
        return FencePlan(warnings=tuple(warnings))
    managers, unread = _managers(client, targets)
    warnings += [f"cannot read the status managers of {q} ({why})" for q, why in unread]
    fence = plan_fencing(
        rbac,
        workloads,
        targets,
        status_managers=managers,
        exclude=opts.fence_exclude,
        pause=dataclasses.replace(opts.pause, auto=True),
    )
    return dataclasses.replace(fence, warnings=fence.warnings + tuple(warnings))


def _all(client: KubeApi, rt: ResourceType) -> tuple[KubeObject, ...]:
    return tuple(_items(client, rt))


def _items(client: KubeApi, rt: ResourceType) -> Iterator[KubeObject]:
    for page in client.list_pages(rt, None):
        for obj in page:
            obj.setdefault("kind", rt.kind)  # list items carry no kind
            yield obj


def _managers(client: KubeApi, targets: list[Target]) -> tuple[dict[str, set[str]], list[tuple[str, str]]]:
    """Per target resource, the managers that wrote the status of its objects in this cluster (the archive does
    not keep managedFields): the first MANAGER_SAMPLE objects of each."""
    out: dict[str, set[str]] = {}
    unread = []
    for t in targets:
        try:
            page = next(iter(client.list_pages(t.rt, None, limit=MANAGER_SAMPLE)), [])
        except KubeApiError as e:
            if e.code == 404:  # not served yet: its CRD comes with the restore, no object has a manager here
                continue
            unread.append((t.rt.qualified, str(e)))
            continue
        out[t.rt.qualified] = status_managers(page)
    return out, unread
