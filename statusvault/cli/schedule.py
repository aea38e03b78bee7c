"""schedule render (CronJob + RBAC manifests) and prune (retention)."""

from __future__ import annotations

import datetime as dt
import logging
from typing import Any

import click
import yaml

from statusvault import catalog, rfc3339
from statusvault.backup.selection import select_resources
from statusvault.cli.app import App
from statusvault.cli.options import (
    cluster_resources_option,
    lock_options,
    manifest_options,
    metrics_options,
    object_lock,
    output_option,
    s3_options,
    selection_options,
    split_csv,
    storage_options,
)
from statusvault.cli.output import emit, table
from statusvault.errors import ConfigError, KubeConnectionError
from statusvault.kube.apply import apply_manifests
from statusvault.kube.discovery import Discovery
from statusvault.metrics import recorded
from statusvault.model import Selection
from statusvault.optiontable import check_options
from statusvault.retention import RetentionPolicy, parse_duration
from statusvault.schedule import ScheduleSpec, cronjob_api_for, offline_types, render
from statusvault.storage.base import validate_backup_name

log = logging.getLogger(__name__)


def retention_options(f: Any) -> Any:
    for option in reversed(
        [
            click.option("--keep-last", type=click.IntRange(1), help="Keep the N newest complete backups."),
            click.option("--ttl", help="Keep backups younger than this (e.g. 720h, 30d); delete older ones."),
            click.option(
                "--keep-daily", type=click.IntRange(1), help="Keep the newest backup of each of the last D days."
            ),
            click.option(
                "--keep-weekly", type=click.IntRange(1), help="Keep the newest backup of each of the last W weeks."
            ),
        ]
    ):
        f = option(f)
    return f


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
@click.pass_obj
def render_cmd(app: App, /, name: str, cron: str, **kw: Any) -> None:
    """Print (or --apply) the ServiceAccount, RBAC and CronJob for backups named NAME-YYYYMMDDhhmmss."""
    validate_backup_name(name)
    check_options("schedule render", kw)
    object_lock(dict(kw), dt.datetime.now(dt.UTC))  # a bad --lock-for fails here, not in the first night's run
    s3 = s3_options(kw)
    if not str(kw["storage"] or "").startswith("s3://"):
        raise ConfigError("a scheduled backup needs --storage s3://bucket/prefix: a pod's filesystem does not last")
    if kw["ttl"]:
        parse_duration(kw["ttl"])
    selection = _selection(kw)
    try:
        discovery: Discovery | None = app.discovery()
    except (ConfigError, KubeConnectionError) as e:
        log.info("no cluster reachable (%s): rendering from the resource names", e)
        discovery = None
    spec = ScheduleSpec(
        name=name,
        cron=cron,
        selection=selection,
        storage=kw["storage"],
        s3=s3,
        job_namespace=kw["namespace_of_job"],
        image=kw["image"],
        credentials_secret=kw["credentials_secret"],
        keep_last=kw["keep_last"],
        ttl=kw["ttl"] or "",
        keep_daily=kw["keep_daily"],
        keep_weekly=kw["keep_weekly"],
        metrics_pushgateway=kw["metrics_pushgateway"],
        cronjob_api=_cronjob_api(kw["kube_version"], discovery),
        encryption_secret=kw["encryption_key_secret"],
        kms_key_ids=tuple(kw["kms_key_id"]),
        lock_mode=kw["lock_mode"] or "",
        lock_for=kw["lock_for"] or "",
        legal_hold=kw["legal_hold"],
    )
    types = select_resources(discovery, selection) if discovery is not None else offline_types(selection)
    manifests = render(spec, types)
    if not kw["apply_"]:
        click.echo(yaml.safe_dump_all(manifests, sort_keys=False), nl=False)
        return
    if discovery is None:
        raise ConfigError("--apply needs a reachable cluster")
    apply_and_report(app, discovery, manifests, kw["dry_run"] == "server")


def _selection(kw: dict[str, Any]) -> Selection:
    """A schedule for namespaces stays namespaced: CRDs (cluster-wide) only when asked for."""
    namespaces = split_csv(kw["namespaces"])
    return Selection(
        namespaces=namespaces,
        include_resources=split_csv(kw["include_resources"]),
        exclude_resources=split_csv(kw["exclude_resources"]),
        label_selector=kw["selector"],
        include_cluster_resources=kw["include_cluster_resources"],
        include_crds=kw["include_crds"] if kw["include_crds"] is not None else not namespaces,
        names=split_csv(kw["names"]),
    )


def _cronjob_api(kube_version: str, discovery: Discovery | None) -> str:
    if kube_version:
        return cronjob_api_for(kube_version)
    if discovery is not None and not discovery.find("batch", "v1", "CronJob"):
        return "batch/v1beta1"
    return "batch/v1"


def apply_and_report(app: App, discovery: Discovery, manifests: list[dict[str, Any]], dry_run: bool) -> None:
    """Apply the manifests, one line per object applied."""
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
@click.option("--dry-run", is_flag=True, help="Show what would be deleted; delete nothing.")
@metrics_options
@output_option
@click.pass_obj
def prune(app: App, /, output: str, **kw: Any) -> None:
    """Apply retention: keep-last/daily/weekly and TTL; never deletes the newest complete backup, nor one S3 Object
    Lock holds (reported as held, and until when)."""
    store = app.store(kw.pop("storage"), s3_options(kw))
    policy = RetentionPolicy(
        kw["keep_last"],
        parse_duration(kw["ttl"]) if kw["ttl"] else None,
        kw["keep_daily"],
        kw["keep_weekly"],
        parse_duration(kw["incomplete_grace"]),
    )
    if kw["watch"]:
        from statusvault.cli.watchviews import prune_watch_cmd

        prune_watch_cmd(store, kw["watch"], policy, kw["dry_run"], output)
        return
    with recorded("prune", kw["schedule"], kw["metrics_textfile"], kw["metrics_pushgateway"]) as run:
        decisions = catalog.prune(store, policy, kw["schedule"], kw["dry_run"])
        deleted = [d for d in decisions if d.delete]
        run.success, run.objects = True, len(deleted)
    verb = "would delete" if kw["dry_run"] else "deleted"
    rows = [(d.name, (verb if d.delete else "keep"), d.reason) for d in decisions]
    text = (
        table(["BACKUP", "ACTION", "REASON"], rows) + "\n\n" if rows else ""
    ) + f"{len(deleted)} backup(s) {verb}, {len(decisions) - len(deleted)} kept"
    emit(
        {
            "policy": policy.to_dict(),
            "dryRun": kw["dry_run"],
            "decisions": [
                {"name": d.name, "delete": d.delete, "reason": d.reason, "held": d.held, "heldUntil": _at(d.held_until)}
                for d in decisions
            ],
        },
        output,
        text,
    )


def _at(when: dt.datetime | None) -> str | None:
    return rfc3339.format_seconds(when) if when is not None else None


COMMANDS = (schedule, prune)
