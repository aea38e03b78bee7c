"""Execute a RestorePlan: per object, create (pass 1) then write the saved status (pass 2)."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any

import orjson

from statusvault.archive import ArchiveReader
from statusvault.errors import StatusVaultError
from statusvault.kube.client import KubeClient
from statusvault.kube.discovery import Discovery, established
from statusvault.model import KubeObject, ResourceType
from statusvault.progress import NullProgress, Progress
from statusvault.restore.owners import OwnerResolver
from statusvault.restore.plan import CRD_QUALIFIED, RestoreOptions
from statusvault.restore.planstore import Action, Category, PlanItem, RestorePlan, StatusMode
from statusvault.restore.results import GENERATION_NOTE, ItemResult, Outcome, RestoreReport, StatusOutcome
from statusvault.restore.writes import ObjectWriter
from statusvault.transforms import ABSENT, remap_owner_refs, restore_diff, sanitize

log = logging.getLogger(__name__)
SOMEONE_ELSE = (
    "created by another writer during the restore, so policy none left it without its saved status "
    "(use --existing-resource-policy update to write it)"
)


class RestoreEngine:
    def __init__(
        self,
        client: KubeClient,
        discovery: Discovery,
        discover: Callable[[], Discovery],
        progress: Progress | None = None,
        parallel: int = 8,
        establish_timeout: float = 60.0,
        cancel: threading.Event | None = None,
    ):
        self.cancel = cancel  # set from outside (a lost Lease): no new object is started, the run is aborted
        self.client = client
        self.discovery = discovery
        self.discover = discover
        self.progress = progress or NullProgress()
        self.parallel = max(1, parallel)
        self.establish_timeout = establish_timeout

    def run(self, reader: ArchiveReader, plan: RestorePlan, opts: RestoreOptions) -> RestoreReport:
        started = time.monotonic()
        report = RestoreReport(plan.backup, opts.dry_run, warnings=list(plan.warnings))
        report.resumed = plan.resumed
        run = _Run(self, reader, plan, opts, report)
        run.new_namespaces = plan.names(Category.NAMESPACE, Action.CREATE)
        if plan.resumed:  # CRDs restored by the earlier run are served now
            plan.retarget(self.discovery)
        self.progress.start("restore", total=plan.pending())
        try:
            for wave in plan.waves():
                run.wave(plan.items(wave, pending=True))
                if wave.category == Category.CRD and opts.dry_run == "none":
                    run.owners.refresh(self._after_crds(plan, run.crds_written))
            plan.finished = not report.failures and not report.missing_status
        except KeyboardInterrupt:
            report.interrupted = True
        except StatusVaultError as e:  # keep what was done: the report says where it stopped
            report.aborted = str(e)
        finally:
            self.progress.finish()
            report.duration = time.monotonic() - started
        if opts.dry_run == "none":  # a check, not a guess: what the journal has not seen done
            report.unreached = max(0, plan.pending(wanted_status=True) - len(report.missing_status))
        return report

    def _after_crds(self, plan: RestorePlan, written: set[str]) -> Discovery:
        """Wait until the restored CRDs are Established and served, then retarget the items that use them."""
        names = sorted(written)
        deadline = time.monotonic() + self.establish_timeout
        for name in names:
            while not established(self.client.get(plan.types[CRD_QUALIFIED], None, name)):
                if time.monotonic() > deadline:
                    raise StatusVaultError(
                        f"CRD {name} did not become Established within {self.establish_timeout:.0f}s"
                    )
                time.sleep(0.2)
        # a CRD's name is <plural>.<group>: the qualified name of the resource it defines
        pending = plan.resources(exclude=Category.CRD) & set(names)
        while True:
            live = self.discover()
            if all(live.by_qualified(q) is not None for q in pending):
                break
            if time.monotonic() > deadline:
                raise StatusVaultError("restored CRDs are Established but not yet served by discovery")
            time.sleep(0.3)
        plan.retarget(live)
        return live


class _Run:
    """State of one restore run: results, the old->new UID map, the worker pool."""

    def __init__(
        self,
        engine: RestoreEngine,
        reader: ArchiveReader,
        plan: RestorePlan,
        opts: RestoreOptions,
        report: RestoreReport,
    ):
        self.engine = engine
        self.plan = plan
        self.client = engine.client
        self.reader = reader
        self.opts = opts
        self.report = report
        self.server_dry = opts.dry_run == "server"
        self.owners = OwnerResolver(engine.client, engine.discovery, plan.learned_uids())
        self.writer = ObjectWriter(
            engine.client, self.server_dry, opts.existing_policy, plan.manager, plan.was_created, plan.started
        )
        self.lock = threading.Lock()
        self.crds_written: set[str] = set()
        self.new_namespaces: set[str] = set()

    def record(self, result: ItemResult, item: PlanItem) -> None:
        if not result.failed and not result.lacks_status and self.opts.dry_run == "none":
            self.plan.mark_done(item)  # a resumed run leaves it alone
        with self.lock:
            self.report.add(result)
            self.engine.progress.advance(1)
            if result.resource == CRD_QUALIFIED and result.outcome in (Outcome.CREATED, Outcome.UPDATED):
                self.crds_written.add(result.name)
        if result.failed:
            log.warning("%s: %s (%s)", result.display, result.outcome, result.message or result.status)

    def wave(self, items: Iterator[PlanItem]) -> None:
        todo = self._to_write(items)
        if self.opts.dry_run == "client":  # previews are read-only GETs, run in order so the plan reads in order
            self._walk(todo, lambda item, data: self.record(self.restore_one(item, data), item))
            return
        slots = threading.BoundedSemaphore(self.engine.parallel * 4)  # objects in flight stay bounded
        with ThreadPoolExecutor(self.engine.parallel, thread_name_prefix="restore") as pool:

            def submit(item: PlanItem, data: bytes | None) -> None:
                slots.acquire()
                fut: Future[ItemResult] = pool.submit(self.restore_one, item, data)
                fut.add_done_callback(lambda f: self._done(slots, f, item))

            try:
                self._walk(todo, submit)
            except BaseException:
                pool.shutdown(wait=True, cancel_futures=True)
                raise

    def _walk(self, todo: Iterator[PlanItem], handle: Callable[[PlanItem, bytes | None], None]) -> None:
        """Hand each item its object's bytes: the items the plan added first (None), then the archive walked
        once, in step with the items (both are in archive order), so no set of paths is held."""
        nxt = next(todo, None)
        while nxt is not None and not nxt.in_archive:
            self._check_cancel()
            handle(nxt, None)
            nxt = next(todo, None)
        if nxt is None:
            return

        def wanted(path: str) -> bool:
            return nxt is not None and nxt.path == path

        for _, data in self.reader.objects(wanted):
            assert nxt is not None
            self._check_cancel()
            handle(nxt, data)
            nxt = next(todo, None)
            if nxt is None:  # the rest of the archive belongs to later waves (planning checked all of it)
                return

    def _to_write(self, items: Iterator[PlanItem]) -> Iterator[PlanItem]:
        """The items to send; the others are reported as they go by."""
        for item in items:
            if self.opts.dry_run == "client":
                if item.in_archive and item.action in (Action.UPDATE, Action.SKIP_EXISTS):
                    yield item  # read from the archive, to show how the live object differs
                else:
                    self.record(_client_dry_run(item), item)
            elif self.server_dry and self._untestable(item):
                note = "not sent: depends on a namespace or CRD this restore creates"
                self.record(_client_dry_run(item, note), item)
            elif item.action in (Action.CREATE, Action.UPDATE):
                yield item
            else:
                self.record(_not_attempted(item), item)

    def _check_cancel(self) -> None:
        if self.engine.cancel is not None and self.engine.cancel.is_set():
            raise StatusVaultError("cancelled: this process no longer holds the right to restore (its Lease was lost)")

    def _untestable(self, item: PlanItem) -> bool:
        """In a server dry run, objects in namespaces or of CRDs that the run would create cannot be sent."""
        if item.category == Category.CRD or item.action != Action.CREATE:
            return False
        unserved = self.owners.discovery.by_qualified(item.rt.qualified) is None
        return unserved or (item.rt.namespaced and item.namespace in self.new_namespaces)

    def _done(self, slots: threading.BoundedSemaphore, fut: Future[ItemResult], item: PlanItem) -> None:
        slots.release()
        if not fut.cancelled():
            self.record(fut.result(), item)

    def restore_one(self, item: PlanItem, data: bytes | None) -> ItemResult:
        obj: KubeObject = (
            orjson.loads(data)
            if data is not None
            else {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": item.name}}
        )
        if self.opts.dry_run == "client":
            return self._preview(item, obj)
        result = ItemResult(
            item.rt.qualified,
            item.namespace,
            item.name,
            Outcome.FAILED,
            StatusOutcome.NOT_WRITTEN,
            old_uid=(obj.get("metadata") or {}).get("uid", ""),
            wanted=item.status_mode.wanted,
        )
        try:
            self._restore(item, obj, result)
        except StatusVaultError as e:
            result.message = str(e)
        except Exception as e:  # one object's surprise must not end the run
            log.debug("unexpected error restoring %s", item.display, exc_info=True)
            result.message = f"{type(e).__name__}: {e}"
        return result

    def _restore(self, item: PlanItem, obj: KubeObject, result: ItemResult) -> None:
        saved_status = obj.get("status")
        rt = self._request_type(item, obj)
        mode = item.status_mode  # subresources are per version: decide on the version written to
        if mode.wanted:
            mode = StatusMode.SUBRESOURCE if rt.has_status else StatusMode.IN_BODY
        body = self._body(item, obj, rt, mode)
        notes = self._remap_owners(item, body)
        if item.action == Action.CREATE:
            live, outcome = self.writer.create(rt, item, body)
            if outcome == Outcome.CREATED:
                self.plan.mark_created(item)  # a resumed run will know the object is its own
        else:
            live, outcome = self.writer.update(rt, item, body)
        if live is None:
            result.outcome = Outcome.SKIPPED
            if result.wanted:  # it did not exist when planned: someone else created it during the restore
                result.message = SOMEONE_ELSE
            else:
                result.notes = (*notes, "already exists (policy none)")
            return
        result.outcome = outcome
        meta = live.get("metadata") or {}
        result.new_uid = meta.get("uid", "")
        if item.old_uid and result.new_uid and not self.server_dry:  # an owner of something still to come
            self.owners.learn(item.old_uid, result.new_uid)
            self.plan.learn_uid(item.old_uid, result.new_uid)
        notes += _generation_notes(saved_status, meta.get("generation"))
        result.notes = tuple(notes)
        try:
            result.status = self.writer.status(rt, item, mode, live, saved_status, outcome)
        except StatusVaultError as e:  # the object is there, its status is not: a failure, never a warning
            result.status, result.message = StatusOutcome.FAILED, str(e)
            return
        if result.status == StatusOutcome.MISMATCH:
            result.message = "the server changed the restored status (pruned or defaulted fields?)"

    def _preview(self, item: PlanItem, obj: KubeObject) -> ItemResult:
        """A client dry run of an object that exists: the planned outcome, and how the live one differs."""
        result = _client_dry_run(item)
        try:
            rt = self._request_type(item, obj)
            body = self._body(item, obj, rt, StatusMode.NONE)
            result.notes = (*result.notes, *self._remap_owners(item, body))
            live = self.client.get(rt, item.namespace or None, item.name)
        except StatusVaultError as e:
            result.notes = (*result.notes, f"not compared with the live object: {e}")
            return result
        if live is not None:
            saved = obj["status"] if item.status_mode.wanted and "status" in obj else ABSENT
            result.diff = tuple(restore_diff(live, body, saved))
        return result

    def _body(self, item: PlanItem, obj: KubeObject, rt: ResourceType, mode: StatusMode) -> KubeObject:
        """What is sent for the object: sanitised, in the version and namespace written (owners: _remap_owners)."""
        body = sanitize(obj, keep_status=mode == StatusMode.IN_BODY)
        body["apiVersion"] = rt.api_version
        if rt.namespaced:
            body["metadata"]["namespace"] = item.namespace
        return body

    def _request_type(self, item: PlanItem, obj: KubeObject) -> ResourceType:
        """The archived apiVersion when still served, else the preferred version."""
        group, _, version = str(obj.get("apiVersion", "")).rpartition("/")
        exact = self.owners.find_type(group, version, str(obj.get("kind", "")))
        return exact if exact is not None and exact.qualified == item.rt.qualified else item.rt

    def _remap_owners(self, item: PlanItem, body: KubeObject) -> list[str]:
        refs = body["metadata"].get("ownerReferences")
        if not refs:
            return []
        kept, dropped = remap_owner_refs(refs, lambda ref: self.owners.resolve(ref, item.namespace))
        if kept:
            body["metadata"]["ownerReferences"] = kept
        else:
            body["metadata"].pop("ownerReferences")
        notes = [f"ownerReference to {r.get('kind')} {r.get('name')} dropped: owner not found" for r in dropped]
        for note in notes:
            log.warning("%s: %s", item.display, note)
        return notes


def _generation_notes(status: Any, generation: Any) -> list[str]:
    if not isinstance(status, dict) or "observedGeneration" not in status or generation is None:
        return []
    observed = status["observedGeneration"]
    if observed == generation:
        return []
    return [f"{GENERATION_NOTE} is {observed} but the restored object's generation is {generation}"]


def _not_attempted(item: PlanItem) -> ItemResult:
    wanted = item.status_mode.wanted
    if item.action == Action.SKIP_EXISTS:
        status = StatusOutcome.KEPT if wanted else _STATUS_NOT_WRITTEN.get(item.status_mode, StatusOutcome.NOT_NEEDED)
        outcome, message, wanted = Outcome.SKIPPED, "already exists (policy none)", False
    elif item.action == Action.SKIP_TERMINATING:  # not restored by design, as Velero does
        outcome, status, message, wanted = (
            Outcome.SKIPPED,
            StatusOutcome.NOT_NEEDED,
            "was being deleted when backed up",
            False,
        )
    else:  # Action.UNAVAILABLE
        outcome, status = Outcome.FAILED, StatusOutcome.NOT_WRITTEN
        message = f"{item.rt.qualified} is not served by this cluster and the backup has no CRD for it"
    return ItemResult(
        item.rt.qualified,
        item.namespace,
        item.name,
        outcome,
        status,
        message=message if outcome == Outcome.FAILED else "",
        notes=(message,) if outcome != Outcome.FAILED else (),
        old_uid=item.old_uid,
        wanted=wanted,
    )


_STATUS_NOT_WRITTEN = {StatusMode.LEFT_OUT: StatusOutcome.LEFT_OUT, StatusMode.NONE: StatusOutcome.NOT_NEEDED}


def _client_dry_run(item: PlanItem, note: str = "") -> ItemResult:
    if item.action in (Action.CREATE, Action.UPDATE):
        outcome = Outcome.WOULD_CREATE if item.action == Action.CREATE else Outcome.WOULD_UPDATE
        status = {
            StatusMode.NONE: StatusOutcome.NOT_NEEDED,
            StatusMode.LEFT_OUT: StatusOutcome.LEFT_OUT,
            StatusMode.IN_BODY: StatusOutcome.IN_BODY,
            StatusMode.SUBRESOURCE: StatusOutcome.WOULD_WRITE,
        }[item.status_mode]
        notes = (note,) if note else ()
        return ItemResult(
            item.rt.qualified,
            item.namespace,
            item.name,
            outcome,
            status,
            notes=notes,
            old_uid=item.old_uid,
            wanted=item.status_mode.wanted,
        )
    return _not_attempted(item)
