"""watch run (continuous backup under a Lease) and watch render (its Deployment and RBAC)."""

from __future__ import annotations

import contextlib
import functools
import logging
import os
import signal
import socket
import threading
from typing import Any

import click
import yaml

from statusvault.backup.selection import select_resources
from statusvault.cli.app import App
from statusvault.cli.controller import default_namespace
from statusvault.cli.options import (
    cluster_resources_option,
    encryption_key,
    encryption_option,
    manifest_options,
    s3_options,
    selection_options,
    split_csv,
    storage_options,
)
from statusvault.cli.schedule import _selection, apply_and_report
from statusvault.errors import ConfigError
from statusvault.model import Selection
from statusvault.optiontable import check_options
from statusvault.retention import parse_duration
from statusvault.schedule import ScheduleSpec
from statusvault.storage.base import validate_backup_name, watch_prefix
from statusvault.watch.engine import WatchConfig, WatchEngine
from statusvault.watch.install import WatchSpec, render

log = logging.getLogger(__name__)


@click.group("watch")
def watch() -> None:
    """Continuous backup: a base every --base-interval and every change in between; restore --at any moment."""


def _interval_options(f: Any) -> Any:
    f = click.option("--flush-interval", type=click.FloatRange(0.1), default=10.0, show_default=True,
                     help="Seconds between segment flushes: the recovery point.")(f)  # fmt: skip
    return click.option("--base-interval", default="1h", show_default=True,
                        help="How often a new base (a full backup) starts a new chain, e.g. 1h, 30m.")(f)  # fmt: skip


@watch.command("run")
@click.argument("name")
@storage_options
@selection_options
@click.option("-A", "--all-namespaces", is_flag=True, help="Every namespace (the default without -n).")
@cluster_resources_option
@click.option("--include-crds/--no-include-crds", default=True, show_default=True,
              help="The CRDs that define the watched custom resources.")  # fmt: skip
@_interval_options
@click.option("--segment-max-bytes", type=click.IntRange(4096), default=8 << 20, show_default=True,
              help="Flush early once this many uncompressed bytes of changes are buffered.")  # fmt: skip
@click.option("--lease-namespace", default=default_namespace, show_default="the pod's namespace, else statusvault",
              help="Namespace of the Lease that elects the one writer among replicas.")  # fmt: skip
@click.option("--holder", default=lambda: os.environ.get("POD_NAME") or socket.gethostname(),
              show_default="$POD_NAME, else the host name", help="This replica's identity in the Lease.")  # fmt: skip
@click.option("--lease-seconds", type=click.IntRange(3), default=30, show_default=True,
              help="A writer that stops renewing for this long is replaced.")  # fmt: skip
@click.option("--page-size", type=click.IntRange(1, 10000), default=500, show_default=True, help="LIST page size.")
@click.option("--metrics-port", type=click.IntRange(0, 65535), default=0, help="Serve Prometheus metrics on it.")
@click.option("--metrics-textfile", type=click.Path(dir_okay=False), help="Write metrics here at each flush.")
@encryption_option
@click.pass_obj
def run_cmd(app: App, /, name: str, **kw: Any) -> None:
    """Keep NAME's record: LIST then WATCH the selected resources, write a base and chained segments.

    Runs until SIGTERM or Ctrl-C (the buffered changes are flushed first). With several replicas, the one
    holding the Lease statusvault-watch-NAME writes; a new writer continues the chain from the last flushed
    resourceVersion, or starts a new base when it cannot (and says so)."""
    check_options("watch run", kw)
    from statusvault.watch.metrics import WatchMetrics

    validate_backup_name(name)
    store = app.store(kw.pop("storage"), s3_options(kw))
    key = encryption_key(kw)
    config = WatchConfig(
        name=name,
        selection=_backup_selection(kw),
        lease_namespace=kw["lease_namespace"],
        holder=kw["holder"],
        flush_interval=kw["flush_interval"],
        base_interval=parse_duration(kw["base_interval"]).total_seconds(),
        max_segment_bytes=kw["segment_max_bytes"],
        lease_seconds=kw["lease_seconds"],
        page_size=kw["page_size"],
    )
    next(iter(store.list(watch_prefix(name))), None)  # a listing checks the store: bucket, credentials, access
    metrics = WatchMetrics(name, kw["metrics_textfile"])
    if kw["metrics_port"]:
        metrics.serve(kw["metrics_port"])
    engine = WatchEngine(app.client(), lambda: app.discovery(refresh=True), store, config, key, metrics)
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, functools.partial(_stop, engine.stop))
    with contextlib.suppress(KeyboardInterrupt):
        engine.run()
    engine.stop.set()
    click.echo(f"watch {name} stopped", err=True)


def _stop(stop: threading.Event, signum: int, frame: object) -> None:
    """The first SIGTERM or Ctrl-C stops the watch cleanly (buffered changes flushed, the Lease released, so a
    standby takes over at once); a second one stops it now."""
    if stop.is_set():
        raise KeyboardInterrupt
    stop.set()


def _backup_selection(kw: dict[str, Any]) -> Selection:
    return Selection(
        namespaces=() if kw["all_namespaces"] else split_csv(kw["namespaces"]),
        include_resources=split_csv(kw["include_resources"]),
        exclude_resources=split_csv(kw["exclude_resources"]),
        label_selector=kw["selector"],
        include_cluster_resources=kw["include_cluster_resources"],
        include_crds=kw["include_crds"],
        names=split_csv(kw["names"]),
    )


@watch.command("render")
@click.argument("name")
@storage_options
@selection_options
@cluster_resources_option
@click.option("--include-crds/--no-include-crds", default=None,
              help="Watch the defining CRDs (needs a ClusterRole). [default: on unless -n is given]")  # fmt: skip
@click.option("--namespace-of-watch", default="statusvault", show_default=True,
              help="Namespace of the Deployment and its Lease.")  # fmt: skip
@click.option("--replicas", type=click.IntRange(1), default=2, show_default=True, help="Replicas (one writes).")
@_interval_options
@manifest_options
@click.pass_obj
def render_cmd(app: App, /, name: str, **kw: Any) -> None:
    """Print (or --apply) the ServiceAccount, RBAC (get/list/watch on the watched types) and Deployment."""
    validate_backup_name(name)
    s3 = s3_options(kw)
    if not str(kw["storage"] or "").startswith("s3://"):
        raise ConfigError("an in-cluster watch needs --storage s3://bucket/prefix: a pod's filesystem does not last")
    parse_duration(kw["base_interval"])
    selection = _selection(kw)
    discovery = app.discovery()
    schedule = ScheduleSpec(name=name, cron="", selection=selection, storage=kw["storage"], s3=s3,
                            job_namespace=kw["namespace_of_watch"], image=kw["image"],
                            credentials_secret=kw["credentials_secret"],
                            encryption_secret=kw["encryption_key_secret"])  # fmt: skip
    spec = WatchSpec(schedule, kw["replicas"], kw["flush_interval"], kw["base_interval"])
    manifests = render(spec, select_resources(discovery, selection))
    if not kw["apply_"]:
        click.echo(yaml.safe_dump_all(manifests, sort_keys=False), nl=False)
        return
    apply_and_report(app, discovery, manifests, kw["dry_run"] == "server")


COMMANDS = [watch]
