"""restore: plan, (optionally) dry-run, execute; report per object."""

from __future__ import annotations

import dataclasses
import functools
import signal
import threading
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

import click

from statusvault.archive.envelope import Keyring
from statusvault.cli.app import App
from statusvault.cli.completion import complete_backup
from statusvault.cli.declared import SHARED_CLIENT, option
from statusvault.cli.flags import (
    MetricsArgs,
    SelectionArgs,
    StorageArgs,
    TrustedKeysArgs,
    allow_privileged_option,
    cluster_resources_option,
    dry_run_option,
    keys_options,
    metrics_options,
    output_option,
    pass_args,
    selection_options,
    state_dir_option,
    storage_options,
    strict_option,
    verify_options,
)
from statusvault.cli.output import OutputFormat, emit, emit_items
from statusvault.cli.restoreview import render
from statusvault.errors import ExitStatus, Interrupted, PartialFailure, StatusVaultError
from statusvault.kube.client import KubeClient
from statusvault.model import DryRun
from statusvault.processes import WorkerSettings
from statusvault.restore.configfile import read_config
from statusvault.restore.core.settle import SETTLE_ENV, SETTLE_SECONDS
from statusvault.restore.modifiers import Modifiers, load_modifiers
from statusvault.restore.options import PARALLEL, FenceMode, RestoreOptions, restore_options
from statusvault.restore.quiet.fencing import FencePlan
from statusvault.restore.results.verdict import RunOutcome, Verdict
from statusvault.restore.runner import RestoreRequest, RestoreResult, fence_report, restore_with
from statusvault.restore.running.workers import MIN_WAVE, default_processes
from statusvault.runtime.stopping import Stop, on_signals
from statusvault.storage.base import ObjectStore

T = TypeVar("T")


@dataclasses.dataclass(frozen=True, kw_only=True)
class RestoreOptionArgs(SelectionArgs):
    """The options of a restore that a move has too."""

    namespace_mapping: tuple[str, ...]
    pause: str
    pause_annotation: str
    pause_field: str
    pause_resources: tuple[str, ...]
    modifiers_file: str | None
    allow_privileged_resources: tuple[str, ...]

    def options(self) -> RestoreOptions:
        """RestoreOptions from every restore option the command has, read as a restore intent's are."""
        options = restore_options(dataclasses.asdict(self))
        if self.modifiers_file:
            options = dataclasses.replace(options, modifiers=read_modifiers(self.modifiers_file))
        return options


@dataclasses.dataclass(frozen=True, kw_only=True)
class RestoreArgs(StorageArgs, RestoreOptionArgs, TrustedKeysArgs, MetricsArgs):
    backup_name: str
    status_include_resources: tuple[str, ...]
    status_exclude_resources: tuple[str, ...]
    no_status: bool
    existing_resource_policy: str
    dry_run: DryRun
    parallel: int
    processes: int | None
    qps: float
    burst: int
    scale_down: tuple[str, ...]
    fence: str
    fence_exclude: tuple[str, ...]
    keep_paused: tuple[str, ...]
    order: str | None
    strict: bool
    state_dir: str
    at: str | None
    from_velero: bool
    restart: bool
    stream: bool | None
    settle_seconds: float
    output: OutputFormat


