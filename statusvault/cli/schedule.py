"""schedule render (CronJob + RBAC manifests) and prune (retention)."""

from __future__ import annotations

import dataclasses
import datetime as dt
import logging
from typing import Any

import click

from statusvault import rfc3339
from statusvault.backup.selection import select_resources
from statusvault.cli.app import App
from statusvault.cli.flags import (
    LockArgs,
    ManifestArgs,
    MetricsArgs,
    SelectionArgs,
    StorageArgs,
    apply_options,
    cluster_resources_option,
    dry_run_option,
    lock_options,
    manifest_options,
    metrics_options,
    output_option,
    pass_args,
    selection_options,
    storage_options,
)
from statusvault.cli.output import OutputFormat, emit, emit_manifests, table
from statusvault.errors import ConfigError, KubeConnectionError
from statusvault.kube.apply import apply_manifests
from statusvault.kube.discovery import Discovery
from statusvault.model import DryRun
from statusvault.schedule import ScheduleSpec, cronjob_api_for, offline_types, render
from statusvault.storage.base import validate_backup_name
from statusvault.store import catalog
from statusvault.store.retention import RetentionPolicy, parse_duration

log = logging.getLogger(__name__)


@dataclasses.dataclass(frozen=True, kw_only=True)
class RetentionArgs:
    """--keep-last, --ttl, --keep-daily, --keep-weekly (retention_options)."""

    keep_last: int | None
    ttl: str | None
    keep_daily: int | None
    keep_weekly: int | None


@dataclasses.dataclass(frozen=True, kw_only=True)
class ScheduleRenderArgs(StorageArgs, SelectionArgs, ManifestArgs, RetentionArgs, LockArgs):
    name: str
    cron: str
    namespace_of_job: str
    kms_key_id: tuple[str, ...]
    metrics_pushgateway: str
    kube_version: str


@dataclasses.dataclass(frozen=True, kw_only=True)
class PruneArgs(StorageArgs, RetentionArgs, MetricsArgs):
    schedule: str
    watch: str
    incomplete_grace: str
    dry_run: DryRun  # none | client
    output: OutputFormat

    def policy(self) -> RetentionPolicy:
        ttl = parse_duration(self.ttl) if self.ttl else None
        grace = parse_duration(self.incomplete_grace)
        return RetentionPolicy(self.keep_last, ttl, self.keep_daily, self.keep_weekly, grace)


def retention_options(f: Any) -> Any:
    return apply_options(
        f,
        [
            click.option("--keep-last", type=click.IntRange(1), help="Keep the N newest complete backups."),
            click.option("--ttl", help="Keep backups younger than this (e.g. 720h, 30d); delete older ones."),
            click.option(
                "--keep-daily", type=click.IntRange(1), help="Keep the newest backup of each of the last D days."
            ),
            click.option(
                "--keep-weekly", type=click.IntRange(1), help="Keep the newest backup of each of the last W weeks."
            ),
        ],
    )


@click.group()
def schedule() -> None:
    """Scheduled in-cluster backups (CronJob, least-privilege RBAC)."""


@schedule.command("render")
@click.argument("name")
@click.option("--schedule", "cron", required=True, metavar="CRON", help="Cron schedule, e.g. '0 2 * * *'.")
@storage_options
@selection_options
@cluster_resources_option
@click.option(
    "--include-crds/--no-include-crds",
    default=None,
    help="Back up the defining CRDs (needs a ClusterRole). [default: on unless -n is given]",
)
@click.option("--namespace-of-job", default="statusvault", show_default=True, help="Namespace of the CronJob.")
@manifest_options
@click.option("--kms-key-id", multiple=True, help="A KMS key that wraps each backup's data key (repeatable).")
@lock_options
@retention_options
@click.option("--metrics-pushgateway", default="", metavar="URL", help="Push run metrics to this Pushgateway.")
@click.option(
    "--kube-version",
    default="",
    help="Render for this Kubernetes version (default: the cluster's, or batch/v1 when no cluster is reachable).",
)
@pass_args(ScheduleRenderArgs, check=True)
def render_cmd(app: App, args: ScheduleRenderArgs) -> None:
    """Print (or --apply) the ServiceAccount, RBAC and CronJob for backups named NAME-YYYYMMDDhhmmss."""
    validate_backup_name(args.name)
    args.lock(dt.datetime.now(dt.UTC))  # a bad --lock-for fails here, not in the first night's run
    args.check_in_cluster("a scheduled backup")
    if args.ttl:
        parse_duration(args.ttl)
    try:
        discovery: Discovery | None = app.discovery()
    except (ConfigError, KubeConnectionError) as e:
        log.info("no cluster reachable (%s): rendering from the resource names", e)
        discovery = None
    spec = schedule_spec(args, _cronjob_api(args.kube_version, discovery))
    types = select_resources(discovery, spec.selection) if discovery is not None else offline_types(spec.selection)
    print_or_apply(app, discovery, render(spec, types), args)


