"""controller: reconcile restore-intent ConfigMaps (GitOps restores), in a loop or once."""

from __future__ import annotations

import contextlib
import os
import signal
import socket
from pathlib import Path
from typing import Any

import click

from statusvault.cli.app import App
from statusvault.cli.options import s3_options, state_dir_option, storage_options
from statusvault.controller.loop import Controller, ControllerConfig

SA_NAMESPACE = Path("/var/run/secrets/kubernetes.io/serviceaccount/namespace")


def default_namespace() -> str:
    """The pod's own namespace in a cluster, else "statusvault"."""
    try:
        return SA_NAMESPACE.read_text().strip() or "statusvault"
    except OSError:
        return "statusvault"


@click.command("controller")
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
@storage_options
@click.pass_obj
def controller_cmd(app: App, /, **kw: Any) -> None:
    """Restore declaratively: reconcile restore-intent ConfigMaps into restores, with Lease, phases and Events.

    An intent's data names the backup (and optionally storage and any restore option by its long name).
    When it changes, one replica takes the intent's Lease, records phase InProgress in the status ConfigMap
    <intent>-status, restores (resuming its journal after a crash), and records Complete or Failed; failures
    are retried with exponential backoff.
    """
    s3 = s3_options(kw)
    default_storage = kw.pop("storage")
    config = ControllerConfig(
        namespace=kw["namespace"],
        holder=kw["holder"],
        state_dir=Path(kw["state_dir"]),
        interval=kw["interval"],
        lease_seconds=kw["lease_seconds"],
    )
    controller = Controller(
        app.client(),
        lambda refresh: app.discovery(refresh=refresh),
        lambda storage: app.store(storage or default_storage, s3),
        config,
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


COMMANDS = [controller_cmd]
