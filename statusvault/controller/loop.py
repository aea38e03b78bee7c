"""The in-cluster restore controller: reconcile restore-intent ConfigMaps into restores.

Each pass LISTs the intents in one namespace. For each, it compares the intent's digest with its status
ConfigMap: a new desired state (or a failed attempt that is due again) takes the intent's Lease, records
phase InProgress (resourceVersion-guarded), runs the restore (resumable through its journal), records the
outcome, and emits Events on the intent. Failures back off exponentially per intent; run-wide failures
(store or API server down) open a circuit breaker that pauses every intent for a while.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import logging
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from statusvault import rfc3339
from statusvault.archive.envelope import Keys
from statusvault.controller.intent import (
    INTENT_LABEL,
    STATUS_LABEL,
    Intent,
    NextStep,
    Phase,
    digest_of,
    next_step,
    parse_intent,
    retry_delay,
)
from statusvault.controller.lease import Lease
from statusvault.errors import ArchiveError, BackupNotFoundError, ConfigError, KubeApiError, StatusVaultError
from statusvault.kinds import CONFIGMAPS, EVENTS
from statusvault.kube.api import KubeApi
from statusvault.kube.discovery import Discovery
from statusvault.model import KubeObject
from statusvault.processes import WorkerSpec
from statusvault.restore.modifiers import Modifiers, load_modifiers
from statusvault.restore.options import RestoreOptions
from statusvault.restore.results import RestoreReport
from statusvault.restore.runner import RestoreRequest, run_restore
from statusvault.restore.workers import MIN_WAVE, default_processes
from statusvault.storage.base import ObjectStore

log = logging.getLogger(__name__)
COMPONENT = "statusvault-controller"
OWN_PROBLEMS = (ConfigError, BackupNotFoundError, ArchiveError)  # one intent's failures, not an outage


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


class Controller:
    def __init__(
        self,
        client: KubeApi,
        discover: Callable[[bool], Discovery],
        store: Callable[[str | None], ObjectStore],
        config: ControllerConfig,
        key: Keys = None,
    ):
        self.key = key  # for encrypted backups
        self.client = client
        self.discover = discover
        self.store = store
        self.config = config
        self.breaker = Breaker()
        self.stop = threading.Event()

    def run_forever(self) -> None:
        log.info("reconciling restore intents in namespace %s every %.0fs", self.config.namespace, self.config.interval)
        while not self.stop.is_set():
            try:
                self.reconcile_all()
            except StatusVaultError as e:  # the API server is unreachable: try again next pass
                log.error("reconcile pass failed: %s", e)
            self.stop.wait(self.config.interval)

    def reconcile_all(self) -> int:
        """One pass over every intent; returns how many restores it ran."""
        ran = 0
        for page in self.client.list_pages(CONFIGMAPS, self.config.namespace, f"{INTENT_LABEL}=true"):
            for cm in page:
                if self.stop.is_set():
                    return ran
                try:
                    ran += self.reconcile(cm)
                except StatusVaultError as e:  # this intent's API calls failed; the others may still work
                    log.error("intent %s: %s", cm["metadata"]["name"], e)
                except Exception:  # a bug must not stop every other intent
                    log.exception("intent %s: unexpected error", cm["metadata"]["name"])
        return ran

    def reconcile(self, cm: KubeObject) -> bool:
        name = cm["metadata"]["name"]
        status_cm = self.client.get(CONFIGMAPS, self.config.namespace, name + "-status")
        if status_cm is not None and (status_cm["metadata"].get("labels") or {}).get(STATUS_LABEL) != name:
            log.error("intent %s: ConfigMap %s-status exists and is not its status (another intent?)", name, name)
            return False
        status: dict[str, str] = dict((status_cm or {}).get("data") or {})
        now = dt.datetime.now(dt.UTC)
        try:
            intent = parse_intent(cm)
        except ConfigError as e:
            digest = digest_of(dict(cm.get("data") or {}))
            if status.get("digest") != digest or status.get("phase") != Phase.INVALID:
                log.error("restore intent %s is invalid: %s", name, e)
                self._write_status(cm, status_cm, {"phase": Phase.INVALID, "digest": digest, "message": str(e)})
                self._event(cm, "Warning", "InvalidIntent", str(e))
            return False
        step = next_step(intent.digest, status, now)
        if not step.act:
            log.debug("intent %s: %s", name, step.reason)
            return False
        if not self.breaker.allows(time.monotonic()):
            log.info("intent %s waits: the circuit breaker is open", name)
            return False
        lease = Lease(
            self.client,
            self.config.namespace,
            f"statusvault-restore-{name}",
            self.config.holder,
            self.config.lease_seconds,
        )
        if not lease.acquire():
            log.info("intent %s is being restored by another replica", name)
            return False
        try:
            return self._restore(cm, status_cm, intent, step, lease.lost)
        finally:
            lease.release()

    def _with_modifiers(self, intent: Intent) -> RestoreOptions:
        """The intent's options with its modifiers file, read from its ConfigMap now (ConfigError if bad)."""
        if not intent.modifiers:
            return intent.options
        ns = self.config.namespace
        cm = self.client.get(CONFIGMAPS, ns, intent.modifiers)
        return dataclasses.replace(intent.options, modifiers=modifiers_from(cm, intent.modifiers, ns))

    def _restore(
        self,
        cm: KubeObject,
        status_cm: KubeObject | None,
        intent: Intent,
        step: NextStep,
        lost: threading.Event,
    ) -> bool:
        started = dt.datetime.now(dt.UTC)
        progress = {
            "phase": Phase.IN_PROGRESS,
            "digest": intent.digest,
            "backup": intent.backup,
            "attempts": str(step.attempt),
            "startedAt": rfc3339.format_seconds(started),
            "holder": self.config.holder,
            "message": f"restoring {intent.backup} ({step.reason}, attempt {step.attempt})",
        }
        status_cm = self._write_status(cm, status_cm, progress, drop=("completedAt", "nextAttemptAt"))
        if status_cm is None:
            return False  # changed under us: the next pass sees the new state
        self._event(cm, "Normal", "RestoreStarted", progress["message"])
        report: RestoreReport | None = None
        interrupted = False
        try:
            request = RestoreRequest(
                store=self.store(intent.storage),
                backup=intent.backup,
                options=self._with_modifiers(intent),
                state_dir=self.config.state_dir,
                parallel=intent.parallel,
                workers=self._workers(intent),
                key=self.key,
                cancel=lost,  # another replica may take over once our Lease lapses: stop starting objects
            )
            report = run_restore(self.client, self.discover, request)
            ok = report.succeeded
            run_wide = bool(report.aborted)
            message = _summary(intent.backup, report)
        except StatusVaultError as e:  # store, archive or API server: nothing or little was done
            # this intent's own problem (a missing key, a resource the backup lacks, a backup that is missing or
            # broken) is not an outage: it backs off alone, never holding the other intents
            ok, run_wide, message = False, not isinstance(e, OWN_PROBLEMS), f"restore of {intent.backup} failed: {e}"
        except KeyboardInterrupt:  # SIGTERM before the engine ran (download, planning, scale-down)
            ok, run_wide, message, interrupted = False, False, f"restore of {intent.backup} was interrupted", True
        except Exception as e:  # a bug or the disk: recorded and backed off like any failure, never a hot loop
            log.exception("restore of intent %s", cm["metadata"]["name"])
            ok, run_wide, message = False, False, f"restore of {intent.backup} failed: {type(e).__name__}: {e}"
        finally:
            if report is not None:
                report.close()
        self.breaker.record(ok or not run_wide, time.monotonic())
        done = dt.datetime.now(dt.UTC)
        outcome = {"completedAt": rfc3339.format_seconds(done), "message": message}
        if report is not None:
            outcome.update(
                objects=str(report.total),
                failed=str(len(report.failures)),
                withoutStatus=str(report.lacking),
                resumed=str(report.resumed),
                processes=str(report.processes),
            )
            if intent.options.pause.enabled:
                outcome.update(unpaused=str(report.unpaused), leftPaused=str(report.left_paused))
        if ok:
            outcome.update(phase=Phase.COMPLETE, appliedDigest=intent.digest, appliedBackup=intent.backup)
            self._write_status(cm, status_cm, outcome, drop=("nextAttemptAt",))
            self._event(cm, "Normal", "RestoreCompleted", message)
        else:
            interrupted = interrupted or (report is not None and report.interrupted)
            if interrupted:  # the pod is stopping: the next pass (here or on another replica) resumes at once
                self.stop.set()
            due = done if interrupted else done + dt.timedelta(seconds=retry_delay(step.attempt))
            outcome.update(phase=Phase.FAILED, nextAttemptAt=rfc3339.format_seconds(due))
            self._write_status(cm, status_cm, outcome)
            self._event(cm, "Warning", "RestoreFailed", f"{message}; next attempt at {rfc3339.format_seconds(due)}")
        return True

    def _workers(self, intent: Intent) -> WorkerSpec:
        """Large waves across processes, as `statusvault restore` does: auto uses the CPUs the pod may use."""
        explicit = intent.processes > 0  # then every wave goes to the processes, small ones too
        return WorkerSpec(
            kubeconfig=self.config.kubeconfig,
            context=self.config.context,
            processes=intent.processes or default_processes(),
            parallel=intent.parallel,
            min_wave=0 if explicit else MIN_WAVE,
            log_format=self.config.log_format,
            debug=self.config.debug,
        )

    def _write_status(
        self, intent: KubeObject, current: KubeObject | None, changes: dict[str, Any], drop: tuple[str, ...] = ()
    ) -> KubeObject | None:
        """Create or update the status ConfigMap, guarded by the resourceVersion read; None on a lost race."""
        meta = intent["metadata"]
        data = {k: v for k, v in ((current or {}).get("data") or {}).items() if k not in drop}
        data.update({k: str(v) for k, v in changes.items()})
        try:
            if current is None:
                body = {
                    "apiVersion": "v1",
                    "kind": "ConfigMap",
                    "metadata": {
                        "name": meta["name"] + "-status",
                        "labels": {STATUS_LABEL: meta["name"]},
                        "ownerReferences": [
                            {"apiVersion": "v1", "kind": "ConfigMap", "name": meta["name"], "uid": meta["uid"]}
                        ],
                    },
                    "data": data,
                }
                return self.client.create(CONFIGMAPS, self.config.namespace, body)
            return self.client.replace(
                CONFIGMAPS, self.config.namespace, current["metadata"]["name"], {**current, "data": data}
            )
        except KubeApiError as e:
            if e.code == 409:
                log.warning("status of intent %s changed under us; will look again next pass", meta["name"])
                return None
            raise

    def _event(self, intent: KubeObject, kind: str, reason: str, message: str) -> None:
        meta = intent["metadata"]
        now = dt.datetime.now(dt.UTC)
        event = {
            "apiVersion": "v1",
            "kind": "Event",
            "metadata": {"generateName": meta["name"] + "."},
            "involvedObject": {
                "apiVersion": "v1",
                "kind": "ConfigMap",
                "name": meta["name"],
                "namespace": meta.get("namespace", self.config.namespace),
                "uid": meta.get("uid", ""),
            },
            "type": kind,
            "reason": reason,
            "message": message[:1024],
            "firstTimestamp": rfc3339.format_seconds(now),
            "lastTimestamp": rfc3339.format_seconds(now),
            "count": 1,
            "source": {"component": COMPONENT},
            "reportingComponent": COMPONENT,
            "reportingInstance": self.config.holder,
        }
        try:
            self.client.create(EVENTS, self.config.namespace, event)
        except StatusVaultError as e:  # events are for people; never fail a restore over one
            log.warning("could not record event %s on %s: %s", reason, meta["name"], e)


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
        if report.left_paused and report.succeeded
        else ""
    )
    return (
        f"restore of {backup}: {report.total} objects{resumed}, {len(report.failures)} failed, "
        f"{report.lacking} without their saved status{kept}"
    )
