"""BackupSchedule resources (statusvault.dev/v1alpha1): each is rendered into the CronJob `schedule render` makes,
in the controller's namespace and owned by the BackupSchedule (deleting it deletes the CronJob), run by the one
read-only ServiceAccount `controller install` renders. The CronJob keeps running while the controller is down."""

from __future__ import annotations

import contextlib
import dataclasses
import datetime as dt
import logging
from typing import Any

import orjson

from statusvault import rfc3339
from statusvault.backup.selection import select_resources
from statusvault.controller import crd
from statusvault.controller.backups import LockLimits, parse_backup
from statusvault.controller.conditions import conditions
from statusvault.controller.intent import Phase, digest_of
from statusvault.controller.targets import involved_object, record_event
from statusvault.errors import ConfigError, Conflict, Invalid, NotFound
from statusvault.kube.api import KubeApi
from statusvault.kube.discovery import Discovery
from statusvault.model import KubeObject, ResourceType
from statusvault.schedule import DEFAULT_IMAGE, ScheduleSpec, cronjob
from statusvault.storage.base import S3Options
from statusvault.store.retention import parse_duration

log = logging.getLogger(__name__)
SCHEDULES = ResourceType(
    crd.GROUP, crd.VERSION, crd.SCHEDULE_PLURAL, crd.SCHEDULE_KIND, namespaced=True, has_status=True
)
BACKUP_ACCOUNT = "statusvault-backup"  # rendered by `controller install`, read-only on the controller's types
DIGEST = "statusvault.dev/cronjob-digest"  # what the controller rendered; the server adds defaults to the rest
SCHEDULED = "Scheduled"
OWN_FIELDS = ("schedule", "keep-last", "ttl", "keep-daily", "keep-weekly", "suspend")
BACKUP_TUNING = ("page-size", "list-concurrency", "processes")  # backup options `schedule render` does not take


@dataclasses.dataclass(frozen=True)
class JobSettings:
    """How the controller's CronJobs reach the store: its own --storage and S3 options, image, Secrets and the
    ConfigMap holding its S3 CA bundle."""

    storage: str = ""
    s3: S3Options = dataclasses.field(default_factory=S3Options)
    image: str = DEFAULT_IMAGE
    credentials_secret: str = ""
    encryption_secret: str = ""
    ca_configmap: str = ""  # in the controller's namespace, its "ca.crt" the bundle (`controller install` makes it)


def parse_schedule(
    obj: KubeObject, namespace: str, job: JobSettings, cronjob_api: str, locks: LockLimits
) -> ScheduleSpec:
    """The scheduled backup a BackupSchedule's spec asks for, its lock within `locks`; ConfigError names what is
    wrong."""
    spec: dict[str, Any] = obj.get("spec") or {}
    backup_spec = {k: v for k, v in spec.items() if k not in OWN_FIELDS}
    intent = parse_backup({**obj, "spec": backup_spec}, locks)
    if spec.get("ttl"):
        parse_duration(str(spec["ttl"]))
    storage = intent.storage or job.storage
    if not storage:
        raise ConfigError("spec.storage is missing and the controller has no --storage: name where backups go")
    if job.s3.ca_bundle and not job.ca_configmap:
        raise ConfigError(
            "the controller's --s3-ca-bundle is a file its CronJobs do not have: give it --s3-ca-configmap, a "
            "ConfigMap in its namespace whose ca.crt holds the bundle (as `controller install` does)"
        )
    return ScheduleSpec(
        name=intent.backup,
        cron=str(spec.get("schedule") or ""),
        selection=intent.selection,
        storage=storage,
        s3=job.s3,
        job_namespace=namespace,
        image=job.image,
        credentials_secret=job.credentials_secret,
        keep_last=spec.get("keep-last"),
        ttl=str(spec.get("ttl") or ""),
        keep_daily=spec.get("keep-daily"),
        keep_weekly=spec.get("keep-weekly"),
        cronjob_api=cronjob_api,
        encryption_secret=job.encryption_secret,
        account_name=BACKUP_ACCOUNT,
        ca_configmap_name=job.ca_configmap,
        backup_tuning=tuple(a for k in BACKUP_TUNING if spec.get(k) for a in (f"--{k}", str(int(spec[k])))),
        lock_mode=intent.lock_mode,
        lock_for=intent.lock_for,
        legal_hold=intent.legal_hold,
    )


def desired(obj: KubeObject, spec: ScheduleSpec, types: list[ResourceType]) -> KubeObject:
    """The CronJob for `obj`: `schedule render`'s, suspended as asked, owned by `obj`, marked with its digest."""
    job = cronjob(spec, types)
    job["spec"]["suspend"] = bool((obj.get("spec") or {}).get("suspend"))
    meta = obj["metadata"]
    owner = {"apiVersion": crd.API_VERSION, "kind": crd.SCHEDULE_KIND, "name": meta["name"], "uid": meta["uid"],
             "controller": True}  # fmt: skip
    job["metadata"]["ownerReferences"] = [owner]
    job["metadata"]["annotations"] = {DIGEST: digest_of({"cronjob": orjson.dumps(job).decode()})}
    return job


