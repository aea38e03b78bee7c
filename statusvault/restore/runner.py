"""Restore a named backup from a store: fetch and check it, plan (or resume), fence operators, execute."""

from __future__ import annotations

import dataclasses
import logging
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

from statusvault.archive import ArchiveReader, file_sha256, signing
from statusvault.archive.envelope import WRAPPINGS, Keyring, Keys
from statusvault.archive.format import summary_objects, uncompressed_bound
from statusvault.errors import ArchiveError, ConfigError, ExitStatus
from statusvault.kube.api import KubeApi
from statusvault.kube.discovery import Discovery
from statusvault.model import DryRun, ResourceType
from statusvault.processes import WorkerSettings
from statusvault.restore.core.plan import RestorePlan
from statusvault.restore.core.servedtypes import ServedTypes
from statusvault.restore.core.settle import default_settle
from statusvault.restore.options import PARALLEL, FenceMode, RestoreOptions
from statusvault.restore.planning.build import (
    Sink,
    build_plan,
    dependency_index,
    manifest_types,
    resolve_resource_options,
)
from statusvault.restore.planning.existence import ExistenceIndex
from statusvault.restore.quiet.fenceread import read_fence_plan
from statusvault.restore.quiet.fencing import FenceAction, FencePlan
from statusvault.restore.quiet.scaledown import ReplicaLedger, ScaleDown, Workload, resolve_workloads
from statusvault.restore.quiet.unpause import release_left
from statusvault.restore.results.audit import audit
from statusvault.restore.results.report import RestoreReport
from statusvault.restore.results.verdict import RunOutcome, Verdict, verdict
from statusvault.restore.running.engine import EngineSettings, RestoreEngine
from statusvault.restore.running.state import RestoreState, earlier_manager, finish, restore_state, state_key
from statusvault.runtime.killpoints import kill_point
from statusvault.runtime.progress import NullProgress, Progress
from statusvault.storage.base import ObjectStore
from statusvault.store.backups import BackupStore
from statusvault.store.opening import readable_archive

log = logging.getLogger(__name__)


# the object files' bytes the first read keeps for the waves, which then take them from memory instead of reading the
# archive again, once per wave (10,000 objects of 1.7 KB: 17 MB; about 30 us an object less); a larger archive is read
# again, wave by wave (docs/development/architecture.md, *How often a restore reads the archive*)
KEPT_FOR_THE_WAVES = 32 << 20


def _kept_for_the_waves(reader: ArchiveReader, stream: bool) -> int:
    """What the first read may keep: nothing for a streamed restore, nor when the summary manifest says the object
    files hold more (a large archive is never kept in part, then dropped: planning a million objects stays flat);
    a summary without the figure leaves it to the read, which stops keeping at the bound."""
    held = uncompressed_bound(reader.summary or {})
    return 0 if stream or (held is not None and held > KEPT_FOR_THE_WAVES) else KEPT_FOR_THE_WAVES


@dataclasses.dataclass(kw_only=True)
class RestoreRequest:
    """One restore, as the CLI or a restore intent asks for it."""

    store: ObjectStore
    backup: str
    options: RestoreOptions = dataclasses.field(default_factory=RestoreOptions)
    state_dir: Path | None = None  # None: no journal, the restore cannot be resumed
    restart: bool = False  # discard an unfinished earlier run's state
    # write as the archive is read (running/streamed.py) when nothing needs the plan first; None: when the backup
    # is authenticated (encrypted, or signed and verified) and holds more than STREAM_ABOVE objects (streamable())
    stream: bool | None = None
    key: Keys = None  # key files and KMS keys, to decrypt an encrypted backup; verification keys, for a signed one
    parallel: int = PARALLEL  # threads (per process)
    workers: WorkerSettings | None = None  # worker processes for large waves
    progress: Progress = dataclasses.field(default_factory=NullProgress)
    cancel: threading.Event | None = None  # set from outside (a lost Lease): stop starting objects
    unpause: bool = False  # statusvault unpause: finish an earlier restore and release what it kept paused
    # Runs sharing a lineage share their state whatever the backup: restore WATCH --at latest, whose moment (and so
    # its backup) moves on between a killed run and its re-run. See restore_state.
    lineage: str = ""
    settle: float = dataclasses.field(
        default_factory=default_settle
    )  # restore/core/settle.py: wait, then look; 0: never
    # --strict: what the server did not keep of what was sent is short, so the state is kept (and the same command
    # judges it again from the cluster) until the audit finds it kept
    strict: bool = False


