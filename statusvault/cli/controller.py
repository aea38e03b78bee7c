"""controller: reconcile restore-intent ConfigMaps (GitOps restores), in a loop or once."""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import logging
import os
import signal
import socket
from collections.abc import Callable
from pathlib import Path

import click

from statusvault.archive.envelope import FileKek, Keyring
from statusvault.cli.app import App
from statusvault.cli.flags import (
    EncryptionArgs,
    ManifestArgs,
    SigningArgs,
    StorageArgs,
    VerifyKeysArgs,
    apply_options,
    dry_run_option,
    encryption_option,
    manifest_options,
    pass_args,
    pod_options,
    signing_options,
    state_dir_option,
    storage_options,
    verify_options,
)
from statusvault.cli.schedule import print_or_apply
from statusvault.cli.specfields import crds
from statusvault.controller.backups import LockLimits, lock_modes
from statusvault.controller.install import ControllerSpec, render
from statusvault.controller.intent import check_storage
from statusvault.controller.loop import Controller, ControllerConfig
from statusvault.controller.schedules import JobSettings
from statusvault.model import DryRun, split_csv
from statusvault.storage import S3Options
from statusvault.storage.base import ObjectStore

SA_NAMESPACE = Path("/var/run/secrets/kubernetes.io/serviceaccount/namespace")


@dataclasses.dataclass(frozen=True, kw_only=True)
class LockLimitArgs:
    """--lock-modes and --max-lock-for (lock_limit_options)."""

    lock_modes: str
    max_lock_for: str

    def locks(self) -> LockLimits:
        return LockLimits(lock_modes(self.lock_modes), self.max_lock_for.strip())


@dataclasses.dataclass(frozen=True, kw_only=True)
class ControllerRunArgs(StorageArgs, EncryptionArgs, SigningArgs, VerifyKeysArgs, LockLimitArgs):
    namespace: str
    allowed_storage: tuple[str, ...]
    default_service_account: str
    require_service_account: bool
    image: str
    credentials_secret: str
    encryption_key_secret: str
    s3_ca_configmap: str
    interval: float
    once: bool
    holder: str
    lease_seconds: int
    state_dir: str


@dataclasses.dataclass(frozen=True, kw_only=True)
class ControllerRenderArgs(StorageArgs, ManifestArgs, LockLimitArgs):
    namespace: str
    replicas: int
    interval: float
    include_resources: tuple[str, ...]
    require_service_account: bool


def default_namespace() -> str:
    """The pod's own namespace in a cluster, else "statusvault"."""
    try:
        return SA_NAMESPACE.read_text().strip() or "statusvault"
    except OSError:
        return "statusvault"


