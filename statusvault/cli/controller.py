"""controller: reconcile restore-intent ConfigMaps (GitOps restores), in a loop or once."""

from __future__ import annotations

import contextlib
import os
import signal
import socket
from pathlib import Path
from typing import Any

import click
import yaml

from statusvault.cli.app import App
from statusvault.cli.options import (
    encryption_key,
    encryption_option,
    manifest_options,
    s3_options,
    split_csv,
    state_dir_option,
    storage_options,
)
from statusvault.cli.schedule import apply_and_report
from statusvault.controller.install import ControllerSpec, render
from statusvault.controller.loop import Controller, ControllerConfig
from statusvault.errors import ConfigError

SA_NAMESPACE = Path("/var/run/secrets/kubernetes.io/serviceaccount/namespace")


def default_namespace() -> str:
    """The pod's own namespace in a cluster, else "statusvault"."""
    try:
        return SA_NAMESPACE.read_text().strip() or "statusvault"
    except OSError:
        return "statusvault"


@click.group("controller")
def controller() -> None:
    """The in-cluster restore controller: GitOps restores through restore-intent ConfigMaps."""


@controller.command("run")
@click.option(
    "--namespace",
    "-n",
    default=default_namespace,
    show_default="the pod's namespace, else statusvault",
    envvar="STATUSVAULT_CONTROLLER_NAMESPACE",
    help="Where the restore intents (ConfigMaps labelled statusvault.io/restore-intent=true) live.",
)
@click.option(
    "--interval",
    type=click.FloatRange(1),
    default=10.0,
    show_default=True,
    help="Seconds between reconcile passes.",
)
@click.option("--once", is_flag=True, help="Run one reconcile pass and exit (for a CronJob or a test).")
@click.option(
    "--holder",
    default=lambda: os.environ.get("POD_NAME") or socket.gethostname(),
    show_default="$POD_NAME, else the host name",
    help="This replica's identity in the Lease.",
)
@click.option(
    "--lease-seconds",
    type=click.IntRange(15),
    default=60,
    show_default=True,
    help="How long a Lease lasts without renewal before another replica may take an intent over.",
)
@state_dir_option
@encryption_option
@storage_options
@click.pass_obj
def run_cmd(app: App, /, **kw: Any) -> None:
    """Restore declaratively: reconcile restore-intent ConfigMaps into restores, with Lease, phases and Events.

    An intent's data names the backup (and optionally storage and any restore option by its long name).
    When it changes, one replica takes the intent's Lease, records phase InProgress in the status ConfigMap
    <intent>-status, restores (resuming its journal after a crash), and records Complete or Failed; failures
    are retried with exponential backoff.
    """
    s3 = s3_options(kw)
    default_storage = kw.pop("storage")
    key = encryption_key(kw)
    config = ControllerConfig(
        namespace=kw["namespace"],
        holder=kw["holder"],
        state_dir=Path(kw["state_dir"]),
        interval=kw["interval"],
        lease_seconds=kw["lease_seconds"],
        kubeconfig=app.kubeconfig,
        context=app.worker_context(),
        log_format=app.log_format,
        debug=app.debug,
    )
    controller = Controller(
        app.client(),
        lambda refresh: app.discovery(refresh=refresh),
        lambda storage: app.store(storage or default_storage, s3),
        config,
        key,
    )
    if kw["once"]:
        ran = controller.reconcile_all()
        click.echo(f"reconciled restore intents in {config.namespace}: {ran} restore(s) run")
        return
    signal.signal(signal.SIGTERM, _interrupt)  # a pod stopping: end the current restore as if Ctrl-C, then exit
    with contextlib.suppress(KeyboardInterrupt):
        controller.run_forever()
    click.echo("controller stopped", err=True)


def _interrupt(signum: int, frame: object) -> None:
    raise KeyboardInterrupt


@controller.command("render")
@click.option("--namespace", "-n", default="statusvault", show_default=True, help="The controller's namespace.")
@manifest_options
@click.option("--replicas", type=click.IntRange(1), default=1, show_default=True, help="Replicas (a Lease per intent).")
@click.option("--interval", type=click.FloatRange(1), default=10.0, show_default=True, help="Seconds between passes.")
@click.option(
    "--include-resources",
    multiple=True,
    metavar="R,...",
    help="Types the controller may restore. [default: every custom resource the cluster serves]",
)
@storage_options
@click.pass_obj
def render_cmd(app: App, /, **kw: Any) -> None:
    """Print (or --apply) the controller's ServiceAccount, RBAC and Deployment.

    The ClusterRole lets it create and update CRDs, namespaces, and each allowed type with its /status
    subresource; a Role in its namespace covers intents, status ConfigMaps, Leases and Events. A CRD added
    later needs a re-render.
    """
    s3 = s3_options(kw)
    if not str(kw["storage"] or "").startswith("s3://"):
        raise ConfigError(
            "an in-cluster controller needs --storage s3://bucket/prefix: a pod's filesystem does not last"
        )
    discovery = app.discovery()
    names = split_csv(kw["include_resources"])
    types = [discovery.resolve(n) for n in names] if names else [rt for rt in discovery.custom() if not rt.is_crd]
    spec = ControllerSpec(
        kw["namespace"],
        kw["storage"],
        s3,
        kw["image"],
        kw["credentials_secret"],
        kw["replicas"],
        kw["interval"],
        kw["encryption_key_secret"],
    )
    manifests = render(spec, types)
    if not kw["apply_"]:
        click.echo(yaml.safe_dump_all(manifests, sort_keys=False), nl=False)
        return
    apply_and_report(app, discovery, manifests, kw["dry_run"] == "server")


COMMANDS = [controller]
