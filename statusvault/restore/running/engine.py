"""Execute a RestorePlan: wave by wave, each object created (pass 1) then given its saved status (pass 2);
what is done goes to the journal, every result to the report."""

from __future__ import annotations

import dataclasses
import functools
import logging
import threading
import time
from collections.abc import Callable
from typing import Any

from statusvault.archive import ArchiveReader
from statusvault.archive.format import summary_objects
from statusvault.errors import ArchiveError, ConfigError, Interrupted, StatusVaultError
from statusvault.kube.api import KubeApi
from statusvault.kube.discovery import established
from statusvault.model import DryRun
from statusvault.processes import WorkerSettings
from statusvault.restore.core.journal import Journal
from statusvault.restore.core.plan import Action, Category, PlanItem, RestorePlan
from statusvault.restore.core.servedtypes import ServedTypes
from statusvault.restore.options import RestoreOptions
from statusvault.restore.ordering.gates import GateWaiter, GroupGates
from statusvault.restore.planning.build import Sink
from statusvault.restore.quiet.unpause import unpause_all
from statusvault.restore.results.report import ItemResult, Outcome, RestoreReport
from statusvault.restore.running.objects import ObjectRestorer
from statusvault.restore.running.streamed import StreamWriter
from statusvault.restore.running.waves import WaveRunner
from statusvault.restore.running.workers import WaveWorkers
from statusvault.runtime.progress import NullProgress, Progress
from statusvault.vocabulary.kinds import CRD_QUALIFIED, CRDS

log = logging.getLogger(__name__)


@dataclasses.dataclass
class EngineSettings:
    parallel: int = 8
    establish_timeout: float = 60.0  # seconds for restored CRDs to become Established and served
    progress: Progress = dataclasses.field(default_factory=NullProgress)
    cancel: threading.Event | None = None  # set from outside (a lost Lease): no new object is started
    release_kept: bool = False  # unpause what --keep-paused left paused too (statusvault unpause)
    workers: WorkerSettings | None = None  # worker processes for large waves (None or 1 process: threads only)
    origin: float = dataclasses.field(default_factory=time.monotonic)  # when the restore began (timings)


