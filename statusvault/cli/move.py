"""move: custom resources with their status from one cluster to another, operators paused on both sides."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import click

from statusvault.cli.app import App
from statusvault.cli.flags import (
    StorageArgs,
    allow_privileged_option,
    cluster_resources_option,
    output_option,
    pass_args,
    selection_options,
    state_dir_option,
    storage_options,
    strict_option,
)
from statusvault.cli.output import OutputFormat, emit
from statusvault.cli.restore import RestoreOptionArgs, check_outcome
from statusvault.cli.restoreview import render
from statusvault.kube.discovery import Discovery, discover
from statusvault.move import (
    AbortReport,
    MoveReport,
    MoveRequest,
    Side,
    abort_move,
    check_distinct,
    fence_report,
    request_name,
    run_move,
)
from statusvault.restore.options import PARALLEL, FenceMode
from statusvault.restore.results.verdict import RunOutcome
from statusvault.runtime.stopping import Stop, on_signals


@dataclasses.dataclass(frozen=True, kw_only=True)
class MoveArgs(StorageArgs, RestoreOptionArgs):
    from_kubeconfig: str | None
    from_context: str | None
    to_kubeconfig: str | None
    to_context: str | None
    fence: str
    fence_exclude: tuple[str, ...]
    backup_name: str
    parallel: int
    delete_source: bool
    yes: bool
    abort: bool
    strict: bool
    state_dir: str
    output: OutputFormat
    with_dependencies: bool | None


@click.command("move")
@click.option(
    "--from-kubeconfig", type=click.Path(dir_okay=False), help="The source's kubeconfig [default: --kubeconfig]."
)
@click.option("--from-context", help="The source's context.")
@click.option(
    "--to-kubeconfig", type=click.Path(dir_okay=False), help="The target's kubeconfig [default: --kubeconfig]."
)
@click.option("--to-context", help="The target's context.")
@storage_options
@selection_options
@cluster_resources_option
@click.option("--namespace-mapping", multiple=True, metavar="OLD:NEW,...", help="Move into other namespaces.")
@allow_privileged_option
@click.option(
    "--with-dependencies/--no-with-dependencies",
    default=None,
    help="Move what the moved custom resources need too (owned objects, the Secrets and ConfigMaps they name, "
    "project rules: docs/dependencies.md); the move's record is then encrypted with a key of its own, kept in "
    "--state-dir. [default: on for Cluster API and CloudNativePG objects, without their Secrets (the record is "
    "not encrypted); else off]",
)
@click.option("--pause", type=click.Choice(["auto"]), default="auto", show_default=True, help="Pause markers.")
@click.option(
    "--pause-annotation", default="", metavar="KEY=VALUE", help="Pause --pause-resources with this annotation."
)
@click.option("--pause-field", default="", metavar="/POINTER=VALUE", help="Pause --pause-resources with this field.")
@click.option("--pause-resources", multiple=True, metavar="R,...", help="Resources the generic marker applies to.")
@click.option(
    "--fence",
    type=click.Choice(["none", "auto", "report", "best-effort"]),
    default="none",
    show_default=True,
    help="Find the target's controllers that may write the moved status (from its RBAC) and fence them while the "
    "target is restored. report: print that plan, write nothing; best-effort: go on unfenced when RBAC cannot be read.",
)
@click.option("--fence-exclude", multiple=True, metavar="NAMESPACE/NAME,...", help="Workloads --fence leaves running.")
@click.option("--modifiers", "modifiers_file", type=click.Path(dir_okay=False), help="Restore-time patches (YAML).")
@click.option(
    "--backup-name", default="", help="The backup kept as the move's record [default: derived from the move]."
)
@click.option(
    "--parallel", type=click.IntRange(1, 128), default=PARALLEL, show_default=True, help="Concurrent workers."
)
@click.option("--delete-source", is_flag=True, help="After a verified move, delete the moved objects in the source.")
@click.option("--yes", is_flag=True, help="Confirm --delete-source without asking.")
@click.option("--abort", is_flag=True, help="Give the move up (the same command plus --abort): delete its paused "
              "copies in the target and its record, unpause the source.")  # fmt: skip
@strict_option
@state_dir_option
@output_option
@pass_args(MoveArgs, check=True)
def move_cmd(app: App, args: MoveArgs) -> None:
    """Move custom resources with their status: pause the source, back it up, restore into the target paused,
    verify, unpause the target; the source stays paused (or --delete-source). Run it again to resume."""
    request = prepared_move(app, args)
    if request.options.fence == FenceMode.REPORT and not args.abort:
        fence = fence_report(request)
        text = "\n".join([f"Fencing the target for move {request_name(request)} would do (nothing written):",
                          *fence.lines()])  # fmt: skip
        emit({"backup": request_name(request), **fence.to_dict()}, args.output, text)
        return
    if args.delete_source and not args.yes and not args.abort:
        click.confirm("Delete the moved objects in the source once the move is verified?", abort=True)
    if args.abort:
        _show_abort(abort_move(request))
        return
    with on_signals(Stop()) as stop:  # SIGINT, SIGTERM: the writes in flight finish, then the report
        report = run_move(dataclasses.replace(request, cancel=stop))
    _show(report, args.output)
    left = "; the source stays paused: run the same command again, or with --abort to give the source back"
    check_outcome(report.verdict, f"move {report.name}", signum=stop.signum, then=left)


def prepared_move(app: App, args: MoveArgs) -> MoveRequest:
    """The move the options ask for, between two clusters known to be two (check_distinct: refused before any
    write when they are one cluster under two names): what the CLI runs and api.move runs."""
    source = _cluster(app, args.from_kubeconfig or app.kubeconfig, args.from_context or app.context)
    target = _cluster(app, args.to_kubeconfig or app.kubeconfig, args.to_context or app.context)
    request = move_request(app, args, source, target)
    check_distinct(source.client, target.client, request.options.mapping, request.selection.namespaces)
    return dataclasses.replace(request, distinct=True)


def move_request(app: App, args: MoveArgs, source: Side, target: Side) -> MoveRequest:
    """The move the options ask for, between the two clusters."""
    options = args.options()
    return MoveRequest(
        source=source,
        target=target,
        store=app.store(args.storage, args.s3()),
        selection=args.selection(),
        options=options,
        name=args.backup_name,
        state_dir=Path(args.state_dir),
        parallel=args.parallel,
        delete_source=args.delete_source,
        with_dependencies=args.with_dependencies,
        strict=args.strict,
    )


def _cluster(app: App, kubeconfig: str | None, context: str | None) -> Side:
    client = app.client_of(kubeconfig, context, pool_size=20)
    cache: dict[str, Discovery] = {}

    def discovered(refresh: bool) -> Discovery:
        if refresh or "d" not in cache:
            cache["d"] = discover(client)
        return cache["d"]

    return Side(client, discovered)


def _show_abort(report: AbortReport) -> None:
    dropped = f"record {report.name} dropped (the same command starts a fresh move)" if report.record_dropped else ""
    click.echo(
        f"move aborted: {report.source_unpaused} object(s) unpaused in the source, "
        f"{report.target_deleted} paused copy(ies) deleted in the target" + (f"; {dropped}" if dropped else "")
    )


def _show(report: MoveReport, output: OutputFormat) -> None:
    restore = report.restore.report if report.restore is not None else None
    lines = [f"Move recorded as backup {report.name}: {report.source_paused} object(s) paused in the source."]
    lines += [f"note: not paused in the source (no pause marker known): {x}" for x in report.source_unpausable]
    if restore is not None:
        lines += ["", render(restore)]
    lines += [f"VERIFY FAILED: {p}" for p in report.verify_problems]
    lines += [f"note: left in the source: {x}" for x in report.source_kept]
    judged = report.verdict
    if judged.outcome is RunOutcome.DONE:
        gone = f"; {report.source_deleted} deleted in the source" if report.source_deleted else ""
        lines.append(f"Move verified: every object and status is in the target{gone}.")
    elif judged.outcome is RunOutcome.PARTIAL:
        lines.append(f"The source stays paused{' and nothing in it was deleted' if report.delete_source else ''}: "
                     "fix what is listed and run the same command again, or run it with --abort to give the source "
                     "back.")  # fmt: skip
    data = {
        "backup": report.name,
        "verdict": judged.to_dict(),
        "sourcePaused": report.source_paused,
        "sourceNotPaused": report.source_unpausable,
        "verifyProblems": report.verify_problems,
        "sourceDeleted": report.source_deleted,
        "sourceKept": report.source_kept,
        "restore": restore.to_dict() if restore is not None else None,
    }
    emit(data, output, "\n".join(lines))
    if restore is not None:
        restore.close()


COMMANDS = (move_cmd,)