@click.command("restore")
@click.argument("backup_name", metavar="BACKUP", shell_complete=complete_backup)
@storage_options
@selection_options
@cluster_resources_option
@click.option("--namespace-mapping", multiple=True, metavar="OLD:NEW,...", help="Restore into other namespaces.")
@allow_privileged_option
@click.option(
    "--status-include-resources",
    multiple=True,
    metavar="R,...|'*'",
    help="Restore status only for these resources ('*' = all, built-ins included). [default: every custom resource]",
)
@click.option("--status-exclude-resources", multiple=True, metavar="R,...", help="Never restore their status.")
@click.option("--no-status", is_flag=True, help="Do not restore any status.")
@click.option(
    "--existing-resource-policy",
    type=click.Choice(["none", "update"]),
    default="none",
    show_default=True,
    help="What to do with objects that already exist.",
)
@dry_run_option("client: print the plan, change nothing; server: send every write with dryRun=All.")
@click.option(
    "--parallel",
    type=click.IntRange(1, 128),
    default=PARALLEL,
    show_default=True,
    envvar="STATUSVAULT_PARALLEL",
    help="Concurrent requests per process.",
)
@click.option(
    "--processes",
    type=click.IntRange(1, 64),
    default=None,
    envvar="STATUSVAULT_PROCESSES",
    help="Worker processes for large waves (each with --parallel requests in flight). "
    "[default: the CPUs this process may use (cgroup-aware), at most 8]",
)
@option(
    "--qps",
    left_out=SHARED_CLIENT,
    type=click.FloatRange(0),
    default=0.0,
    show_default=True,
    envvar="STATUSVAULT_QPS",
    help="Client-side request rate limit (0 = none; the server's 429s are always honoured).",
)
@option(
    "--burst",
    left_out=SHARED_CLIENT,
    type=click.IntRange(1),
    default=100,
    show_default=True,
    envvar="STATUSVAULT_BURST",
)
@option(
    "--settle-seconds",
    left_out={"Restore": "the controller's own (its STATUSVAULT_SETTLE_SECONDS)"},
    type=click.FloatRange(0, 600),
    default=SETTLE_SECONDS,
    show_default=True,
    envvar=SETTLE_ENV,
    help="After the last write, wait this long, then read the cluster back: every object of the restore missing, "
    "without its saved status, or whose status another writer (an unfenced operator) has written since is named: "
    "exit 3. 0: read at once.",
)
@click.option(
    "--scale-down",
    multiple=True,
    metavar="NAMESPACE/KIND/NAME,...",
    help="Scale these operators to 0 while restoring (and back afterwards), so none acts on an object "
    "before its status is back.",
)
@click.option(
    "--fence",
    type=click.Choice(["none", "auto", "report", "best-effort"]),
    default="none",
    show_default=True,
    help="Find the controllers that may write the restored status (from RBAC) and fence them: pause their objects "
    "or scale them to 0 and back. report: print that plan, write nothing; best-effort: go on without fencing "
    "when RBAC cannot be read.",
)
@click.option(
    "--fence-exclude",
    multiple=True,
    metavar="NAMESPACE/NAME,...",
    help="Workloads --fence leaves running.",
)
@click.option(
    "--pause",
    type=click.Choice(["none", "auto"]),
    default="none",
    show_default=True,
    help="auto: create each object already paused for its operator (Crossplane, Cluster API, Flux, Argo Rollouts) "
    "and unpause once every object has its status.",
)
@click.option(
    "--pause-annotation", default="", metavar="KEY=VALUE", help="Pause --pause-resources with this annotation."
)
@click.option("--pause-field", default="", metavar="/POINTER=VALUE", help="Pause --pause-resources with this field.")
@click.option("--pause-resources", multiple=True, metavar="R,...", help="Resources (resource.group, wildcards) the "
              "generic pause marker applies to.")  # fmt: skip
@click.option("--keep-paused", multiple=True, metavar="R,...", help="Leave these resources paused at the end; "
              "release them with `statusvault unpause` (or the same restore without this option).")  # fmt: skip
@click.option(
    "--modifiers",
    "modifiers_file",
    type=click.Path(dir_okay=False),
    help="Restore-time patches: a YAML file in Velero's resource-modifier format (docs/how-to/restore-elsewhere.md).",
)
@click.option(
    "--order",
    metavar="PROFILE|FILE",
    help="Restore in dependency groups, waiting on a readiness gate between them: a profile (crossplane, "
    "cluster-api/capi, cnpg, flux, argo-rollouts) or an order file (docs/how-to/restore-in-order.md).",
)
@strict_option
@state_dir_option
@keys_options
@verify_options
@click.option(
    "--from-velero",
    is_flag=True,
    help="BACKUP is a Velero backup: a tarball on disk, or a backup in the --storage location's Velero layout "
    "(backups/NAME/NAME.tar.gz). Read and checked as any archive, then restored with every option; unauthenticated, "
    "so the trust rules of a plaintext backup apply.",
)
@option(
    "--at",
    metavar="RFC3339|latest",
    help="BACKUP names a watch: restore its state at this moment (e.g. 2026-11-22T10:15:00Z), or the latest.",
)
@option(
    "--restart",
    left_out={"Restore": "a new Restore resumes the journal; discard it with `statusvault restore --restart`"},
    is_flag=True,
    help="Discard the journal of an earlier, unfinished run of this restore and start over.",
)
@click.option(
    "--stream/--no-stream",
    default=None,
    help="Write objects as the archive is read (first write in about a second at any size) or plan first, after "
    "checking every member. Default: an authenticated backup of more than 20,000 objects streams (encrypted and "
    "opened by a key given, or signed and verified with --verify-key-file: every byte is its writer's), anything "
    "else plans first. Streamed, a member that breaks a rule stops the "
    "restore after the objects before it were written. --dry-run, --fence and --order plan first.",
)
@metrics_options
@output_option
@pass_args(RestoreArgs, check=True)
def restore_cmd(app: App, args: RestoreArgs) -> None:
    """Restore a backup: create each object, then write its saved status through /status."""
    _restore(app, args, unpause=False)


