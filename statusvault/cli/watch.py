"""watch run (continuous backup under a Lease) and watch render (its Deployment and RBAC)."""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import logging
import os
import signal
import socket
import threading
from typing import Any

import click

from statusvault.backup.selection import select_resources
from statusvault.cli.app import App
from statusvault.cli.controller import default_namespace
from statusvault.cli.flags import (
    EncryptionArgs,
    ManifestArgs,
    SelectionArgs,
    SigningArgs,
    StorageArgs,
    cluster_resources_option,
    encryption_option,
    manifest_options,
    pass_args,
    selection_options,
    signing_options,
    storage_options,
)
from statusvault.cli.schedule import print_or_apply
from statusvault.schedule import ScheduleSpec
from statusvault.storage.base import validate_backup_name, watch_prefix
from statusvault.store.retention import parse_duration
from statusvault.watch.engine import WatchConfig, WatchEngine
from statusvault.watch.install import WatchSpec, render

log = logging.getLogger(__name__)


@dataclasses.dataclass(frozen=True, kw_only=True)
class IntervalArgs:
    """--flush-interval and --base-interval (_interval_options)."""

    flush_interval: float
    base_interval: str


@dataclasses.dataclass(frozen=True, kw_only=True)
class WatchRunArgs(StorageArgs, SelectionArgs, IntervalArgs, EncryptionArgs, SigningArgs):
    name: str
    segment_max_bytes: int
    lease_namespace: str
    holder: str
    lease_seconds: int
    page_size: int
    metrics_port: int
    metrics_address: str
    metrics_textfile: str | None


@dataclasses.dataclass(frozen=True, kw_only=True)
class WatchRenderArgs(StorageArgs, SelectionArgs, IntervalArgs, ManifestArgs):
    name: str
    namespace_of_watch: str
    replicas: int


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
@click.option(
    "--metrics-address",
    default="127.0.0.1",
    show_default=True,
    help="The address --metrics-port listens on (0.0.0.0: every interface, as `watch install`'s pod does).",
)
@click.option("--metrics-textfile", type=click.Path(dir_okay=False), help="Write metrics here at each flush.")
@encryption_option
@signing_options
@pass_args(WatchRunArgs, check=True)
def run_cmd(app: App, args: WatchRunArgs) -> None:
    """Keep NAME's record: LIST then WATCH the selected resources, write a base and chained segments.

    Runs until SIGTERM or Ctrl-C (the buffered changes are flushed first). With several replicas, the one
    holding the Lease statusvault-watch-NAME writes; a new writer continues the chain from the last flushed
    resourceVersion, or starts a new base when it cannot (and says so)."""
    from statusvault.watch.metrics import WatchMetrics

    validate_backup_name(args.name)
    store = app.store(args.storage, args.s3())
    key = args.key()
    config = watch_config(args)
    next(iter(store.list(watch_prefix(args.name))), None)  # a listing checks the store: bucket, credentials, access
    metrics = WatchMetrics(args.name, args.metrics_textfile)
    if args.metrics_port:
        metrics.serve(args.metrics_port, args.metrics_address)
    engine = WatchEngine(app.client(), lambda: app.discovery(refresh=True), store, config, key, metrics)
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, functools.partial(_stop, engine.stop))
    with contextlib.suppress(KeyboardInterrupt):
        engine.run()
    engine.stop.set()
    click.echo(f"watch {args.name} stopped", err=True)


def watch_config(args: WatchRunArgs) -> WatchConfig:
    """The watch the options ask for."""
    return WatchConfig(
        name=args.name,
        selection=args.selection(),
        lease_namespace=args.lease_namespace,
        holder=args.holder,
        flush_interval=args.flush_interval,
        base_interval=parse_duration(args.base_interval).total_seconds(),
        max_segment_bytes=args.segment_max_bytes,
        lease_seconds=args.lease_seconds,
        page_size=args.page_size,
        signer=args.signer(),
    )


def _stop(stop: threading.Event, signum: int, frame: object) -> None:
    """The first SIGTERM or Ctrl-C stops the watch cleanly (buffered changes flushed, the Lease released, so a
    standby takes over at once); a second one stops it now."""
    if stop.is_set():
        raise KeyboardInterrupt
    stop.set()


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
@pass_args(WatchRenderArgs)
def render_cmd(app: App, args: WatchRenderArgs) -> None:
    """Print (or --apply) the ServiceAccount, RBAC (get/list/watch on the watched types) and Deployment."""
    validate_backup_name(args.name)
    args.check_in_cluster("an in-cluster watch")
    parse_duration(args.base_interval)
    spec = watch_spec(args)
    discovery = app.discovery()
    print_or_apply(app, discovery, render(spec, select_resources(discovery, spec.schedule.selection)), args)


def watch_spec(args: WatchRenderArgs) -> WatchSpec:
    """The in-cluster watch the options ask for: its pods run `watch run` as a scheduled backup's run `backup`."""
    schedule = ScheduleSpec(name=args.name, cron="", selection=args.selection(), storage=str(args.storage),
                            s3=args.s3(), job_namespace=args.namespace_of_watch, image=args.image,
                            credentials_secret=args.credentials_secret,
                            encryption_secret=args.encryption_key_secret, ca_pem=args.ca_pem())  # fmt: skip
    return WatchSpec(
        schedule, replicas=args.replicas, flush_interval=args.flush_interval, base_interval=args.base_interval
    )


COMMANDS = [watch]