def schedule_spec(args: ScheduleRenderArgs, cronjob_api: str) -> ScheduleSpec:
    """The scheduled backup the options ask for (a schedule for namespaces takes CRDs only when asked to)."""
    return ScheduleSpec(
        name=args.name,
        cron=args.cron,
        selection=args.selection(),
        storage=str(args.storage),
        s3=args.s3(),
        job_namespace=args.namespace_of_job,
        image=args.image,
        credentials_secret=args.credentials_secret,
        keep_last=args.keep_last,
        ttl=args.ttl or "",
        keep_daily=args.keep_daily,
        keep_weekly=args.keep_weekly,
        metrics_pushgateway=args.metrics_pushgateway,
        cronjob_api=cronjob_api,
        encryption_secret=args.encryption_key_secret,
        kms_key_ids=args.kms_key_id,
        lock_mode=args.lock_mode or "",
        lock_for=args.lock_for or "",
        legal_hold=args.legal_hold,
        ca_pem=args.ca_pem(),
    )


def _cronjob_api(kube_version: str, discovery: Discovery | None) -> str:
    if kube_version:
        return cronjob_api_for(kube_version)
    served = discovery.find("batch", "v1", "CronJob") if discovery is not None else None
    if discovery is not None and (served is None or served.version != "v1"):  # 1.20: batch/v1beta1 only
        return "batch/v1beta1"
    return "batch/v1"


def print_or_apply(app: App, discovery: Discovery | None, manifests: list[dict[str, Any]], args: ManifestArgs) -> None:
    """Print the manifests, or (--apply) apply them, one line per object applied."""
    if not args.apply_ or args.dry_run == DryRun.CLIENT:
        emit_manifests(manifests)
        return
    if discovery is None:
        raise ConfigError("--apply needs a reachable cluster")
    dry_run = args.dry_run == DryRun.SERVER
    for applied in apply_manifests(app.client(), discovery, manifests, dry_run):
        click.echo(f"{applied} applied" + (" (server dry run)" if dry_run else ""))


@click.command()
@storage_options
@click.option("--schedule", default="", help="Only backups made by this schedule.")
@click.option("--watch", default="", help="Prune this watch's chains instead: never one a kept moment needs.")
@retention_options
@click.option(
    "--incomplete-grace",
    default="6h",
    show_default=True,
    help="Delete incomplete backups older than this (a younger one may still be running).",
)
@dry_run_option("client: show what would be deleted; delete nothing.", ("none", "client"))
@metrics_options
@output_option
@pass_args(PruneArgs)
def prune(app: App, args: PruneArgs) -> None:
    """Apply retention: keep-last/daily/weekly and TTL; never deletes the newest complete backup, nor one S3 Object
    Lock holds (reported as held, and until when)."""
    store = app.store(args.storage, args.s3())
    policy, dry = args.policy(), args.dry_run == DryRun.CLIENT
    if args.watch:
        from statusvault.cli.watchviews import prune_watch_cmd

        prune_watch_cmd(store, args.watch, policy, dry, args.output)
        return
    with args.recorded("prune", args.schedule) as run:
        decisions = catalog.prune(store, policy, args.schedule, dry)
        deleted = [d for d in decisions if d.delete]
        run.success, run.objects = True, len(deleted)
    verb = "would delete" if dry else "deleted"
    rows = [(d.name, (verb if d.delete else "keep"), d.reason) for d in decisions]
    text = (
        table(["BACKUP", "ACTION", "REASON"], rows) + "\n\n" if rows else ""
    ) + f"{len(deleted)} backup(s) {verb}, {len(decisions) - len(deleted)} kept"
    emit(
        {
            "policy": policy.to_dict(),
            "dryRun": dry,
            "decisions": [
                {"name": d.name, "delete": d.delete, "reason": d.reason, "held": d.held, "heldUntil": _at(d.held_until)}
                for d in decisions
            ],
        },
        args.output,
        text,
    )


def _at(when: dt.datetime | None) -> str | None:
    return rfc3339.format_seconds(when) if when is not None else None


COMMANDS = (schedule, prune)
