"""Scale operators to zero for the length of a restore, so none of them sees an object before its status is back.

Between a restore's two writes an object exists without its status; an operator that reconciles it then may
re-provision what the status pointed at (Velero #6017, #1687). `--scale-down NAMESPACE/KIND/NAME` scales each
workload to 0 through its /scale subresource before the first write, waits until its pods are gone, and scales
it back afterwards, even when the restore fails or is interrupted. Only /scale is written: the replica count to go
back to is kept by the restore (ReplicaLedger: its journal, and the store beside its backup), never on the
workload, so a restore needs no right to edit another team's Deployment, and a crashed run's successor (the resumed
restore, a run with --restart, a controller pod that replaced the one that died) still scales it back. Workloads
fenced by a release that kept the count in an annotation on the workload are scaled back to it.
"""

from __future__ import annotations

import dataclasses
import logging
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import orjson

from statusvault.errors import ConfigError, StatusVaultError
from statusvault.kube.api import KubeApi
from statusvault.kube.discovery import Discovery
from statusvault.kube.transport import MERGE_PATCH
from statusvault.model import ResourceType
from statusvault.restore.core.journal import Journal
from statusvault.runtime.killpoints import kill_point
from statusvault.storage.base import ObjectStore, fence_key
from statusvault.vocabulary.kinds import PODS

log = logging.getLogger(__name__)
ANNOTATION = "statusvault.io/replicas-before-restore"  # where releases before the ledger kept the count: read only


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


class ReplicaLedger:
    """Where the replica count of each workload a restore scaled to 0 is kept until it is scaled back: the restore's
    journal (the local state of this run and its resumptions) and, when the store can be written, `fences/<key>.json`
    beside the backups (the same restore run again after its local state was lost: `--restart`, another machine, a
    controller pod that replaced the one that died). Never on the workload."""

    def __init__(self, journal: Journal | None = None, store: ObjectStore | None = None, key: str = ""):
        self.journal, self.store, self.key = journal, store, key
        self.kept: dict[str, int] = {}  # this run's own counts (a scratch run has neither journal nor store)
        self._stored: dict[str, int] | None = None  # the store's document, once read
        self._store_ok = store is not None and bool(key)

    def count(self, w: Workload) -> int | None:
        """The count to go back to, kept by this restore (None: it did not scale the workload down)."""
        if w.spec in self.kept:
            return self.kept[w.spec]
        kept = self.journal.scale_count(w.spec) if self.journal is not None else None
        return kept if kept is not None else self._from_store().get(w.spec)

    def left_down(self) -> dict[str, bool]:
        """Every workload a run of this restore scaled to 0 and did not scale back, as its journal and the store
        keep them (the store's for a run on another machine or with another state directory): spec -> whether the
        journal keeps it (else the store alone does)."""
        journalled = set(self.journal.scaled()) if self.journal is not None else set()
        return {spec: spec in journalled for spec in sorted({*journalled, *self._from_store()})}

    def record(self, w: Workload, replicas: int) -> None:
        """Before the workload is scaled to 0."""
        self.kept[w.spec] = replicas
        if self.journal is not None:
            self.journal.mark_scaled(w.spec, replicas)
        self._write({**self._from_store(), w.spec: replicas})

    def forget(self, w: Workload) -> None:
        """Once it is scaled back."""
        self.kept.pop(w.spec, None)
        if self.journal is not None:
            self.journal.mark_scaled_back(w.spec)
        left = {k: v for k, v in self._from_store().items() if k != w.spec}
        if left != self._from_store():
            self._write(left)

    def _from_store(self) -> dict[str, int]:
        if self._stored is None:
            self._stored = {}
            if self._store_ok and self.store is not None:
                try:
                    doc = orjson.loads(self.store.get(fence_key(self.key), 1 << 20)) if self._exists() else {}
                except (StatusVaultError, orjson.JSONDecodeError) as e:
                    log.warning("cannot read the replica counts kept in the store (%s): the journal's are used", e)
                    doc = {}
                counts = doc.get("workloads") if isinstance(doc, dict) else None
                if isinstance(counts, dict):
                    self._stored = {str(k): v for k, v in counts.items() if isinstance(v, int) and 0 <= v <= MAX_KEPT}
        return self._stored

    def _exists(self) -> bool:
        return self.store is not None and self.store.exists(fence_key(self.key))

    def _write(self, counts: dict[str, int]) -> None:
        if not self._store_ok or self.store is None:
            self._stored = counts
            return
        try:
            if counts:
                body = {"restore": self.key, "workloads": counts}
                self.store.put(fence_key(self.key), orjson.dumps(body, option=orjson.OPT_INDENT_2))
            elif self._exists():
                self.store.delete(fence_key(self.key))
            self._stored = counts
        except StatusVaultError as e:  # a read-only store: the local journal still keeps them
            log.warning("cannot keep replica counts in the store (%s): only this machine's journal keeps them", e)
            self._store_ok, self._stored = False, counts


