"""The in-cluster restore controller: reconcile restore-intent ConfigMaps into restores.

Each pass LISTs the intents in one namespace. For each, it compares the intent's digest with its status
ConfigMap: a new desired state (or a failed attempt that is due again) takes the intent's Lease, records
phase InProgress (resourceVersion-guarded), runs the restore (resumable through its journal), records the
outcome, and emits Events on the intent. Failures back off exponentially per intent; run-wide failures
(store or API server down) open a circuit breaker that pauses every intent for a while.
"""

from __future__ import annotations

import contextlib
import dataclasses
import datetime as dt
import functools
import logging
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, Protocol

from statusvault import rfc3339
from statusvault.archive.envelope import Keyring, Keys
from statusvault.archive.signing import Signer, file_key_name
from statusvault.controller.backups import BackupIntent, LockLimits, parse_backup, run_backup
from statusvault.controller.conditions import PENDING, Reason
from statusvault.controller.intent import (
    INTENT_LABEL,
    STATUS_LABEL,
    STATUS_SUFFIX,
    Intent,
    NextStep,
    Phase,
    digest_of,
    next_step,
    parse_intent,
    retry_delay,
)
from statusvault.controller.lease import Lease
from statusvault.controller.restores import BACKUPS, RESTORES, ResourceTarget, parse_restore, spec_digest
from statusvault.controller.runs import Run, mark_without_status, outcome_counts, save_report, watching_for_deletion
from statusvault.controller.schedules import BACKUP_ACCOUNT, SCHEDULES, JobSettings, reconcile_schedule
from statusvault.controller.targets import ConfigMapTarget, Target
from statusvault.errors import (
    ArchiveError,
    BackupNotFoundError,
    ConfigError,
    Forbidden,
    NotFound,
    StatusVaultError,
)
from statusvault.kube.api import KubeApi
from statusvault.kube.discovery import Discovery
from statusvault.model import KubeObject, ResourceType
from statusvault.processes import WorkerSettings
from statusvault.restore.modifiers import Modifiers, load_modifiers
from statusvault.restore.options import RestoreOptions
from statusvault.restore.results.report import RestoreReport
from statusvault.restore.results.verdict import RunOutcome, Verdict
from statusvault.restore.runner import RestoreRequest, restore_with
from statusvault.restore.running.workers import MIN_WAVE, default_processes
from statusvault.runtime.stopping import signalled
from statusvault.storage.base import ObjectStore
from statusvault.velero import backups as velero
from statusvault.vocabulary.kinds import CONFIGMAPS

log = logging.getLogger(__name__)
RESERVED_ACCOUNTS = ("statusvault-controller", BACKUP_ACCOUNT)  # install.py's: never a run's identity
OWN_PROBLEMS = (ConfigError, BackupNotFoundError, ArchiveError)  # one intent's failures, not an outage
REASONS = {  # the Restore's condition reason for each verdict of its run (restore/results/verdict.py)
    RunOutcome.DONE: Reason.COMPLETED,
    RunOutcome.PARTIAL: Reason.PARTIALLY_RESTORED,
    RunOutcome.FAILED: Reason.FAILED,
    RunOutcome.INTERRUPTED: Reason.INTERRUPTED,
}


@dataclasses.dataclass
class Breaker:
    """Opens after `threshold` run-wide failures in a row; while open, no restore starts."""

    threshold: int = 3
    cooldown: float = 300.0
    failures: int = 0
    open_until: float = 0.0

    def allows(self, now: float) -> bool:
        return now >= self.open_until

    def record(self, ok: bool, now: float) -> None:
        self.failures = 0 if ok else self.failures + 1
        if self.failures >= self.threshold:
            self.open_until = now + self.cooldown
            self.failures = 0
            log.error(
                "%d restores in a row failed run-wide: pausing all intents for %.0fs", self.threshold, self.cooldown
            )


class MomentBackup(Protocol):
    """A watch's moment as a temporary backup (watch/pointintime.py: Moment)."""

    @property
    def store(self) -> ObjectStore: ...
    @property
    def name(self) -> str: ...
    @property
    def lineage(self) -> str: ...