@contextmanager
def open_backup(store: ObjectStore, name: str, key: Keys = None) -> Iterator[ArchiveReader]:
    """A reader over the backup's archive after checking it is complete and its checksum matches (decrypted
    with key when the backup is encrypted, its signature checked when verification keys are given)."""
    manifest = BackupStore(store).manifest(name)
    with readable_archive(store, name, manifest, key) as path:
        stored = (manifest.get("archive") or {}).get("sha256") or file_sha256(path)
        reader = ArchiveReader(path, sha256=stored, summary=manifest)  # its totals bound the first read
        encryption = manifest.get("encryption")
        if encryption and WRAPPINGS not in encryption and reader.head().get("name") != name:
            # sealed with a key file itself (before envelopes): the authenticated inner name says whose it is; an
            # envelope's wrapped data key is bound to the name already, and leaves the archive unread to stream
            raise ArchiveError(
                f"the encrypted archive stored as {name!r} belongs to backup {reader.head().get('name')!r}"
            )
        signed = bool(Keyring.of(key).verifiers) and manifest.get(signing.FIELD) is not None  # else it was refused
        reader.authenticated = bool(encryption) or signed
        yield reader


def run_restore(client: KubeApi, discover: Callable[[bool], Discovery], req: RestoreRequest) -> RestoreReport:
    """Fetch and check the backup, plan (or resume), fence the controllers asked for, and restore.

    discover(refresh) gives the cluster's resource types; refresh=True re-reads them after CRDs."""
    opts = req.options
    if opts.fence == FenceMode.REPORT:  # a plan to read, never a restore: fence_report() gives it
        raise ConfigError("fence report plans the fencing and writes nothing: ask for the plan (fence_report), or "
                          "restore with fence auto, best-effort or none")  # fmt: skip
    origin = time.monotonic()
    workloads = resolve_workloads(opts.scale_down, discover(False))  # a bad name fails before anything
    scaler = ScaleDown(client)
    for w in workloads:
        scaler.get(w)
    with open_backup(req.store, req.backup, req.key) as reader:
        req, state_id = _resolved(client, discover(False), reader, req)
        opts = req.options
        planner = _planner(client, discover(False), reader, req)
        keep = opts.dry_run == DryRun.NONE
        stream = streamable(req, reader)
        reader.keep = _kept_for_the_waves(reader, stream)  # a resumed run's first wave keeps them too
        with restore_state(
            req.state_dir, req.backup, state_id, planner, keep, req.restart, req.unpause, stream
        ) as state:
            earlier: list[Workload] = []
            if keep:
                scaler.ledger = ReplicaLedger(state.journal, req.store, state_id)
                workloads, earlier = _with_journalled(workloads, scaler, discover(False))
            if state.plan is None:
                engine = _engine(client, discover, req, origin)
                planned = time.monotonic() - origin  # streamed: what is left before the first object is read
                log.info(
                    "restoring as the archive is read (streamed%s): owned objects follow in depth waves",
                    "" if req.stream else f", {summary_objects(reader.summary or {})} objects; --no-stream plans first",
                )
                with scaler.scaled_down(workloads):
                    try:
                        report, state.plan = engine.stream(
                            reader, _streamed(planner, state), state.journal, opts, req.backup
                        )
                    except ConfigError:  # a selection that matched nothing: held back, nothing was sent
                        if not state.journal.resumed:
                            finish(state)  # no journal left behind, as when planning first
                        raise
                    finished = _audited(client, discover, req, report, state)
                report.timings["planned"] = planned
                _scaled_back(report, scaler, earlier)
                if finished:
                    finish(state)
                return report
            fence = read_fence_plan(client, state.plan, opts, reader) if opts.fence != FenceMode.NONE else None
            if fence is not None:
                kill_point("restore.fence-planned")
            opts, workloads = _fenced(opts, workloads, fence, discover(False))
            planned = time.monotonic() - origin
            engine = _engine(client, discover, req, origin)
            if opts.dry_run != DryRun.NONE or not workloads:
                report = engine.run(reader, state.plan, state.journal, opts)
                finished = _audited(client, discover, req, report, state)
            elif not state.plan.pending(state.journal.path):  # all restored; the run died before scaling back
                for w in workloads:
                    scaler.scale_back(w)
                report = engine.run(reader, state.plan, state.journal, opts)
                finished = _audited(client, discover, req, report, state)
            else:
                with scaler.scaled_down(workloads):
                    report = engine.run(reader, state.plan, state.journal, opts)
                    finished = _audited(client, discover, req, report, state)
            report.timings["planned"] = planned
            report.fence = fence.lines() if fence is not None else []
            _scaled_back(report, scaler, earlier)
            if finished:
                finish(state)
            return report