def _restore(app: App, args: RestoreArgs, unpause: bool) -> None:
    if args.fence == FenceMode.REPORT:
        name, plan = fence_plan(app, args, unpause)
        text = "\n".join([f"Fencing a restore of {name} would do (nothing written):", *plan.lines()])
        emit({"backup": name, **plan.to_dict()}, args.output, text)
        return
    with on_signals(Stop()) as stop:  # SIGINT, SIGTERM: the writes in flight finish, then the report
        name, result = judged_restore(app, args, unpause, stop, say=_say)
    report, judged = result.report, result.verdict
    try:
        header = {**report.header(), "verdict": judged.to_dict()}
        emit_items(header, report.result_lines(), args.output, lambda: render(report))
    finally:
        report.close()
    _check_outcome(judged, name, args.dry_run, stop.signum)


def _say(line: str) -> None:
    click.echo(line, err=True)


Say = Callable[[str], None]
Run = Callable[[ObjectStore, str, str], T]


def judged_restore(
    app: App, args: RestoreArgs, unpause: bool, cancel: threading.Event | None, say: Say
) -> tuple[str, RestoreResult]:
    """The restore the options ask for, run and judged, its metrics published (--metrics-*): the name it restored
    (a watch's moment, an imported Velero backup) and its result. The CLI prints it; the API returns it."""
    with args.recorded("restore") as run:
        name, result = _source(app, args, say, functools.partial(_restored, app, args, unpause, cancel))
        run.success, run.duration = result.verdict.outcome is RunOutcome.DONE, result.report.duration
        run.objects, run.errors = result.report.total, len(result.report.failures)
    return name, result


def fence_plan(app: App, args: RestoreArgs, unpause: bool, say: Say = _say) -> tuple[str, FencePlan]:
    """--fence report: what fencing a restore of the backup would do; nothing is written."""
    return _source(app, args, say, functools.partial(_planned, app, args, unpause))


def _source(app: App, args: RestoreArgs, say: Say, run: Run[T]) -> tuple[str, T]:
    """`run` on the backup the options name: a stored backup, a watch's moment (--at, rebuilt unencrypted) or a
    Velero backup (--from-velero, read and checked into a temporary native backup)."""
    store = app.store(args.storage, args.s3())
    if args.from_velero:
        from statusvault.velero import backups as velero

        with velero.imported(args.backup_name, store) as (temp, name, read):
            say(f"restoring Velero backup {args.backup_name} (format {read.format_version}, {read.total} objects)"
                f"{read.left_out_note()}")  # fmt: skip
            return name, run(temp, name, f"velero-{name}")  # its journal is keyed by the Velero source
    if not args.at:
        return args.backup_name, run(store, args.backup_name, "")
    from statusvault.watch.pointintime import moment_of

    with moment_of(store, args.backup_name, args.at, args.keys()) as moment:
        say(f"restoring watch {args.backup_name} as it was at {moment.at.isoformat()} (as {moment.name})")
        return moment.name, run(moment.store, moment.name, moment.lineage)


def _restored(
    app: App, args: RestoreArgs, unpause: bool, cancel: threading.Event | None, store: ObjectStore, backup: str,
    lineage: str,
) -> RestoreResult:  # fmt: skip
    client, request = _on_cluster(app, args, unpause, store, backup, lineage)
    request.cancel = cancel
    return restore_with(request, client=client, discover=lambda refresh: app.discovery(refresh=refresh),
                        strict=args.strict)  # fmt: skip