Moments = Callable[[ObjectStore, str, str, Keys], contextlib.AbstractContextManager[MomentBackup]]


@dataclasses.dataclass(kw_only=True)
class ControllerConfig:
    """The controller's settings, as `controller run` gives them; each intent brings its own restore options."""

    namespace: str
    holder: str
    state_dir: Path | None
    interval: float = 10.0
    lease_seconds: int = 60
    kubeconfig: str | None = None  # how restore worker processes reach the API server (None: in-cluster,
    context: str | None = None  # or $KUBECONFIG), as the controller does
    log_format: str = ""  # and how they log (the controller's --log-format and --debug)
    debug: bool = False
    job: JobSettings = dataclasses.field(default_factory=JobSettings)  # BackupSchedules' CronJobs
    signer: Signer | None = None  # signs what Backup resources write (archive/signing.py)
    # whom a resource that names no ServiceAccount runs as ("": the controller itself, unless required)
    default_service_account: str = ""
    require_service_account: bool = False  # refuse a resource that names none (and no default is set)
    locks: LockLimits = dataclasses.field(default_factory=LockLimits)  # the Object Lock a Backup may ask for
    # spec.at: a watch's moment as a temporary backup (watch/pointintime.py: moment_of), given by `controller run`
    # (the watch sits above the controller); None: a Restore naming a moment is refused
    moments: Moments | None = None


