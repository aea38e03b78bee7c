"""Read what fencing needs from the cluster (RBAC, workloads, status managers) and plan it for a restore plan.

The status managers come from the backup (format 1.2 on), else from the cluster's objects. Reading RBAC the user
may not list is a FenceError under `--fence auto` (nothing is written: the plan is not guessed), a warning in the
plan under `--fence best-effort`.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Iterator

import orjson

from statusvault.archive import ArchiveReader
from statusvault.errors import KubeApiError, NotFound, StatusVaultError
from statusvault.kube.api import KubeApi
from statusvault.model import KubeObject, ResourceType
from statusvault.restore.core.plan import RestorePlan
from statusvault.restore.options import FenceMode, RestoreOptions
from statusvault.restore.quiet.fencing import FencePlan, FenceTarget, Rbac, plan_fencing, status_managers
from statusvault.vocabulary.kinds import (
    CLUSTER_ROLE_BINDINGS,
    CLUSTER_ROLES,
    DAEMONSETS,
    DEPLOYMENTS,
    ROLE_BINDINGS,
    ROLES,
    STATEFULSETS,
)

log = logging.getLogger(__name__)
MANAGER_SAMPLE = 200  # objects per resource whose managedFields are read for the status managers
STATUS_MANAGERS_SINCE = 2  # the archive format's minor version (1.x) from which backups record them
Managers = dict[str, set[str]]  # resource -> field managers that wrote the status of its objects


class FenceError(StatusVaultError):
    """Fencing cannot be planned (RBAC the user may not read): nothing was written."""


def read_fence_plan(client: KubeApi, plan: RestorePlan, opts: RestoreOptions, reader: ArchiveReader) -> FencePlan:
    """The fencing of the restore `plan`, from the cluster's RBAC and workloads, cross-checked with the status
    managers the backup recorded (read from the cluster's objects for a backup older than format 1.2)."""
    targets = [
        FenceTarget(plan.types[q], frozenset(ns for ns in namespaces if ns))
        for q, namespaces in sorted(plan.status_namespaces().items())
        if q in plan.types
    ]
    return read_fence(client, targets, opts, archived_managers(reader, targets))


def read_fence(
    client: KubeApi,
    targets: list[FenceTarget],
    opts: RestoreOptions,
    managers: Managers | None = None,
    where: str = "backup",
) -> FencePlan:
    """The fencing of writes to the `targets`' status in the cluster of `client`, from its RBAC and workloads;
    `managers`: the status managers per resource as recorded in `where` (None: read from the cluster's objects)."""
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
        if opts.fence != FenceMode.BEST_EFFORT:
            raise FenceError(
                f"--fence {opts.fence}: cannot read the cluster's RBAC and workloads ({e}); the controllers to fence "
                "are not guessed and nothing was written: use an account that may list them, or --fence best-effort"
            ) from e
        warnings.append(f"cannot read the cluster's RBAC and workloads ({e}): NOTHING was fenced")
        return FencePlan(warnings=tuple(warnings), rbac_read=False)
    _check_excluded(opts.fence_exclude, workloads)
    if managers is None:
        where, (managers, unread) = "cluster", _managers(client, targets)
        warnings += [f"cannot read the status managers of {q} ({why})" for q, why in unread]
    fence = plan_fencing(
        rbac,
        workloads,
        targets,
        status_managers=managers,
        exclude=opts.fence_exclude,
        pause=dataclasses.replace(opts.pause, auto=True),
    )
    return dataclasses.replace(fence, warnings=fence.warnings + tuple(warnings), managers_from=where)


def _check_excluded(excluded: tuple[str, ...], workloads: list[KubeObject]) -> None:
    """--fence-exclude names workloads to keep running: one that names none (a typo) would fence the very
    operator meant to be kept, so it is refused before anything is written, as --scale-down refuses its own."""
    known = {f"{(w.get('metadata') or {}).get('namespace')}/{(w.get('metadata') or {}).get('name')}" for w in workloads}
    unknown = [entry for entry in excluded if entry not in known]
    if unknown:
        raise FenceError(
            f"--fence-exclude: {', '.join(unknown)} names no Deployment, StatefulSet or DaemonSet in the cluster "
            "(nothing was written): give NAMESPACE/NAME of a workload to keep running"
        )


def archived_managers(reader: ArchiveReader, targets: list[FenceTarget]) -> Managers | None:
    """Per target resource, the managers its objects in the backup record as having written their status; None
    for a backup older than format 1.2, which did not record them."""
    minor = str(reader.head().get("formatVersion", "")).partition(".")[2]  # readers take major 1 only
    if not minor.isdigit() or int(minor) < STATUS_MANAGERS_SINCE:
        return None
    wanted = {t.rt.qualified for t in targets}
    out: Managers = {q: set() for q in wanted}
    for path, data in reader.objects(lambda path: _resource_of(path) in wanted):
        if b'"managedFields"' in data:
            out[_resource_of(path)] |= status_managers([orjson.loads(data)])
    return out


def _resource_of(member: str) -> str:
    """resources/<resource>.<group>/... -> <resource>.<group> (archive-format.md)."""
    parts = member.split("/")
    return parts[1] if len(parts) > 2 and parts[0] == "resources" else ""


def _all(client: KubeApi, rt: ResourceType) -> tuple[KubeObject, ...]:
    return tuple(_items(client, rt))


def _items(client: KubeApi, rt: ResourceType) -> Iterator[KubeObject]:
    for page in client.list_pages(rt, None):
        for obj in page:
            obj.setdefault("kind", rt.kind)  # list items carry no kind
            yield obj


def _managers(client: KubeApi, targets: list[FenceTarget]) -> tuple[Managers, list[tuple[str, str]]]:
    """Per target resource, the managers that wrote the status of its objects in this cluster (for a backup that
    did not record them): the first MANAGER_SAMPLE objects of each."""
    out: Managers = {}
    unread = []
    for t in targets:
        try:
            page = next(iter(client.list_pages(t.rt, None, limit=MANAGER_SAMPLE)), [])
        except NotFound:  # not served yet: its CRD comes with the restore, no object has a manager here
            continue
        except KubeApiError as e:
            unread.append((t.rt.qualified, str(e)))
            continue
        out[t.rt.qualified] = status_managers(page)
    return out, unread