# Objects above which a restore of an encrypted backup streams unless told not to: planning first costs ~0.05 ms
# per object after the ~0.4 s start-up (docs/development/benchmarks.md), so up to here the first write still comes
# within about 1.5 s with the whole archive checked before it; above it the first write would wait ever longer (32-37 s
# at a million).
STREAM_ABOVE = 20_000


def streamable(req: RestoreRequest, reader: ArchiveReader) -> bool:
    """Whether the restore writes as it reads the archive (restore/running/streamed.py) instead of planning first.

    Asked for (--stream); or by default when the backup is authenticated and its summary manifest counts more than
    STREAM_ABOVE objects. Only an authenticated archive is streamed unasked: one encrypted and opened by a key given
    (decrypting it authenticated every byte), or one whose signed manifest verified with a key given (it names the
    archive's SHA-256, checked before reading: opening.readable_archive), so it holds what a key holder wrote. An
    unauthenticated archive's digests can be recomputed by whoever can write the bucket, and so can its object
    count: planning first keeps such an archive, whatever it claims, from writing anything before all of it is
    checked (reliability.md, A1).
    And in every case: a real restore of an archive not read yet, with the summary's types and totals, and
    nothing that needs the whole plan before the first write: a fence reads it, a dry run reports it, --order's
    groups and gates order every object. (A selection streams: what comes before its first match is held, so
    one that matches nothing still fails before any write.)"""
    opts, summary = req.options, reader.summary or {}
    needs_plan = opts.dry_run != DryRun.NONE or opts.fence != FenceMode.NONE or opts.order is not None or req.unpause
    deps = summary.get("dependencies")  # written before what refers to them (a malformed one: refused in planning)
    needs_plan |= isinstance(deps, dict) and bool(deps.get("edges"))
    by_default = reader.authenticated and summary_objects(summary) > STREAM_ABOVE
    wanted = req.stream if req.stream is not None else by_default
    planned_first = not wanted or needs_plan
    return not planned_first and reader.unread and isinstance(summary.get("resources"), dict)


def _streamed(planner: Callable[..., RestorePlan], state: RestoreState) -> Callable[[Sink], RestorePlan]:
    def build(sink: Sink) -> RestorePlan:
        return planner(state.journal.manager, state.plan_path, sink)

    return build


def fence_report(client: KubeApi, discover: Callable[[bool], Discovery], req: RestoreRequest) -> FencePlan:
    """The fencing a restore would do (--fence report): planned from scratch, nothing kept or written."""
    with open_backup(req.store, req.backup, req.key) as reader:
        req, state_id = _resolved(client, discover(False), reader, req)
        planner = _planner(client, discover(False), reader, req)
        with restore_state(None, req.backup, state_id, planner, keep=False) as state:
            assert state.plan is not None  # planned first: nothing streams
            return read_fence_plan(client, state.plan, req.options, reader)