class Controller:
    def __init__(
        self,
        client: KubeApi,
        discover: Callable[[bool], Discovery],
        store: Callable[[str | None], ObjectStore],
        config: ControllerConfig,
        key: Keys = None,
    ):
        self.key = key  # for encrypted backups, and the keys signed backups must be signed by
        self._impersonated: dict[str, KubeApi] = {}  # clients acting as a resource's ServiceAccount, by user
        self.client = client
        self.discover = discover
        self.store = store
        self.config = config
        self.breaker = Breaker()
        self.stop = threading.Event()
        self._running: threading.Event | None = None  # the stop of the restore under way (its Lease's)

    def terminate(self, signum: int) -> None:
        """The pod is stopping (SIGTERM): no new pass, and the restore under way starts no new write; its writes in
        flight finish, it scales back and records itself as interrupted (the next attempt resumes)."""
        signalled(signum)
        self.stop.set()
        running = self._running
        if running is not None:
            running.set()

    def run_forever(self) -> None:
        log.info("reconciling restore intents in namespace %s every %.0fs", self.config.namespace, self.config.interval)
        while not self.stop.is_set():
            try:
                self.reconcile_all()
            except StatusVaultError as e:  # the API server is unreachable: try again next pass
                log.error("reconcile pass failed: %s", e)
            self.stop.wait(self.config.interval)

    def reconcile_all(self) -> int:
        """One pass over every intent and every Restore; returns how many restores it ran."""
        ran = 0
        sources = (
            (CONFIGMAPS, f"{INTENT_LABEL}=true", self.reconcile),
            (RESTORES, "", self.reconcile_restore),
            (BACKUPS, "", self.reconcile_backup),
            (SCHEDULES, "", self.reconcile_schedule),
        )
        for rt, selector, reconcile in sources:
            for obj in self._listed(rt, selector):
                if self.stop.is_set():
                    return ran
                try:
                    ran += reconcile(obj)
                except StatusVaultError as e:  # this one's API calls failed; the others may still work
                    log.error("%s %s: %s", rt.kind, obj["metadata"]["name"], e)
                except Exception:  # a bug must not stop every other intent
                    log.exception("%s %s: unexpected error", rt.kind, obj["metadata"]["name"])
        return ran

    def _listed(self, rt: ResourceType, selector: str) -> Iterator[KubeObject]:
        try:
            for page in self.client.list_pages(rt, self.config.namespace, selector):
                yield from page
        except (Forbidden, NotFound) as e:
            if rt is CONFIGMAPS:
                raise
            if isinstance(e, NotFound):
                log.debug("the %s CRD is not installed: none is reconciled", rt.kind)
            else:  # installed before the resources existed: intents keep working
                log.warning("may not list %s (re-run `controller install`): none is reconciled", rt.resource)

    def reconcile(self, cm: KubeObject) -> bool:
        """A restore-intent ConfigMap."""
        name = cm["metadata"]["name"]
        status_cm = self.client.get(CONFIGMAPS, self.config.namespace, name + STATUS_SUFFIX)
        if status_cm is not None and (status_cm["metadata"].get("labels") or {}).get(STATUS_LABEL) != name:
            log.error("intent %s: ConfigMap %s-status exists and is not its status (another intent?)", name, name)
            return False
        target = ConfigMapTarget(self.client, self.config.namespace, self.config.holder, cm, status_cm)
        digest = digest_of(dict(cm.get("data") or {}))
        return self._reconcile(target, lambda: parse_intent(cm), digest, "InvalidIntent", self._restore)

    def reconcile_restore(self, obj: KubeObject) -> bool:
        """A Restore resource."""
        target = ResourceTarget(self.client, self.config.holder, obj)
        return self._reconcile(target, lambda: parse_restore(obj), spec_digest(obj), Reason.INVALID_SPEC, self._restore)

    def reconcile_backup(self, obj: KubeObject) -> bool:
        """A Backup resource."""
        target = ResourceTarget(self.client, self.config.holder, obj, BACKUPS)
        parse = functools.partial(parse_backup, obj, self.config.locks)
        return self._reconcile(target, parse, spec_digest(obj), Reason.INVALID_SPEC, self._backup)

    def reconcile_schedule(self, obj: KubeObject) -> bool:
        """A BackupSchedule: its CronJob, which runs the backups (nothing runs here)."""
        c = self.config
        reconcile_schedule(self.client, self.discover(False), obj, c.namespace, c.job, c.locks, c.holder)
        return False

    def _reconcile(
        self, target: Target, parse: Callable[[], Any], digest: str, invalid: str, act: Callable[..., bool]
    ) -> bool:
        """Parse, decide (next_step), take the Lease, and `act(target, parsed, step, lost)`."""
        status = target.status
        try:
            intent = parse()
        except ConfigError as e:
            if status.get("digest") != digest or status.get("phase") != Phase.INVALID:
                log.error("%s is invalid: %s", target.describe(), e)
                changes = {"phase": Phase.INVALID, "digest": digest, "message": str(e), "reason": Reason.INVALID_SPEC}
                target.write(changes)
                target.event("Warning", invalid, str(e))
            return False
        step = next_step(intent.digest, status, dt.datetime.now(dt.UTC))
        if not step.act:
            log.debug("%s: %s", target.describe(), step.reason)
            return False
        if not self.breaker.allows(time.monotonic()):
            log.info("%s waits: the circuit breaker is open", target.describe())
            return False
        c = self.config
        lease = Lease(self.client, c.namespace, target.lease_name, c.holder, c.lease_seconds)
        if not lease.acquire():
            log.info("%s is being restored by another replica", target.describe())
            if isinstance(target, ResourceTarget) and status.get("digest") != intent.digest:
                target.write({"phase": PENDING, "reason": Reason.WAITING_FOR_LEASE, "message": "another replica's"
                              " Lease on it is live"})  # fmt: skip
            return False
        try:
            return act(target, intent, step, lease.lost)
        finally:
            lease.release()

    def _with_modifiers(self, intent: Intent) -> RestoreOptions:
        """The intent's options with its modifiers file, read from its ConfigMap now (ConfigError if bad)."""
        if not intent.modifiers:
            return intent.options
        ns = self.config.namespace
        cm = self.client.get(CONFIGMAPS, ns, intent.modifiers)
        return dataclasses.replace(intent.options, modifiers=modifiers_from(cm, intent.modifiers, ns))

    def _start(self, target: Target, digest: str, backup: str, step: NextStep, verb: str) -> bool:
        """Record InProgress and the Started event; False when the target changed under us."""
        progress = {
            "phase": Phase.IN_PROGRESS,
            "reason": Reason.RESTORING if verb == "Restore" else Reason.BACKING_UP,
            "digest": digest,
            "backup": backup,
            "attempts": str(step.attempt),
            "startedAt": rfc3339.format_seconds(dt.datetime.now(dt.UTC)),
            "holder": self.config.holder,
            "message": f"{verb.lower()} of {backup} running ({step.reason}, attempt {step.attempt})",
        }
        if not target.write(progress, drop=("completedAt", "nextAttemptAt")):
            return False  # changed under us: the next pass sees the new state
        target.event("Normal", f"{verb}Started", progress["message"])
        return True

    def _backup(self, target: Target, intent: BackupIntent, step: NextStep, lost: threading.Event) -> bool:
        if not self._start(target, intent.digest, intent.backup, step, "Backup"):
            return False
        with watching_for_deletion(target, lost):  # a deleted Backup stops before it lands, as a lost Lease does
            try:
                client, user = self._acting_as(intent.service_account)
                store = self.store(intent.storage)
                run = run_backup(
                    client, self.discover(True), store, self.key, intent, self._workers(0, 1, user), lost,
                    self.config.signer,
                )  # fmt: skip
            except ConfigError as e:  # this Backup's own problem (no ServiceAccount, a store not allowed)
                run = Run(False, False, f"backup {intent.backup} failed: {e}", Reason.BACKUP_FAILED)
            except StatusVaultError as e:  # the store could not be opened
                run = Run(False, True, f"backup {intent.backup} failed: {e}", Reason.BACKUP_FAILED)
        if lost.is_set() and target.gone():  # deleted mid-run: nothing left to record on
            if run.ok:  # deleted as the backup landed: it is kept
                log.info("%s was deleted as its backup landed: %s", target.describe(), run.message)
            else:
                log.info("%s was deleted mid-run: stopped, nothing kept", target.describe())
                target.event(
                    "Normal", "BackupStopped", f"backup {intent.backup} stopped: deleted mid-run, nothing kept"
                )
            return True
        self.breaker.record(run.ok or not run.run_wide, time.monotonic())
        self._record(target, intent.digest, intent.backup, step, run, "Backup")
        return True

    def _restore(self, target: Target, intent: Intent, step: NextStep, lost: threading.Event) -> bool:
        if not self._start(target, intent.digest, intent.backup, step, "Restore"):
            return False
        self._running = lost
        try:
            with watching_for_deletion(target, lost):  # a deleted Restore (or intent) stops as a lost Lease does
                run = self._run(target, intent, lost)
        finally:
            self._running = None
        if lost.is_set() and target.gone():  # deleted mid-run: stopped cleanly, nothing left to record on
            log.info("%s was deleted mid-run: stopped (a new one resumes from the journal)", target.describe())
            target.event("Normal", "RestoreStopped", f"restore of {intent.backup} stopped: deleted mid-run")
            return True
        self.breaker.record(run.ok or not run.run_wide, time.monotonic())
        self._record(target, intent.digest, intent.backup, step, run, "Restore")
        return True

    def _run(self, target: Target, intent: Intent, cancel: threading.Event) -> Run:
        """The restore itself, its outcome whatever happens (an error is recorded, never raised)."""
        report: RestoreReport | None = None
        try:
            client, user = self._acting_as(intent.service_account)
            store = self.store(intent.storage)
            with self._source(intent, store) as (source, backup, lineage):
                request = RestoreRequest(
                    store=source,
                    backup=backup,
                    options=self._with_modifiers(intent),
                    state_dir=self.config.state_dir,
                    parallel=intent.parallel,
                    workers=self._workers(intent.processes, intent.parallel, user),
                    stream=intent.stream,
                    key=self._keys_for(intent),
                    cancel=cancel,  # a lost Lease or a deleted Restore: stop starting objects
                    lineage=lineage,
                )
                result = restore_with(request, client=client, discover=self.discover, strict=intent.strict)
            report, judged = result.report, result.verdict
            mark_without_status(client, self.discover, report, target.describe())
            location = save_report(self.store(None) if intent.from_velero else store, report, target, intent.digest)
            counts = {**outcome_counts(report, intent.options.pause.enabled), "report": location}
            message = _summary(intent.backup, report)
            if judged.outcome is RunOutcome.PARTIAL:
                message = judged.message(message)
                counts[SHORTFALLS] = shortfall_list(judged)
            done = judged.outcome is RunOutcome.DONE
            return Run(done, bool(report.aborted), message, REASONS[judged.outcome], report.interrupted, counts)
        except StatusVaultError as e:  # store, archive or API server: nothing or little was done
            # this intent's own problem (a missing key, a resource the backup lacks, a backup that is missing or
            # broken) is not an outage: it backs off alone, never holding the other intents
            reason = Reason.BACKUP_NOT_FOUND if isinstance(e, BackupNotFoundError) else Reason.FAILED
            return Run(False, not isinstance(e, OWN_PROBLEMS), f"restore of {intent.backup} failed: {e}", reason)
        except KeyboardInterrupt:  # SIGTERM before the engine ran (download, planning, scale-down)
            return Run(False, False, f"restore of {intent.backup} was interrupted", Reason.INTERRUPTED, True)
        except Exception as e:  # a bug or the disk: recorded and backed off like any failure, never a hot loop
            log.exception("restore of %s", target.describe())
            message = f"restore of {intent.backup} failed: {type(e).__name__}: {e}"
            return Run(False, False, message, Reason.FAILED)
        finally:
            if report is not None:
                report.close()

    def _record(self, target: Target, digest: str, backup: str, step: NextStep, run: Run, verb: str) -> None:
        done = dt.datetime.now(dt.UTC)
        outcome = {"completedAt": rfc3339.format_seconds(done), "message": run.message, "reason": run.reason}
        outcome.update(run.counts)
        stale = () if SHORTFALLS in run.counts else (SHORTFALLS,)  # an earlier attempt's, no longer true
        if run.ok:
            outcome.update(phase=Phase.COMPLETE, appliedDigest=digest, appliedBackup=backup)
            target.write(outcome, drop=("nextAttemptAt", *stale))
            target.event("Normal", f"{verb}Completed", run.message)
            return
        if run.interrupted:  # the pod is stopping: the next pass (here or on another replica) resumes at once
            self.stop.set()
        due = done if run.interrupted else done + dt.timedelta(seconds=retry_delay(step.attempt))
        outcome.update(phase=Phase.FAILED, nextAttemptAt=rfc3339.format_seconds(due))
        target.write(outcome, drop=stale)
        target.event("Warning", f"{verb}Failed", f"{run.message}; next attempt at {rfc3339.format_seconds(due)}")

    @contextlib.contextmanager
    def _source(self, intent: Intent, store: ObjectStore) -> Iterator[tuple[ObjectStore, str, str]]:
        """(store, backup, lineage) a restore reads: the backup itself, a watch's moment (spec.at) or a Velero backup
        of the storage location, made a native backup in a temporary directory (its journal keyed as the CLI's)."""
        if intent.at:
            if self.config.moments is None:
                raise ConfigError("spec.at names a watch's moment, which this controller cannot read")
            with self.config.moments(store, intent.backup, intent.at, self._keys_for(intent)) as moment:
                yield moment.store, moment.name, moment.lineage
            return
        if not intent.from_velero:
            yield store, intent.backup, ""
            return
        with velero.imported(intent.backup, store) as (temp, name, _):
            yield temp, name, f"velero-{name}"

    def _acting_as(self, service_account: str) -> tuple[KubeApi, str]:
        """The client a run acts with, and the user it impersonates ("": the controller itself): the ServiceAccount
        a resource names (spec.serviceAccountName), in the controller's namespace, else the default one. ConfigError
        when neither is set and one is required (--require-service-account)."""
        name = service_account or self.config.default_service_account
        if not name:
            if self.config.require_service_account:
                raise ConfigError(
                    "it names no spec.serviceAccountName, and this controller acts only as a ServiceAccount the "
                    "resource names (--require-service-account)"
                )
            return self.client, ""
        if name in RESERVED_ACCOUNTS:
            raise ConfigError(f"spec.serviceAccountName {name!r} is the controller's own: name one made for restores")
        user = f"system:serviceaccount:{self.config.namespace}:{name}"
        if user not in self._impersonated:
            impersonating = getattr(self.client, "impersonating", None)
            if impersonating is None:
                raise ConfigError(f"this controller's API client cannot act as {user}")
            self._impersonated[user] = impersonating(user)  # one connection pool per ServiceAccount, kept
        return self._impersonated[user], user

    def _keys_for(self, intent: Intent) -> Keys:
        """The keys a restore reads its backup with: the controller's (only its verification keys for a Velero
        backup, imported unencrypted). A Restore that names verification keys narrows them: the backup must be
        signed by one it names, a key file among the controller's own (--verify-key-file: a Restore makes it read no
        other file), a KMS key read with its credentials."""
        key = Keyring((), Keyring.of(self.key).verifiers) if intent.from_velero else self.key
        if not (intent.verify_key_files or intent.verify_kms_key_ids):
            return key
        ring, chosen = Keyring.of(key), []
        for path in intent.verify_key_files:
            found = [v for v in ring.verifiers if v.name == file_key_name(path)]
            if not found:
                raise ConfigError(f"spec.verify-key-file {path[:200]!r} is not one of the controller's "
                                  "verification keys (controller run --verify-key-file): a Restore only narrows "
                                  "them")  # fmt: skip
            chosen += found
        if intent.verify_kms_key_ids:
            from statusvault.keys.kms import KmsKek  # only KMS users pay for boto3's import

            chosen += [KmsKek(k).public_key() for k in intent.verify_kms_key_ids]
        return dataclasses.replace(ring, verifiers=tuple(chosen))

    def _workers(self, processes: int, parallel: int, user: str = "") -> WorkerSettings:
        """Large waves across processes, as `statusvault restore` does: auto (0) uses the CPUs the pod may use;
        each worker acts as `user` when the parent impersonates one."""
        explicit = processes > 0  # then every wave goes to the processes, small ones too
        return WorkerSettings(
            impersonate=user,
            kubeconfig=self.config.kubeconfig,
            context=self.config.context,
            processes=processes or default_processes(),
            parallel=parallel,
            min_wave=0 if explicit else MIN_WAVE,
            log_format=self.config.log_format,
            debug=self.config.debug,
        )


