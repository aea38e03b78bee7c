"""move: custom resources with their status from one cluster to another, operators paused on both sides."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import click

from statusvault.cli.app import App
from statusvault.cli.options import (
    cluster_resources_option,
    output_option,
    s3_options,
    selection_options,
    split_csv,
    state_dir_option,
    storage_options,
    strict_option,
)
from statusvault.cli.output import emit
from statusvault.cli.restore import check_strict, read_modifiers, render
from statusvault.errors import PartialFailure
from statusvault.kube.discovery import Discovery, discover
from statusvault.model import Selection
from statusvault.move import AbortReport, Cluster, MoveReport, MoveRequest, abort_move, check_distinct, run_move
from statusvault.optiontable import check_options
from statusvault.restore.options import restore_options


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
@click.option("--pause", type=click.Choice(["auto"]), default="auto", show_default=True, help="Pause markers.")
@click.option(
    "--pause-annotation", default="", metavar="KEY=VALUE", help="Pause --pause-resources with this annotation."
)
@click.option("--pause-field", default="", metavar="/POINTER=VALUE", help="Pause --pause-resources with this field.")
@click.option("--pause-resources", multiple=True, metavar="R,...", help="Resources the generic marker applies to.")
@click.option("--modifiers", "modifiers_file", type=click.Path(dir_okay=False), help="Restore-time patches (YAML).")
@click.option(
    "--backup-name", default="", help="The backup kept as the move's record [default: derived from the move]."
)
@click.option("--parallel", type=click.IntRange(1, 128), default=16, show_default=True, help="Concurrent workers.")
@click.option("--delete-source", is_flag=True, help="After a verified move, delete the moved objects in the source.")
@click.option("--yes", is_flag=True, help="Confirm --delete-source without asking.")
@click.option("--abort", is_flag=True, help="Give the move up (the same command plus --abort): delete its paused "
              "copies in the target and its record, unpause the source.")  # fmt: skip
@strict_option
@state_dir_option
@output_option
@click.pass_obj
def move_cmd(app: App, /, output: str, **kw: Any) -> None:
    """Move custom resources with their status: pause the source, back it up, restore into the target paused,
    verify, unpause the target; the source stays paused (or --delete-source). Run it again to resume."""
    check_options("move", kw)
    source = _cluster(app, kw["from_kubeconfig"] or app.kubeconfig, kw["from_context"] or app.context)
    selection = Selection(
        namespaces=split_csv(kw["namespaces"]),
        include_resources=split_csv(kw["include_resources"]),
        exclude_resources=split_csv(kw["exclude_resources"]),
        label_selector=kw["selector"],
        include_cluster_resources=kw["include_cluster_resources"],
        names=split_csv(kw["names"]),
    )
    target = _cluster(app, kw["to_kubeconfig"] or app.kubeconfig, kw["to_context"] or app.context)
    check_distinct(source.client.server, target.client.server)
    if kw["delete_source"] and not kw["yes"] and not kw["abort"]:
        click.confirm("Delete the moved objects in the source once the move is verified?", abort=True)
    options = restore_options(kw)
    if kw["modifiers_file"]:
        options = dataclasses.replace(options, modifiers=read_modifiers(kw["modifiers_file"]))
    store = app.store(kw.pop("storage"), s3_options(kw))
    request = MoveRequest(
        source=source, target=target, store=store, selection=selection, options=options, name=kw["backup_name"],
        state_dir=Path(kw["state_dir"]), parallel=kw["parallel"], delete_source=kw["delete_source"],
    )  # fmt: skip
    if kw["abort"]:
        _show_abort(abort_move(request))
        return
    report = run_move(request)
    _show(report, output, kw["strict"])


def _cluster(app: App, kubeconfig: str | None, context: str | None) -> Cluster:
    client = app.client_of(kubeconfig, context, pool_size=20)
    cache: dict[str, Discovery] = {}

    def discovered(refresh: bool) -> Discovery:
        if refresh or "d" not in cache:
            cache["d"] = discover(client)
        return cache["d"]

    return Cluster(client, discovered)


def _show_abort(report: AbortReport) -> None:
    dropped = f"record {report.name} dropped (the same command starts a fresh move)" if report.record_dropped else ""
    click.echo(
        f"move aborted: {report.source_unpaused} object(s) unpaused in the source, "
        f"{report.target_deleted} paused copy(ies) deleted in the target" + (f"; {dropped}" if dropped else "")
    )


def _show(report: MoveReport, output: str, strict: bool) -> None:
    restore = report.restore
    lines = [f"Move recorded as backup {report.name}: {report.source_paused} object(s) paused in the source."]
    lines += [f"note: not paused in the source (no pause marker known): {x}" for x in report.source_unpausable]
    if restore is not None:
        lines += ["", render(restore)]
    lines += [f"VERIFY FAILED: {p}" for p in report.verify_problems]
    lines += [f"note: left in the source: {x}" for x in report.source_kept]
    if report.succeeded:
        gone = f"; {report.source_deleted} deleted in the source" if report.source_deleted else ""
        lines.append(f"Move verified: every object and status is in the target{gone}.")
    data = {
        "backup": report.name,
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
    if not report.succeeded:
        raise PartialFailure(
            f"move {report.name} is not complete (the source stays paused): fix what is listed and run the same "
            "command again, or run it with --abort to give the source back"
        )
    if strict and restore is not None:
        check_strict(f"move {report.name}", restore)


COMMANDS = (move_cmd,)