def _with_journalled(
    workloads: list[Workload], scaler: ScaleDown, discovery: Discovery
) -> tuple[list[Workload], list[Workload]]:
    """The workloads to scale down, with those an earlier run of this restore scaled to 0 and did not scale back (its
    journal's, or the store's from a run on another machine): a re-run is the same restore, so it keeps them at 0
    until its end and then scales them back, whatever its own options say (--fence or --scale-down left out). Also
    returns those earlier ones. One only the store names is taken only while it is at 0: a store's writer cannot
    make a restore scale up a workload that runs."""
    seen = {w.spec for w in workloads}
    earlier = []
    for spec, journalled in scaler.ledger.left_down().items():
        try:
            [w] = resolve_workloads((spec,), discovery)
        except ConfigError as e:
            log.warning("an earlier run of this restore scaled %s to 0; it cannot be found now (%s)", spec, e)
            continue
        if w.spec not in seen and (journalled or scaler.at_zero(w)):
            earlier.append(w)
    return [*workloads, *earlier], earlier


def _audited(
    client: KubeApi,
    discover: Callable[[bool], Discovery],
    req: RestoreRequest,
    report: RestoreReport,
    state: RestoreState,
) -> bool:
    """Once the cluster settles, the cluster read back (restore/results/audit.py): the verdict counts what it holds,
    whatever this run or an earlier one of the same restore did. A fenced restore reads it back before its
    operators are scaled back: what they write after that is their own work, not a race with the restore. Returns
    whether the state may be finished: only when nothing is short. Not after a dry run or a run that stopped early
    (its verdict says so; the journal resumes it)."""
    report.server_away = _server_away(client)
    if report.dry_run != DryRun.NONE or report.interrupted or report.aborted or state.plan is None:
        return False
    kill_point("restore.looking-again")  # every write done and journalled, the state not finished yet
    if req.settle > 0:
        (req.cancel or threading.Event()).wait(req.settle)  # stopped meanwhile: the writes are done, read it now
    report.audit = found = audit(client, _Served(discover), state.plan, state.journal, req.strict)
    report.overwritten = found.overwritten
    if found.left_paused:
        _release_left(client, req, report, found.left_paused, found.short > 0, state.journal.manager)
    return (
        report.work_complete
        and not found.short
        and not report.left_paused
        and not (req.strict and found.server_changed)
    )


class _Served:
    """The cluster's types for the audit: the discovery the run has (refreshed after the CRDs it restored), read
    again at most once, for a type it does not know (a full discovery is hundreds of requests on a busy cluster)."""

    def __init__(self, discover: Callable[[bool], Discovery]):
        self.discover, self.current, self.refreshed = discover, discover(False), False

    def by_qualified(self, qualified: str) -> ResourceType | None:
        rt = self.current.by_qualified(qualified)
        if rt is None and not self.refreshed:
            self.current, self.refreshed = self.discover(True), True
            rt = self.current.by_qualified(qualified)
        return rt


def _release_left(
    client: KubeApi,
    req: RestoreRequest,
    report: RestoreReport,
    left: list[tuple[ResourceType, str, str]],
    short: bool,
    manager: str,
) -> None:
    """Objects an earlier run of this restore paused and left so (killed, its state elsewhere): unpaused once every
    object of the restore has its saved status, as its own unpause would have; until then they count as paused."""
    if short or not report.work_complete:
        report.left_paused += len(left)
        return
    keep = () if req.unpause else req.options.pause.keep_paused
    done = release_left(client, left, keep, manager, req.parallel)
    report.unpaused += done.unpaused
    report.unpause_failures += done.failed
    report.left_paused += done.kept


def _server_away(client: KubeApi) -> float:
    """The longest this process's requests waited for an unavailable API server (kube/transport.py's stats)."""
    stats = getattr(getattr(client, "transport", None), "stats", None)
    return float(getattr(stats, "unavailable_seconds", 0.0))


def _scaled_back(report: RestoreReport, scaler: ScaleDown, earlier: list[Workload]) -> None:
    """The report names the workloads an earlier run fenced and this one scaled back, and counts any it could
    not scale back."""
    back = [w for w in earlier if not any(f.startswith(f"{w.display}:") for f in scaler.failed)]
    report.fence += [f"scaled back (fenced by an earlier run of this restore): {w.display}" for w in back]
    report.not_scaled_back = list(scaler.failed)