SHORTFALLS = "shortfalls"  # status field: the verdict's reasons, "Reason=count,..."


def shortfall_list(judged: Verdict) -> str:
    """A partial run's reasons as one status field, in the verdict's order ("FailedObjects=2,StillPaused=1"): what
    `-o json`'s verdict.reasons says, for a health check or `kubectl get -o jsonpath` to read."""
    return ",".join(f"{f.shortfall}={f.count}" for f in judged.findings)


def modifiers_from(cm: KubeObject | None, name: str, namespace: str) -> Modifiers:
    """A modifiers file held in a ConfigMap: its one data key (as Velero's), or `modifiers.yaml`."""
    where = f"modifiers ConfigMap {namespace}/{name}"
    if cm is None:
        raise ConfigError(f"{where} does not exist: create it (the next attempt reads it again) or fix the intent")
    data: dict[str, str] = cm.get("data") or {}
    if "modifiers.yaml" in data:
        return load_modifiers(data["modifiers.yaml"], where)
    if len(data) != 1:
        raise ConfigError(f"{where} must hold one key (or modifiers.yaml), not {len(data)}")
    return load_modifiers(next(iter(data.values())), where)


def _summary(backup: str, report: RestoreReport) -> str:
    if report.aborted:
        return f"restore of {backup} stopped early: {report.aborted}"
    if report.interrupted:
        return f"restore of {backup} was interrupted"
    resumed = f" ({report.resumed} done by an earlier attempt)" if report.resumed else ""
    kept = (
        f"; {report.left_paused} left paused as asked (drop keep-paused from the intent to release them)"
        if report.left_paused and report.work_complete
        else ""
    )
    return (
        f"restore of {backup}: {report.total} objects{resumed}, {len(report.failures)} failed, "
        f"{report.lacking_status_count} without their saved status{kept}"
    )
