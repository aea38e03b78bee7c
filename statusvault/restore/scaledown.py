"""Scale operators to zero for the length of a restore, so none of them sees an object before its status is back.

Between a restore's two writes an object exists without its status; an operator that reconciles it then may
re-provision what the status pointed at (Velero #6017, #1687). `--scale-down NAMESPACE/KIND/NAME` scales each
workload to 0 through its /scale subresource before the first write, waits until its pods are gone, and scales
it back afterwards, even when the restore fails or is interrupted. The replica count to go back to is kept in an
annotation on the workload, so a crashed run's successor (or the resumed restore) still scales it back.
"""

from __future__ import annotations

import dataclasses
import logging
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from statusvault.errors import ConfigError, KubeApiError, StatusVaultError
from statusvault.kinds import PODS
from statusvault.kube.api import KubeApi
from statusvault.kube.discovery import Discovery
from statusvault.kube.transport import MERGE_PATCH
from statusvault.model import ResourceType
from statusvault.restore.journal import Journal

log = logging.getLogger(__name__)
ANNOTATION = "statusvault.io/replicas-before-restore"


@dataclasses.dataclass(frozen=True)
class Workload:
    rt: ResourceType
    namespace: str
    name: str

    @property
    def display(self) -> str:
        return f"{self.rt.kind.lower()} {self.namespace}/{self.name}"

    @property
    def spec(self) -> str:
        """NAMESPACE/resource.group/NAME: what resolve_workloads reads back (a journal keeps it)."""
        return f"{self.namespace}/{self.rt.qualified}/{self.name}"


def resolve_workloads(specs: tuple[str, ...], discovery: Discovery) -> list[Workload]:
    """NAMESPACE/KIND/NAME (KIND as a resource name: deployment, statefulset, ...); it must have /scale."""
    out = []
    for spec in specs:
        parts = spec.split("/")
        if len(parts) != 3 or not all(parts):
            raise ConfigError(f"invalid --scale-down entry {spec!r}: expected NAMESPACE/KIND/NAME")
        rt = discovery.resolve(parts[1])
        if not rt.namespaced:
            raise ConfigError(f"--scale-down {spec!r}: {rt.kind} is not namespaced")
        out.append(Workload(rt, parts[0], parts[2]))
    return out


class Pauser:
    def __init__(self, client: KubeApi, timeout: float = 120.0):
        self.client = client
        self.timeout = timeout
        self.journal: Journal | None = None  # the restore's: which workloads it scaled, for its later runs
        self.failed: list[str] = []  # "<workload>: <why>" of each it could not scale back (left at 0)

    @contextmanager
    def paused(self, workloads: list[Workload]) -> Iterator[None]:
        done: list[Workload] = []
        try:
            for w in workloads:
                done.append(w)  # from the annotation on, it must be scaled back whatever happens next
                if self.journal is not None:
                    self.journal.mark_scaled(w.spec)
                self.scale_down(w)
            for w in done:
                self.wait_stopped(w)
            yield
        finally:
            for w in reversed(done):
                self.scale_back(w)

    def get(self, w: Workload) -> dict[str, Any]:
        obj = self.client.get(w.rt, w.namespace, w.name)
        if obj is None:
            raise ConfigError(f"--scale-down: {w.display} does not exist")
        return obj

    def scale_down(self, w: Workload) -> None:
        saved = self.remember_replicas(w)
        self.client.patch(w.rt, w.namespace, w.name, {"spec": {"replicas": 0}}, MERGE_PATCH, sub="scale")
        log.info("scaled %s to 0 for the restore (was %s)", w.display, saved)

    def remember_replicas(self, w: Workload, attempts: int = 5) -> str:
        """The replica count to go back to, kept in the annotation unless an earlier run that did not scale it back
        kept it. Guarded by resourceVersion; a 409 (its controller wrote its status meanwhile) re-reads, boundedly."""
        attempt = 0
        while True:
            obj = self.get(w)
            saved = (obj["metadata"].get("annotations") or {}).get(ANNOTATION)
            if saved is not None:
                return str(saved)
            scale = self.client.get_path(w.rt.path(w.namespace, w.name, "scale"))  # spec.replicas wherever it lives
            saved = str((scale.get("spec") or {}).get("replicas", 0))
            rv = obj["metadata"]["resourceVersion"]
            patch = {"metadata": {"annotations": {ANNOTATION: saved}, "resourceVersion": rv}}
            try:
                self.client.patch(w.rt, w.namespace, w.name, patch, MERGE_PATCH)
                return saved
            except KubeApiError as e:
                attempt += 1
                if e.code != 409 or attempt >= attempts:
                    raise

    def wait_stopped(self, w: Workload) -> None:
        """Until no pod of the workload is left, terminating ones included (status.replicas leaves those out)."""
        deadline = time.monotonic() + self.timeout
        while True:
            scale = self.client.get_path(w.rt.path(w.namespace, w.name, "scale"))
            selector = (scale.get("status") or {}).get("selector") or ""
            if selector:
                if not self.client.list_names(PODS, w.namespace, selector=selector):
                    return
            elif int((scale.get("status") or {}).get("replicas") or 0) == 0:
                return
            if time.monotonic() > deadline:
                raise StatusVaultError(f"{w.display} still runs pods {self.timeout:.0f}s after scaling it to 0")
            time.sleep(0.5)

    def scale_back(self, w: Workload) -> None:
        """To the replica count its annotation kept (a workload deleted since, or never scaled, has nothing to go
        back to); one that cannot be is counted in the report (exit 3), never only logged."""
        try:
            obj = self.client.get(w.rt, w.namespace, w.name)
            saved = ((obj or {}).get("metadata", {}).get("annotations") or {}).get(ANNOTATION)
            if saved is not None:
                replicas = {"spec": {"replicas": int(saved) if saved.isdigit() else 1}}
                self.client.patch(w.rt, w.namespace, w.name, replicas, MERGE_PATCH, sub="scale")
                unmark = {"metadata": {"annotations": {ANNOTATION: None}}}
                self.client.patch(w.rt, w.namespace, w.name, unmark, MERGE_PATCH)
                log.info("scaled %s back to %s", w.display, saved)
        except StatusVaultError as e:  # the restore goes on to its report, which counts it: exit 3
            log.error("could not scale %s back (%s): its annotation %s has the replica count", w.display, e, ANNOTATION)
            self.failed.append(f"{w.display}: {e} (its annotation {ANNOTATION} has the replica count)")
            return
        if self.journal is not None:
            self.journal.mark_scaled_back(w.spec)