def lock_limit_options(f: Callable[..., None]) -> Callable[..., None]:
    """--lock-modes and --max-lock-for: what `controller run` lets a Backup or BackupSchedule lock (`controller
    render` and `install` pass them to it)."""
    return apply_options(
        f,
        [
            click.option(
                "--lock-modes",
                default="governance",
                show_default=True,
                envvar="STATUSVAULT_LOCK_MODES",
                metavar="MODE,...",
                help="The S3 Object Lock modes a Backup or BackupSchedule may ask for (spec.lock-mode), "
                "comma-separated from governance and compliance; none (or empty) refuses every mode. Compliance must "
                "be listed to be allowed: nobody, not even the bucket's owner, can delete its files before their date.",
            ),
            click.option(
                "--max-lock-for",
                default="",
                show_default="no maximum",
                envvar="STATUSVAULT_MAX_LOCK_FOR",
                metavar="DURATION",
                help="The longest spec.lock-for a Backup or BackupSchedule may ask for (e.g. 30d, 720h). A legal "
                "hold (spec.legal-hold) is always allowed: whoever may s3:PutObjectLegalHold lifts it.",
            ),
        ],
    )


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
@click.option(
    "--allowed-storage",
    multiple=True,
    envvar="STATUSVAULT_ALLOWED_STORAGE",
    metavar="LOCATION",
    help="The stores a Restore, Backup or intent may name (repeatable; a location or any path under it; the "
    "controller's --storage is always allowed). Without it any store the controller's credentials reach may be "
    "named: whoever may create a Restore may point it at a store they write.",
)
@click.option(
    "--default-service-account",
    default="",
    envvar="STATUSVAULT_DEFAULT_SERVICE_ACCOUNT",
    metavar="NAME",
    help="The ServiceAccount (in --namespace) a Restore or Backup that names none runs as: the controller "
    "impersonates it. Default: the controller's own rights.",
)
@click.option(
    "--require-service-account",
    is_flag=True,
    envvar="STATUSVAULT_REQUIRE_SERVICE_ACCOUNT",
    help="Lockdown: refuse a Restore or Backup that names no spec.serviceAccountName (unless "
    "--default-service-account gives one); the controller never acts with its own rights on the cluster.",
)
@click.option(
    "--s3-ca-configmap",
    default="",
    metavar="NAME",
    help="A ConfigMap (in --namespace) whose ca.crt is the S3 CA bundle: each BackupSchedule's CronJob mounts it "
    "(`controller install --s3-ca-bundle` makes it and passes it, with --s3-ca-bundle the file it is mounted as).",
)
@lock_limit_options
@state_dir_option
@encryption_option
@signing_options
@verify_options
@pod_options
@storage_options
@pass_args(ControllerRunArgs)
def run_cmd(app: App, args: ControllerRunArgs) -> None:
    """Restore declaratively: reconcile restore-intent ConfigMaps into restores, with Lease, phases and Events.

    An intent's data names the backup (and optionally storage and any restore option by its long name).
    When it changes, one replica takes the intent's Lease, records phase InProgress in the status ConfigMap
    <intent>-status, restores (resuming its journal after a crash), and records Complete or Failed; failures
    are retried with exponential backoff. Each BackupSchedule becomes a CronJob running --image with the Secrets
    named here and this --storage (unless its spec names one).
    """
    s3 = args.s3()
    key = args.key()
    keys = Keyring((FileKek(key),) if key is not None else (), args.verifiers())  # verification keys: the admin's
    config = controller_config(app, args)
    controller = Controller(
        app.client(),
        lambda refresh: app.discovery(refresh=refresh),
        functools.partial(_store, app, args, s3),
        config,
        keys,
    )
    if args.once:
        ran = controller.reconcile_all()
        click.echo(f"reconciled restore intents in {config.namespace}: {ran} restore(s) run")
        return
    # a pod stopping: the restore under way stops starting writes, finishes those in flight, scales back and records
    # itself interrupted; then the controller exits (a second SIGTERM stops at once)
    signal.signal(signal.SIGTERM, functools.partial(_terminate, controller))
    with contextlib.suppress(KeyboardInterrupt):
        controller.run_forever()
    click.echo("controller stopped", err=True)


def _store(app: App, args: ControllerRunArgs, s3: S3Options, storage: str | None) -> ObjectStore:
    """The store a resource names (its own storage, else the controller's), if the administrator allows it."""
    if storage and args.allowed_storage:
        check_storage(storage, (*args.allowed_storage, *([str(args.storage)] if args.storage else [])))
    return app.store(storage or args.storage, s3)


def controller_config(app: App, args: ControllerRunArgs) -> ControllerConfig:
    """The controller the options ask for; each intent's restore is built from the intent (controller/loop.py)."""
    from statusvault.watch.pointintime import moment_of  # a Restore's spec.at; the watch sits above the controller

    return ControllerConfig(
        namespace=args.namespace,
        holder=args.holder,
        state_dir=Path(args.state_dir),
        interval=args.interval,
        lease_seconds=args.lease_seconds,
        kubeconfig=app.kubeconfig,
        context=app.worker_context(),
        log_format=app.log_format,
        debug=app.debug,
        signer=args.signer(),
        default_service_account=args.default_service_account,
        require_service_account=args.require_service_account,
        locks=args.locks(),
        moments=moment_of,
        job=JobSettings(
            storage=str(args.storage or ""),
            s3=args.s3(),
            image=args.image,
            credentials_secret=args.credentials_secret,
            encryption_secret=args.encryption_key_secret,
            ca_configmap=args.s3_ca_configmap,
        ),
    )