def _planned(app: App, args: RestoreArgs, unpause: bool, store: ObjectStore, backup: str, lineage: str) -> FencePlan:
    client, request = _on_cluster(app, args, unpause, store, backup, lineage)
    return fence_report(client, lambda refresh: app.discovery(refresh=refresh), request)


def _on_cluster(
    app: App, args: RestoreArgs, unpause: bool, store: ObjectStore, backup: str, lineage: str
) -> tuple[KubeClient, RestoreRequest]:
    """The client the options ask for and the restore's request; a bad option is refused before the cluster is
    reached."""
    options = args.options()
    client = app.client(pool_size=args.parallel + 4, qps=args.qps, burst=args.burst)
    request = restore_request(app, args, options=options, store=store, backup=backup, unpause=unpause,
                              lineage=lineage)  # fmt: skip
    return client, request


def _keys_of(args: RestoreArgs) -> Keyring | None:
    """The keys a restore reads its backup with: none for a watch's moment (rebuilt unencrypted); for a Velero
    backup (imported unencrypted, unsigned) only the verification keys, which refuse it as any unsigned backup."""
    if args.at:
        return None
    if args.from_velero:
        return Keyring((), args.verifiers())
    return args.keys()


def restore_request(
    app: App,
    args: RestoreArgs,
    *,
    options: RestoreOptions,
    store: ObjectStore,
    backup: str,
    unpause: bool,
    lineage: str = "",
) -> RestoreRequest:
    """The restore the options ask for, of `backup` in `store`: a stored backup, or a watch's moment (--at), which
    is rebuilt unencrypted."""
    return RestoreRequest(
        store=store,
        backup=backup,
        options=options,
        state_dir=Path(args.state_dir),
        restart=args.restart,
        stream=args.stream,
        key=_keys_of(args),
        parallel=args.parallel,
        workers=worker_spec(app, args),
        progress=app.progress(),
        unpause=unpause,
        lineage=lineage,
        settle=args.settle_seconds,
    )


def _check_outcome(judged: Verdict, backup_name: str, dry_run: DryRun, signum: int = 0) -> None:
    check_outcome(judged, f"restore of {backup_name}", dry_run, signum)


def check_outcome(judged: Verdict, what: str, dry_run: DryRun = DryRun.NONE, signum: int = 0, then: str = "") -> None:
    """The exit status of a reported restore or move, from its one verdict (restore/results/verdict.py); an
    interrupted one's is 128 + the signal's number (130 for SIGINT, 143 for SIGTERM). `then`: what else a run that
    fell short leaves to do (a move's source stays paused)."""
    if judged.outcome is RunOutcome.INTERRUPTED:
        again = ": run the same command again to resume" if dry_run == DryRun.NONE else ""
        stopped = Interrupted(f"{what} interrupted{again}")
        if signum == signal.SIGTERM:
            stopped.exit_status = ExitStatus.TERMINATED
        raise stopped
    if judged.outcome is RunOutcome.FAILED:
        again = "; run the same command again to resume" if dry_run == DryRun.NONE else ""
        raise StatusVaultError(judged.message(what) + again + then)
    if judged.outcome is RunOutcome.PARTIAL:
        raise PartialFailure(judged.message(what) + then)


def worker_spec(app: App, args: RestoreArgs) -> WorkerSettings:
    """Worker processes reach the cluster as this process does; the QPS budget is shared by all of them."""
    explicit = args.processes is not None  # then every wave goes to the processes, small ones too
    processes = args.processes or default_processes()
    return WorkerSettings(
        kubeconfig=app.kubeconfig,
        context=app.worker_context(),
        processes=processes,
        parallel=args.parallel,
        qps=args.qps,
        burst=args.burst,
        min_wave=0 if explicit else MIN_WAVE,
        log_format=app.log_format,
        debug=app.debug,
    )


def read_modifiers(path: str) -> Modifiers:
    return load_modifiers(read_config(path, "modifiers file"), path)


unpause_cmd = click.Command(
    "unpause",
    callback=pass_args(RestoreArgs, check=True)(functools.partial(_restore, unpause=True)),
    params=restore_cmd.params,
    help="Finish an earlier restore (same backup and options) and unpause what it left paused, "
    "--keep-paused types included.",
)

COMMANDS = (restore_cmd, unpause_cmd)