def ensure_cronjob(client: KubeApi, rt: ResourceType, want: KubeObject) -> KubeObject:
    """Create the CronJob, or replace it when what was rendered changed; ConfigError if another owns the name."""
    meta = want["metadata"]
    live = client.get(rt, meta["namespace"], meta["name"])
    if live is None:
        return client.create(rt, meta["namespace"], want)
    owners = {o.get("uid") for o in live["metadata"].get("ownerReferences") or []}
    if meta["ownerReferences"][0]["uid"] not in owners:
        raise ConfigError(f"CronJob {meta['namespace']}/{meta['name']} exists and is not this BackupSchedule's")
    if (live["metadata"].get("annotations") or {}).get(DIGEST) == meta["annotations"][DIGEST]:
        return live
    body = {**want, "metadata": {**meta, "resourceVersion": live["metadata"]["resourceVersion"]}}
    return client.replace(rt, meta["namespace"], meta["name"], body)


def schedule_status(obj: KubeObject, job: KubeObject | None, error: str) -> dict[str, Any]:
    """Ready (Scheduled) once the CronJob matches the spec, Stalled (InvalidSpec) with `error`; the CronJob's
    last schedule and success times as it reports them."""
    generation = int(obj["metadata"].get("generation") or 0)
    old = obj.get("status") or {}
    phase, reason = (Phase.INVALID, "InvalidSpec") if error else (Phase.COMPLETE, SCHEDULED)
    message = error or f"CronJob {(job or {}).get('metadata', {}).get('name', '')} is up to date"
    now = rfc3339.format_seconds(dt.datetime.now(dt.UTC))
    status: dict[str, Any] = {"observedGeneration": generation, "reason": reason, "message": message}
    if job is not None:
        status["cronJob"] = job["metadata"]["name"]
        times = job.get("status") or {}
        status.update({k: times[k] for k in ("lastScheduleTime", "lastSuccessfulTime") if times.get(k)})
    status["conditions"] = conditions(phase, reason, message, generation, now, old.get("conditions") or [])
    return status


def suspend_refused(client: KubeApi, rt: ResourceType, obj: KubeObject, namespace: str) -> KubeObject | None:
    """Suspend the CronJob an earlier spec of `obj` made (its status names it), now that the controller refuses the
    spec: it would go on taking backups as the refused spec no longer may (a lock the administrator has since
    forbidden). Its digest goes too, so that it is rendered again once the spec is fixed. Returns it (suspended), or
    None when there is none of `obj`'s."""
    name = str((obj.get("status") or {}).get("cronJob") or "")
    live = client.get(rt, namespace, name) if name else None
    owners = {o.get("uid") for o in live["metadata"].get("ownerReferences") or []} if live is not None else set()
    if live is None or obj["metadata"]["uid"] not in owners:
        return None
    annotations = live["metadata"].get("annotations") or {}
    if (live.get("spec") or {}).get("suspend") and DIGEST not in annotations:
        return live  # suspended by an earlier pass
    meta = {**live["metadata"], "annotations": {k: v for k, v in annotations.items() if k != DIGEST}}
    try:
        suspended = client.replace(
            rt, namespace, name, {**live, "metadata": meta, "spec": {**live["spec"], "suspend": True}}
        )
    except (Conflict, NotFound):  # changed or deleted meanwhile: the next pass looks again
        return None
    log.warning(
        "BackupSchedule %s/%s is refused: its CronJob %s is suspended", namespace, obj["metadata"]["name"], name
    )
    return suspended


def served_cronjobs(discovery: Discovery) -> ResourceType | None:
    """CronJob at batch/v1 from Kubernetes 1.21; only batch/v1beta1 before (not batch's preferred version)."""
    return discovery.find("batch", "v1", "CronJob") or discovery.find("batch", "v1beta1", "CronJob")


def reconcile_schedule(
    client: KubeApi,
    discovery: Discovery,
    obj: KubeObject,
    namespace: str,
    job: JobSettings,
    locks: LockLimits,
    holder: str = "",
) -> None:
    """Bring `obj`'s CronJob in line with its spec and record the outcome on its /status (only when it changed); a
    spec asking for a lock beyond `locks` gets no CronJob, and one the controller refuses stops the CronJob an
    earlier spec made (suspend_refused). A refusal is also a Warning Event (InvalidSpec) on `obj`, once per
    message, as a Backup's is; `holder` is the replica that says so."""
    cronjobs = served_cronjobs(discovery)
    live: KubeObject | None = None
    error = ""
    try:
        if cronjobs is None:
            raise ConfigError("this cluster serves no CronJob (batch/v1 or batch/v1beta1)")
        spec = parse_schedule(obj, namespace, job, f"batch/{cronjobs.version}", locks)
        live = ensure_cronjob(client, cronjobs, desired(obj, spec, select_resources(discovery, spec.selection)))
    except ConfigError as e:
        error = str(e)
    except Invalid as e:  # the server refused the CronJob (a bad cron expression): the spec's fault
        error = f"the CronJob was refused: {e}"
    if error and cronjobs is not None and (live := suspend_refused(client, cronjobs, obj, namespace)) is not None:
        error += f" (its CronJob {live['metadata']['name']} is suspended until the spec is fixed)"
    status = schedule_status(obj, live, error)
    if status == obj.get("status"):
        return
    old = obj.get("status") or {}
    if error and (old.get("reason"), old.get("message")) != ("InvalidSpec", error):  # said once per message
        log.error("BackupSchedule %s/%s: %s", namespace, obj["metadata"]["name"], error)
        involved = involved_object(obj, crd.API_VERSION, crd.SCHEDULE_KIND, namespace)
        record_event(client, namespace, holder, involved, "Warning", "InvalidSpec", error)
    with contextlib.suppress(NotFound, Conflict):  # changed or deleted: the next pass sees what is there
        client.replace(SCHEDULES, namespace, obj["metadata"]["name"], {**obj, "status": status}, sub="status")