def _terminate(controller: Controller, signum: int, frame: object) -> None:
    if controller.stop.is_set():
        raise KeyboardInterrupt
    logging.getLogger(__name__).warning("SIGTERM: stopping once the writes in flight are done (again: at once)")
    controller.terminate(signum)


@dataclasses.dataclass(frozen=True, kw_only=True)
class ControllerInstallArgs(StorageArgs, LockLimitArgs):
    namespace: str
    replicas: int
    interval: float
    include_resources: tuple[str, ...]
    require_service_account: bool
    image: str
    credentials_secret: str
    encryption_key_secret: str
    dry_run: DryRun


def controller_options(f: Callable[..., None]) -> Callable[..., None]:
    """What `controller render` and `controller install` share."""
    f = lock_limit_options(f)
    return apply_options(
        f,
        [
            click.option(
                "--namespace", "-n", default="statusvault", show_default=True, help="The controller's namespace."
            ),
            click.option(
                "--replicas",
                type=click.IntRange(1),
                default=1,
                show_default=True,
                help="Replicas (a Lease per intent).",
            ),
            click.option(
                "--interval", type=click.FloatRange(1), default=10.0, show_default=True, help="Seconds between passes."
            ),
            click.option(
                "--include-resources",
                multiple=True,
                metavar="R,...",
                help="Types the controller may restore. [default: every custom resource the cluster serves]",
            ),
            click.option(
                "--require-service-account",
                is_flag=True,
                help="Lockdown: no cluster-wide ClusterRole for the controller; it acts only as the ServiceAccount "
                "each Restore or Backup names (spec.serviceAccountName), which it may impersonate in its namespace.",
            ),
        ],
    )


@controller.command("render")
@controller_options
@manifest_options
@storage_options
@pass_args(ControllerRenderArgs)
def render_cmd(app: App, args: ControllerRenderArgs) -> None:
    """Print (or --apply) the controller's CRDs, ServiceAccount, RBAC and Deployment.

    The Restore CRD (statusvault.dev/v1alpha1) comes first. The ClusterRole lets the controller create and
    update CRDs, namespaces, and each allowed type with its /status subresource; a Role in its namespace covers
    Restores, intents, status ConfigMaps, Leases and Events. A CRD added later needs a re-render.
    """
    _render(app, args)


def _render(app: App, args: ControllerRenderArgs) -> None:
    args.check_in_cluster("an in-cluster controller")
    spec = ControllerSpec(
        namespace=args.namespace,
        storage=str(args.storage),
        s3=args.s3(),
        image=args.image,
        credentials_secret=args.credentials_secret,
        replicas=args.replicas,
        interval=args.interval,
        encryption_secret=args.encryption_key_secret,
        require_service_account=args.require_service_account,
        locks=args.locks(),
        ca_pem=args.ca_pem(),
    )
    discovery = app.discovery()
    names = split_csv(args.include_resources)
    types = [discovery.resolve(n) for n in names] if names else [rt for rt in discovery.custom() if not rt.is_crd]
    own = crds()
    types = [rt for rt in types if rt.qualified not in {c["metadata"]["name"] for c in own}]
    print_or_apply(app, discovery, render(spec, types, own), args)


@controller.command("install")
@controller_options
@pod_options
@dry_run_option("client: print the manifests, apply nothing; server: send every write with dryRun=All.")
@storage_options
@pass_args(ControllerInstallArgs)
def install_cmd(app: App, args: ControllerInstallArgs) -> None:
    """Install the controller: its CRDs (Restore), least-privilege RBAC and Deployment (server-side apply).

    The same manifests as `controller render`; with --dry-run=client they are printed and nothing is applied.
    """
    values = {k: v for k, v in dataclasses.asdict(args).items() if k != "dry_run"}
    render_args = ControllerRenderArgs(**values, apply_=True, dry_run=args.dry_run)
    _render(app, render_args)


COMMANDS = [controller]