class RestoreEngine:
    def __init__(self, client: KubeApi, served: ServedTypes, settings: EngineSettings | None = None):
        self.client = client
        self.served = served
        self.settings = settings or EngineSettings()

    def run(self, reader: ArchiveReader, plan: RestorePlan, journal: Journal, opts: RestoreOptions) -> RestoreReport:
        """Restore every item the journal has not seen done. Per-object problems go to the report; a
        problem of the whole run (a CRD never served, a lost Lease, Ctrl-C) stops it with the report kept."""
        run = self._start(plan.backup, plan.warnings, journal, opts, plan.pending(journal.path))
        self._guarded(run, lambda: self._waves(reader, plan, run))
        return self._end(plan, run)

    def stream(
        self,
        reader: ArchiveReader,
        build: Callable[[Sink], RestorePlan],
        journal: Journal,
        opts: RestoreOptions,
        backup: str,
    ) -> tuple[RestoreReport, RestorePlan | None]:
        """A streamed restore (streamed.py): build(sink) plans while the sink writes each unowned object;
        then the owned ones in depth waves. The plan comes back for the caller to keep (None: never sealed)."""
        total = summary_objects(reader.summary or {})
        run = self._start(backup, [], journal, opts, total)
        built: list[RestorePlan] = []

        def body() -> None:
            writer = StreamWriter(run.waves, journal, self.served, lambda: self._after_crds(run), run.page)
            try:
                plan = build(writer)
            except BaseException:
                writer.abandon()
                raise
            built.append(plan)
            writer.close()
            journal.flush()
            run.report.warnings += plan.warnings
            plan.deferred = True  # what the stream wrote is not written again by this run
            self._waves(reader, plan, run)

        # an archive that fails its checks mid-way fails the restore, as does a selection that matched nothing
        self._guarded(run, body, (ArchiveError, ConfigError))
        if not built:
            run.report.left_paused = journal.paused_count()
            return run.report, None
        built[0].deferred = False
        return self._end(built[0], run), built[0]

    def _start(self, backup: str, warnings: list[str], journal: Journal, opts: RestoreOptions, total: int) -> _Run:
        report = RestoreReport(backup, opts.dry_run, warnings=list(warnings))
        report.resumed = journal.resumed
        run = _Run(self, journal, opts, report)
        self.settings.progress.start("restore", total=total)
        return run

    def _waves(self, reader: ArchiveReader, plan: RestorePlan, run: _Run) -> None:
        """The plan's waves in order (--order group, category, owner depth), each group's gate after its waves."""
        run.waves.reader = reader
        run.waves.new_namespaces = plan.names(Category.NAMESPACE, Action.CREATE)
        journal, opts, report = run.journal, run.opts, run.report
        waiter = GateWaiter(self.client, self.served.target, self.settings.cancel)
        gates = GroupGates(plan, journal, opts.order, waiter, opts.dry_run)
        gates.unpause = lambda group: self._unpause(plan, journal, opts, report, group)
        report.gates, report.groups = gates.results, _groups(plan, opts)
        report.dependencies = plan.dependencies
        for wave in plan.waves():
            gates.before(wave.group)
            items = (self.served.target(item) for item in plan.items(wave, run.journal.path))
            if not self._wants_processes(wave.size, run.opts):
                run.waves.run(items)
            elif self._explicit():  # --processes N: every wave goes to the processes
                run.waves.run(items, self._pool(run))
            else:  # by default: in threads, moved to processes only once this process is CPU-bound (waves.ScaleUp)
                run.waves.run(items, scale_up=functools.partial(self._pool, run))
            run.journal.flush()
            if wave.category == Category.CRD and run.opts.dry_run == DryRun.NONE:
                self._after_crds(run, plan.resources(exclude=Category.CRD))
        gates.finish()

    def _guarded(
        self, run: _Run, body: Callable[[], None], raised: tuple[type[Exception], ...] | type[Exception] = ()
    ) -> None:
        """Run body; a problem of the whole run ends it with the report kept, saying where it stopped (`raised`:
        the kinds that end it with the error instead)."""
        started = time.monotonic()
        try:
            body()
        except (KeyboardInterrupt, Interrupted):
            run.report.interrupted = True
        except StatusVaultError as e:  # keep what was done: the report says where it stopped
            if isinstance(e, raised):
                raise
            run.report.aborted = str(e)
        finally:
            if run.processes is not None:
                run.processes.close()
            run.journal.flush()
            self.settings.progress.finish()
            run.report.duration = time.monotonic() - started

    def _end(self, plan: RestorePlan, run: _Run) -> RestoreReport:
        report, journal, opts = run.report, run.journal, run.opts
        if opts.dry_run == DryRun.NONE:  # a check, not a guess: what the journal has not seen done
            report.unreached = max(0, plan.pending(journal.path, wanted_status=True) - len(report.lacking_status))
            self._unpause(plan, journal, opts, report)
        return report

    def _wants_processes(self, size: int, opts: RestoreOptions) -> bool:
        spec = self.settings.workers
        usable = spec is not None and spec.processes > 1 and opts.dry_run != DryRun.CLIENT
        return usable and spec is not None and size >= spec.min_wave

    def _explicit(self) -> bool:
        """Whether --processes was given (every wave goes to them), rather than the default."""
        spec = self.settings.workers
        return spec is not None and spec.min_wave == 0

    def _pool(self, run: _Run) -> WaveWorkers:
        """The run's worker processes, started the first time a wave needs them."""
        if run.processes is None:
            spec = self.settings.workers
            assert spec is not None
            log.info("restoring in %d worker processes", spec.processes)
            run.report.processes = spec.processes
            run.processes = WaveWorkers(spec, run.journal.path, run.opts, run.record)
        return run.processes

    def _unpause(
        self, plan: RestorePlan, journal: Journal, opts: RestoreOptions, report: RestoreReport, group: int | None = None
    ) -> None:
        """Only once every object of the restore (before a gate: so far) has its status; otherwise what it paused
        stays paused. group: before its gate, the objects of one --order group."""
        if group is not None and (report.failures or report.lacking_status):
            return
        if group is None and not report.work_complete:
            report.left_paused = len(plan.paused(journal.path))
            return
        keep = () if self.settings.release_kept else opts.pause.keep_paused
        done = unpause_all(self.client, self.served, plan, journal, keep, self.settings.parallel, group)
        report.unpaused += done.unpaused
        report.unpause_failures += done.failed
        if group is None:
            report.left_paused = done.kept

    def _after_crds(self, run: _Run, resources: set[str] | None = None) -> None:
        """Wait until the restored CRDs are Established and served by discovery (those defining `resources`, or
        all written when None: a streamed restore has not read the objects yet)."""
        names = sorted(run.crds_written)
        timeout = self.settings.establish_timeout
        deadline = time.monotonic() + timeout
        for name in names:
            while not established(self.client.get(CRDS, None, name)):
                if time.monotonic() > deadline:
                    raise StatusVaultError(f"CRD {name} did not become Established within {timeout:.0f}s")
                time.sleep(0.2)
        # a CRD's name is <plural>.<group>: the qualified name of the resource it defines
        awaited = set(names) if resources is None else resources & set(names)
        while not all(self.served.rediscover().by_qualified(q) is not None for q in awaited):
            if time.monotonic() > deadline:
                raise StatusVaultError("restored CRDs are Established but not yet served by discovery")
            time.sleep(0.3)


