"""restore: plan, (optionally) dry-run, execute; report per object."""

from __future__ import annotations

import dataclasses
import json
import sys
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import click

from statusvault.cli.app import App
from statusvault.cli.options import (
    cluster_resources_option,
    encryption_key,
    encryption_option,
    metrics_options,
    output_option,
    s3_options,
    selection_options,
    state_dir_option,
    storage_options,
    strict_option,
)
from statusvault.cli.output import emit, table
from statusvault.errors import ConfigError, PartialFailure, StatusVaultError
from statusvault.metrics import recorded
from statusvault.model import display
from statusvault.optiontable import check_options
from statusvault.processes import WorkerSpec
from statusvault.restore.modifiers import Modifiers, load_modifiers
from statusvault.restore.options import restore_options
from statusvault.restore.results import GENERATION_NOTE, RestoreReport, StatusOutcome
from statusvault.restore.runner import RestoreRequest, run_restore
from statusvault.restore.workers import MIN_WAVE, default_processes
from statusvault.storage.base import ObjectStore


@click.command("restore")
@click.argument("backup_name", metavar="BACKUP")
@storage_options
@selection_options
@cluster_resources_option
@click.option("--namespace-mapping", multiple=True, metavar="OLD:NEW,...", help="Restore into other namespaces.")
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
@click.option(
    "--dry-run",
    type=click.Choice(["none", "client", "server"]),
    default="none",
    show_default=True,
    help="client: print the plan, change nothing; server: send every write with dryRun=All.",
)
@click.option(
    "--parallel",
    type=click.IntRange(1, 128),
    default=16,
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
@click.option(
    "--qps",
    type=click.FloatRange(0),
    default=0.0,
    show_default=True,
    envvar="STATUSVAULT_QPS",
    help="Client-side request rate limit (0 = none; the server's 429s are always honoured).",
)
@click.option("--burst", type=click.IntRange(1), default=100, show_default=True, envvar="STATUSVAULT_BURST")
@click.option(
    "--scale-down",
    multiple=True,
    metavar="NAMESPACE/KIND/NAME,...",
    help="Scale these operators to 0 while restoring (and back afterwards), so none acts on an object "
    "before its status is back.",
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
    help="Restore-time patches: a YAML file in Velero's resource-modifier format (see the user guide).",
)
@strict_option
@state_dir_option
@encryption_option
@click.option(
    "--at",
    metavar="RFC3339|latest",
    help="BACKUP names a watch: restore its state at this moment (e.g. 2026-11-22T10:15:00Z), or the latest.",
)
@click.option(
    "--restart",
    is_flag=True,
    help="Discard the journal of an earlier, unfinished run of this restore and start over.",
)
@metrics_options
@output_option
@click.pass_obj
def restore_cmd(app: App, /, backup_name: str, output: str, **kw: Any) -> None:
    """Restore a backup: create each object, then write its saved status through /status."""
    _restore(app, backup_name, output, kw, unpause=False)


def _restore(app: App, backup_name: str, output: str, kw: dict[str, Any], unpause: bool) -> None:
    check_options("unpause" if unpause else "restore", kw)
    store = app.store(kw.pop("storage"), s3_options(kw))
    at = kw.pop("at", None)
    if not at:
        _run_restore(app, store, backup_name, output, kw, unpause)
        return
    from statusvault.watch.pointintime import parse_at, point_in_time

    moment_wanted = parse_at(at)
    lineage = "" if moment_wanted else f"{backup_name}-at-latest"  # the latest moment moves on between runs
    with point_in_time(store, backup_name, moment_wanted, encryption_key(kw)) as (moment_store, name, moment):
        click.echo(f"restoring watch {backup_name} as it was at {moment.isoformat()} (as {name})", err=True)
        _run_restore(app, moment_store, name, output, kw, unpause, lineage)


def _run_restore(
    app: App, store: ObjectStore, backup_name: str, output: str, kw: dict[str, Any], unpause: bool, lineage: str = ""
) -> None:
    opts = restore_options(kw)
    if kw["modifiers_file"]:
        opts = dataclasses.replace(opts, modifiers=read_modifiers(kw["modifiers_file"]))
    client = app.client(pool_size=kw["parallel"] + 4, qps=kw["qps"], burst=kw["burst"])
    with recorded("restore", "", kw["metrics_textfile"], kw["metrics_pushgateway"]) as run:
        request = RestoreRequest(
            store=store,
            backup=backup_name,
            options=opts,
            state_dir=Path(kw["state_dir"]),
            restart=kw["restart"],
            key=encryption_key(kw),
            parallel=kw["parallel"],
            workers=worker_spec(app, kw),
            progress=app.progress(),
            unpause=unpause,
            lineage=lineage,
        )
        report = run_restore(client, lambda refresh: app.discovery(refresh=refresh), request)
        run.success, run.duration = report.succeeded, report.duration
        run.objects, run.errors = report.total, len(report.failures)
    try:
        if output == "json":
            report.write_json(sys.stdout)
        elif output == "yaml":
            emit(report.to_dict(), output, "")
        else:
            click.echo(render(report))
    finally:
        report.close()
    if report.interrupted:
        if opts.dry_run == "none":
            click.echo(f"restore of {backup_name} interrupted: run the same command again to resume", err=True)
        raise KeyboardInterrupt
    again = "; run the same command again to resume" if opts.dry_run == "none" else ""
    if report.aborted:
        raise StatusVaultError(f"restore of {backup_name} stopped early: {report.aborted}{again}")
    if report.not_paused and not report.failures and not report.lacking:
        raise PartialFailure(
            f"restore of {backup_name}: {len(report.not_paused)} object(s) were restored with their status but NOT "
            "paused (the server dropped the pause marker); running the same command again will not pause them: "
            "use a marker the server keeps next time (--pause-annotation)"
        )
    if report.failures or report.lacking:
        raise PartialFailure(
            f"restore of {backup_name} finished with {len(report.failures)} failed object(s); "
            f"{report.lacking} object(s) lack their saved status{again.replace('resume', 'retry only those')}"
        )
    if kw["strict"]:
        check_strict(f"restore of {backup_name}", report)


def check_strict(what: str, report: RestoreReport) -> None:
    """--strict: what the server changed or warned about, reported either way, is a partial failure (exit 3)."""
    parts = [f"the server changed {report.server_changed} object(s)"] if report.server_changed else []
    parts += [f"{report.server_warned} object(s) drew server warnings"] if report.server_warned else []
    if parts:
        raise PartialFailure(f"{what}: {'; '.join(parts)} (--strict)")


def worker_spec(app: App, kw: dict[str, Any]) -> WorkerSpec:
    """Worker processes reach the cluster as this process does; the QPS budget is shared by all of them."""
    explicit = kw["processes"] is not None  # then every wave goes to the processes, small ones too
    processes = kw["processes"] or default_processes()
    return WorkerSpec(
        kubeconfig=app.kubeconfig,
        context=app.worker_context(),
        processes=processes,
        parallel=kw["parallel"],
        qps=kw["qps"],
        burst=kw["burst"],
        min_wave=0 if explicit else MIN_WAVE,
        log_format=app.log_format,
        debug=app.debug,
    )


def read_modifiers(path: str) -> Modifiers:
    try:
        text = Path(path).read_text()
    except OSError as e:
        raise ConfigError(f"cannot read modifiers file {path}: {e.strerror}") from None
    return load_modifiers(text, path)


def _rules(entry: dict[str, Any]) -> str:
    """The modifier rules an object met, for the dry-run listing."""
    m = entry.get("modifiers") or {}
    applied = f"  rules: {','.join(map(str, m['applied']))}" if m.get("applied") else ""
    skipped = f"  skipped by test: {','.join(map(str, m['skippedByTest']))}" if m.get("skippedByTest") else ""
    return applied + skipped


def _diff_line(d: dict[str, Any]) -> str:
    """One difference between the live object and the backup: ~ changed, + only in the backup, - only live."""

    def show(v: Any) -> str:
        text = json.dumps(v, sort_keys=True, separators=(",", ":"))
        return text if len(text) <= 60 else text[:57] + "..."

    if "live" in d and "backup" in d:
        return f"~ {d['path']}: {show(d['live'])} -> {show(d['backup'])}"
    if "backup" in d:
        return f"+ {d['path']}: {show(d['backup'])}"
    return f"- {d['path']}: {show(d['live'])}"


def render(report: RestoreReport) -> str:
    lines = []
    if report.dry_run == "client":
        lines.append(f"Plan for restoring {report.backup} (dry run, nothing changed):")
        for entry in report.results():
            shown = display(entry["resource"], entry["namespace"], entry["name"])
            lines.append(f"  {entry['result']:<13} {shown}  status: {entry['status']}{_rules(entry)}")
            lines += [f"      {_diff_line(d)}" for d in entry.get("diff", ())]
        lines.append("")
    rows = []
    for resource, c in report.by_resource():
        done = c["created"] + c["would-create"]
        updated = c["updated"] + c["would-update"]
        status = (
            c["status:" + StatusOutcome.WRITTEN]
            + c["status:" + StatusOutcome.IN_BODY]
            + c["status:" + StatusOutcome.WOULD_WRITE]
        )
        rows.append(
            (
                resource,
                done,
                updated,
                c["skipped"],
                c["failed"],
                status,
                c["status:" + StatusOutcome.FAILED],
            )
        )
    lines.append(
        table(["RESOURCE", "CREATED", "UPDATED", "SKIPPED", "FAILED", "STATUS RESTORED", "STATUS FAILED"], rows)
    )
    problems = sorted(report.attention, key=lambda r: (r.resource, r.namespace, r.name))
    if problems and report.dry_run != "client":
        lines.append("")
        for r in problems:
            notes = [n for n in r.notes if not n.startswith(GENERATION_NOTE)]
            if r.pause_lost:
                lines.append(f"NOT PAUSED: {r.display}: {r.pause_lost}")
            if r.failed or r.message or notes:
                lines.append(f"{'FAILED' if r.failed else 'note'}: {r.display}: {r.message or '; '.join(notes)}")
    regenerated = [(res, c["note:generation"]) for res, c in report.by_resource() if c["note:generation"]]
    if regenerated:
        lines.append("")
        for res, n in regenerated:
            lines.append(
                f"note: {res}: {n} object(s) carry a status.observedGeneration from before the restore "
                "(generation restarts at 1); their operator may reconcile them once"
            )
    lines += _server_lines(report)
    lines += _status_notes(report)
    if report.warnings and report.dry_run != "client":
        lines += ["", *(f"warning: {w}" for w in report.warnings)]
    verb = "Dry run of restore" if report.dry_run != "none" else "Restore"
    lines.append("")
    if report.resumed:
        lines.append(f"Resumed: {report.resumed} objects were restored by an earlier run and left alone.")
    by_server = f", {report.server_changed} changed by the server" if report.server_changed else ""
    by_server += f", {report.server_warned} with server warnings" if report.server_warned else ""
    lines.append(
        f"{verb} of {report.backup}: {report.total} objects, {len(report.failures)} failed, "
        f"{report.lacking} without their saved status{by_server}, in {report.duration:.1f}s"
    )
    return "\n".join(lines)


def _server_lines(report: RestoreReport) -> list[str]:
    """What the server changed of what was sent and what it warned about: the first objects one by one, then the
    paths and warnings per resource, most frequent first."""
    if not report.server_objects:
        return []
    lines = [""]
    for r in sorted(report.server_shown, key=lambda r: (r.resource, r.namespace, r.name)):
        if r.server_changes:
            lines.append(f"changed by the server: {r.display}: {', '.join(map(str, r.server_changes))}")
        lines += [f"server warning: {r.display}: {w}" for w in r.server_warnings]
    if report.server_objects > len(report.server_shown):
        lines.append(f"... and {report.server_objects - len(report.server_shown)} more object(s) (-o json lists each)")
    lines.append("")
    for resource, c in report.by_resource():
        if c["server:changed"]:
            named = _named(report.changes_named, resource, lambda key: f"{key[1]} {key[2]}")
            lines.append(f"{resource}: {c['server:changed']} object(s) changed by the server: {named}")
        if c["server:warned"]:
            named = _named(report.warnings_named, resource, lambda key: key[1])
            lines.append(f"{resource}: {c['server:warned']} object(s) with server warnings: {named}")
    if report.unnamed:
        lines.append(f"... and {report.unnamed} more change(s) or warning(s) (-o json lists each object's)")
    return lines


def _named(counts: Counter[Any], resource: str, show: Callable[[Any], str]) -> str:
    """One resource's changes or warnings with their object counts, most frequent first."""
    mine = sorted(((-n, show(key)) for key, n in counts.items() if key[0] == resource))
    return ", ".join(f"{text} ({-n})" for n, text in mine)


def _status_notes(report: RestoreReport) -> list[str]:
    """Saved statuses not written on purpose, and ones the run never reached: said, never silent."""
    notes = []
    kept = report.count_status(StatusOutcome.KEPT)
    if kept:
        notes.append(
            f"note: {kept} object(s) existed before the restore and were left as they are (policy none): "
            "their saved status was not written"
        )
    left_out = report.count_status(StatusOutcome.LEFT_OUT)
    if left_out:
        notes.append(
            f"note: {left_out} object(s) restored without their saved status, as asked "
            "(--no-status, status exclusions or the opt-out annotation)"
        )
    modified = report.counts().get("modifiers", {})
    if modified:
        notes.append(
            f"modifiers: {modified.get('modified', 0)} object(s) patched; "
            f"{modified.get('skipped', 0)} rule application(s) skipped by a failed test"
        )
    if report.unpaused or report.left_paused or report.unpause_failures:
        notes.append(f"pause: {report.unpaused} object(s) unpaused, {report.left_paused} left paused")
        notes += [f"FAILED to unpause: {problem}" for problem in report.unpause_failures]
    if report.left_paused and report.succeeded:
        notes.append(
            f"note: {report.left_paused} object(s) stay paused as asked (--keep-paused): release them with "
            f"`statusvault unpause {report.backup}` and the same options"
        )
    elif report.left_paused:
        notes.append(f"note: {report.left_paused} object(s) stay paused until every object has its status")
    if report.unreached:
        notes.append(f"not reached: {report.unreached} object(s) with a saved status (the run stopped first)")
    return ["", *notes] if notes else []


unpause_cmd = click.Command(
    "unpause",
    callback=click.pass_obj(
        lambda app, /, backup_name, output, **kw: _restore(app, backup_name, output, kw, unpause=True)
    ),
    params=restore_cmd.params,
    help="Finish an earlier restore (same backup and options) and unpause what it left paused, "
    "--keep-paused types included.",
)

COMMANDS = (restore_cmd, unpause_cmd)
