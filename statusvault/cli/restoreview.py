"""The restore report as people read it (restore, unpause, move): the dry run's plan, a table per resource, what
failed, what the server changed or warned about, and the notes on statuses not written."""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Callable
from typing import Any

from statusvault.cli.output import table
from statusvault.model import DryRun, display
from statusvault.restore.results.report import GENERATION_NOTE, RestoreReport, StatusOutcome


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


DEPENDENCIES_SHOWN = 200


def render(report: RestoreReport) -> str:
    lines = []
    if report.dry_run == DryRun.CLIENT:
        lines.append(f"Plan for restoring {report.backup} (dry run, nothing changed):")
        for entry in report.results():
            shown = display(entry["resource"], entry["namespace"], entry["name"])
            lines.append(f"  {entry['result']:<13} {shown}  status: {entry['status']}{_rules(entry)}")
            lines += [f"      {_diff_line(d)}" for d in entry.get("diff", ())]
        lines.append("")
        if report.dependencies:  # the backup's graph, for what this restore takes (docs/dependencies.md)
            deps = report.dependencies[:DEPENDENCIES_SHOWN]
            lines += [table(["DEPENDENCY", "NEEDED BY", "REFERENCE"], [tuple(d) for d in deps])]
            more = len(report.dependencies) - len(deps)
            lines += [f"... and {more} more (-o json lists them all)"] if more > 0 else []
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
    if problems and report.dry_run != DryRun.CLIENT:
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
    lines += _order_lines(report)
    if report.fence:
        unfenced = " (a dry run: nothing was fenced)" if report.dry_run != DryRun.NONE else ""
        lines += ["", f"Fencing{unfenced}:", *report.fence]
    if report.warnings:  # a dry run's too: what the real run would leave out or bring is part of its plan
        lines += ["", *(f"warning: {w}" for w in report.warnings)]
    verb = "Dry run of restore" if report.dry_run != DryRun.NONE else "Restore"
    lines.append("")
    if report.resumed:
        lines.append(f"Resumed: {report.resumed} objects were restored by an earlier run and left alone.")
    by_server = f", {report.server_changed} changed by the server" if report.server_changed else ""
    by_server += f", {report.server_warned} with server warnings" if report.server_warned else ""
    lines.append(
        f"{verb} of {report.backup}: {report.total} objects, {len(report.failures)} failed, "
        f"{report.lacking_status_count} without their saved status{by_server}, in {report.duration:.1f}s"
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


def _order_lines(report: RestoreReport) -> list[str]:
    """--order: the groups in order with their members' counts and gates, then what each gate did."""
    if not report.groups:
        return []
    lines = ["", "Order (groups restored one after another):"]
    for n, g in enumerate(report.groups):
        gate = f"; then gate: {g['gate']}" if g["gate"] else ""
        lines.append(f"  {n}. {g['group']}: {g['objects']} object(s){gate}")
    return lines + [f"  {gate.line()}" for gate in report.gates]


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
    if report.left_paused and report.work_complete:
        notes.append(
            f"note: {report.left_paused} object(s) stay paused as asked (--keep-paused): release them with "
            f"`statusvault unpause {report.backup}` and the same options"
        )
    elif report.left_paused and report.lacking_status_count:
        notes.append(
            f"note: {report.left_paused} object(s) stay paused until every object has its status "
            f"({report.lacking_status_count} lack theirs)"
        )
    elif report.left_paused:
        notes.append(
            f"note: {report.left_paused} object(s) stay paused: the restore did not finish (above: why); running "
            "the same command again finishes it and unpauses them"
        )
    if report.unreached:
        notes.append(f"not reached: {report.unreached} object(s) with a saved status (the run stopped first)")
    notes += [f"FAILED to scale back: {problem}" for problem in report.not_scaled_back]
    looked = report.overwritten
    if looked.checked:
        more = f" ({looked.unchecked} more not looked at)" if looked.unchecked else ""
        notes.append(
            f"looked again after the last write: {looked.count} of {looked.checked} restored status(es) written "
            f"since by another writer{more}"
        )
        notes += [f"WRITTEN AGAIN: {line}" for line in looked.named]
    audit = report.audit
    if audit is not None and audit.lacking:
        notes.append(
            f"read back from the cluster: {audit.lacking} of {audit.checked} object(s) lack their saved status"
        )
        notes += [f"WITHOUT ITS SAVED STATUS: {name}" for name in audit.lacking_named]
    if report.server_away >= 1:
        notes.append(
            f"the API server was unavailable for about {report.server_away:.0f}s: waited out (--server-wait-seconds)"
        )
    return ["", *notes] if notes else []