class _Run:
    """What one run collects: the report, the journal's marks, the CRDs it wrote."""

    def __init__(self, engine: RestoreEngine, journal: Journal, opts: RestoreOptions, report: RestoreReport):
        self.engine = engine
        self.journal = journal
        self.opts = opts
        self.report = report
        self.restorer = ObjectRestorer(engine.client, engine.served, journal, opts)
        self.lock = threading.Lock()
        self.crds_written: set[str] = set()
        settings = engine.settings
        self.page = settings.parallel * 4  # a streamed restore's page: what the writers hold in flight
        self.waves = WaveRunner(None, self.restorer, self.record, settings.parallel, set(), settings.cancel)
        self.processes: WaveWorkers | None = None

    def record(self, result: ItemResult, item: PlanItem) -> None:
        if not result.failed and not result.lacks_status and self.opts.dry_run == DryRun.NONE:
            self.journal.mark_done(item, result.status_mark)  # a resumed run leaves it alone
        if result.server_changes and self.opts.dry_run == DryRun.NONE:
            self.journal.mark_changed(item, result.server_changes)  # the audit reads them on the cluster
        with self.lock:
            if not self.report.total:
                self.report.timings["firstResult"] = time.monotonic() - self.engine.settings.origin
            self.report.add(result)
            self.engine.settings.progress.advance(1)
            if result.resource == CRD_QUALIFIED and result.outcome in (Outcome.CREATED, Outcome.UPDATED):
                self.crds_written.add(result.name)
        if result.failed:
            log.warning("%s: %s (%s)", result.display, result.outcome, result.message or result.status)


def _groups(plan: RestorePlan, opts: RestoreOptions) -> list[dict[str, Any]]:
    """--order's groups in order, each with its members' count and its gate (the report's, a dry run's plan)."""
    if opts.order is None:
        return []
    counts = plan.group_counts()
    rows = [{"group": "(named by no group)", "objects": counts.get(0, 0), "gate": ""}]
    for number, g in enumerate(opts.order.groups, 1):
        rows.append({"group": g.name, "objects": counts.get(number, 0), "gate": g.gate.describe() if g.gate else ""})
    return rows