MAX_KEPT = 10_000  # a count read back from the store beyond this is not believed (a store writer's)


class ScaleDown:
    """--scale-down: the named controllers scaled to 0 for the restore's writes and back to their counts after
    (kept in the journal and the store first, so a killed run's successor scales them back)."""

    def __init__(self, client: KubeApi, timeout: float = 120.0):
        self.client = client
        self.timeout = timeout
        self.ledger = ReplicaLedger()  # the restore's: the counts of the workloads it scaled, for its later runs
        self.failed: list[str] = []  # "<workload>: <why>" of each it could not scale back (left at 0)

    @contextmanager
    def scaled_down(self, workloads: list[Workload]) -> Iterator[None]:
        """Scaled to 0 and stopped while the block runs; scaled back whatever happens in it."""
        done: list[Workload] = []
        try:
            for w in workloads:
                done.append(w)  # from its count kept on, it must be scaled back whatever happens next
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

    def at_zero(self, w: Workload) -> bool:
        """Whether the workload exists and is scaled to 0 now."""
        try:
            scale = self.client.get_path(w.rt.path(w.namespace, w.name, "scale"))
        except StatusVaultError:
            return False
        return int((scale.get("spec") or {}).get("replicas", 0) or 0) == 0

    def scale_down(self, w: Workload) -> None:
        saved = self.remember_replicas(w)
        kill_point("restore.count-kept")  # kept by the restore, the workload not scaled yet
        self.client.patch(w.rt, w.namespace, w.name, {"spec": {"replicas": 0}}, MERGE_PATCH, sub="scale")
        log.info("scaled %s to 0 for the restore (was %s)", w.display, saved)

    def remember_replicas(self, w: Workload) -> int:
        """The replica count to go back to: the one this restore kept when an earlier run of it scaled the workload
        down (it is at 0 now), or an older release's annotation, else its /scale's now, kept before any write."""
        kept = self.ledger.count(w)
        if kept is None:
            kept = _annotated(self.get(w))
        if kept is None:
            scale = self.client.get_path(w.rt.path(w.namespace, w.name, "scale"))  # spec.replicas wherever it lives
            kept = int((scale.get("spec") or {}).get("replicas", 0) or 0)
        self.ledger.record(w, kept)
        return kept

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
        """To the replica count the restore kept (or an older release's annotation on it); a workload deleted since,
        or never scaled, has nothing to go back to. One that cannot be is counted in the report (exit 3)."""
        try:
            obj = self.client.get(w.rt, w.namespace, w.name)
            kept = self.ledger.count(w)
            annotated = _annotated(obj) if obj is not None else None
            if obj is not None and (kept is not None or annotated is not None):
                replicas = kept if kept is not None else annotated
                self.client.patch(w.rt, w.namespace, w.name, {"spec": {"replicas": replicas}}, MERGE_PATCH, sub="scale")
                log.info("scaled %s back to %s", w.display, replicas)
                if annotated is not None:
                    self._unmark(w)
        except StatusVaultError as e:  # the restore goes on to its report, which counts it: exit 3
            kept = self.ledger.count(w)
            log.error("could not scale %s back to %s replicas (%s)", w.display, kept, e)
            self.failed.append(f"{w.display}: {e} (it had {kept} replica(s): scale it back to that)")
            return
        self.ledger.forget(w)

    def _unmark(self, w: Workload) -> None:
        """An older release's annotation, taken away once the workload is back (best effort: this release needs no
        right to edit the workload, only its /scale)."""
        try:
            self.client.patch(w.rt, w.namespace, w.name, {"metadata": {"annotations": {ANNOTATION: None}}}, MERGE_PATCH)
        except StatusVaultError as e:
            log.warning("%s is back, but its annotation %s stays (%s)", w.display, ANNOTATION, e)


def _annotated(obj: dict[str, Any]) -> int | None:
    """The count an older release kept on the workload (before the ledger), if any."""
    saved = (obj["metadata"].get("annotations") or {}).get(ANNOTATION)
    return None if saved is None else int(saved) if str(saved).isdigit() else 1