def _fenced(
    opts: RestoreOptions, workloads: list[Workload], fence: FencePlan | None, discovery: Discovery
) -> tuple[RestoreOptions, list[Workload]]:
    """The options and the workloads to scale down once the fence plan is added: its paused resources get their
    profile's marker, its scaled workloads join --scale-down's (each once)."""
    if fence is None:
        return opts, workloads
    profiled = tuple(sorted({r for c in fence.acting(FenceAction.PAUSE) for r in c.resources}))
    if profiled:
        opts = dataclasses.replace(opts, pause=dataclasses.replace(opts.pause, profiled=profiled))
    seen = {(w.rt.qualified, w.namespace, w.name) for w in workloads}
    for w in resolve_workloads(fence.scaled, discovery):
        if (w.rt.qualified, w.namespace, w.name) not in seen:
            seen.add((w.rt.qualified, w.namespace, w.name))
            workloads = [*workloads, w]
    return opts, workloads


def _engine(
    client: KubeApi, discover: Callable[[bool], Discovery], req: RestoreRequest, origin: float
) -> RestoreEngine:
    served = ServedTypes(discover(False), lambda: discover(True))
    settings = EngineSettings(
        req.parallel,
        progress=req.progress,
        cancel=req.cancel,
        release_kept=req.unpause,
        workers=req.workers,
        origin=origin,
    )
    return RestoreEngine(client, served, settings)


def _resolved(
    client: KubeApi, discovery: Discovery, reader: ArchiveReader, req: RestoreRequest
) -> tuple[RestoreRequest, str]:
    """The request with its resource options read against the backup and the cluster, and its state's key."""
    summary = reader.summary if isinstance((reader.summary or {}).get("resources"), dict) else None
    head = summary or reader.head()
    opts = resolve_resource_options(req.options, manifest_types(head), discovery)
    content = () if req.lineage else (reader.sha256,)
    state_id = state_key(req.lineage or req.backup, (req.store.url, *content, client.server), opts)
    if opts.mapping:
        deps = dependency_index(head)
        if deps is not None and deps.fields:
            opts = dataclasses.replace(opts, references={k: tuple(v) for k, v in deps.fields.items()})
    return dataclasses.replace(req, options=opts), state_id


def unfinished_manager(client: KubeApi, discover: Callable[[bool], Discovery], req: RestoreRequest) -> str:
    """The field manager of an unfinished run of this restore ("" when there is none): what it created is its own."""
    with open_backup(req.store, req.backup, req.key) as reader:
        _, state_id = _resolved(client, discover(False), reader, req)
    return earlier_manager(req.state_dir, state_id)


def _planner(
    client: KubeApi, discovery: Discovery, reader: ArchiveReader, req: RestoreRequest
) -> Callable[..., RestorePlan]:
    def plan(manager: str, path: Path | None, sink: Sink | None = None) -> RestorePlan:
        exists = ExistenceIndex(client, manager)
        return build_plan(
            reader,
            options=req.options,
            live=discovery,
            exists=exists,
            backup=req.backup,
            path=path,
            summary=reader.summary,
            sink=sink,
        )

    return plan


@dataclasses.dataclass(frozen=True)
class RestoreResult:
    """A restore's report and its one verdict (restore/results/verdict.py), as the CLI's exit status reads it."""

    report: RestoreReport
    verdict: Verdict

    @property
    def succeeded(self) -> bool:
        return self.verdict.outcome is RunOutcome.DONE

    @property
    def exit_status(self) -> ExitStatus:
        return self.verdict.exit_status


def restore_with(
    request: RestoreRequest, *, client: KubeApi, discover: Callable[[bool], Discovery], strict: bool = False
) -> RestoreResult:
    """Run a typed restore request and judge it: the report and its one verdict (`strict`: what the server changed
    or warned about makes the run partial, as `--strict` does). Every front end (the CLI, the API, the controller,
    `move`) runs its restores through this."""
    strict = strict or request.strict
    report = run_restore(client, discover, dataclasses.replace(request, strict=strict))
    return RestoreResult(report, verdict(report, strict))
