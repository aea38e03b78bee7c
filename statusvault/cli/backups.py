"""backup, list, describe, verify, download, delete."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import click

from statusvault import catalog
from statusvault.backup import LIST_CONCURRENCY, BackupEngine, default_backup_name
from statusvault.backup.listers import default_list_processes
from statusvault.cli.app import App
from statusvault.cli.options import (
    cluster_resources_option,
    encryption_key,
    encryption_option,
    metrics_options,
    output_option,
    s3_options,
    selection_options,
    split_csv,
    storage_options,
)
from statusvault.cli.output import emit, human_size, table
from statusvault.cli.watchviews import is_watch, verify_watch
from statusvault.errors import ArchiveError
from statusvault.metrics import recorded
from statusvault.model import Selection
from statusvault.optiontable import check_options
from statusvault.processes import WorkerSpec
from statusvault.storage.base import validate_backup_name


@click.command()
@click.argument("name", required=False)
@storage_options
@selection_options
@click.option("-A", "--all-namespaces", is_flag=True, help="Every namespace (the default without -n).")
@cluster_resources_option
@click.option(
    "--include-crds/--no-include-crds",
    default=True,
    show_default=True,
    help="The CRDs that define the selected custom resources.",
)
@click.option(
    "--page-size",
    type=click.IntRange(1, 10000),
    default=500,
    show_default=True,
    envvar="STATUSVAULT_PAGE_SIZE",
    help="LIST page size (limit).",
)
@click.option(
    "--list-concurrency",
    type=click.IntRange(1, 64),
    default=LIST_CONCURRENCY,
    show_default=True,
    envvar="STATUSVAULT_LIST_CONCURRENCY",
    help="LISTs at once: resource types, -n namespaces, and the namespaces of a large type (written to the "
    "archive in its usual order).",
)
@click.option(
    "--processes",
    type=click.IntRange(1, 64),
    default=None,
    envvar="STATUSVAULT_BACKUP_PROCESSES",
    help="Worker processes that list and serialize (1: threads of this process). [default: half the CPUs this "
    "process may use (cgroup-aware), at most one per concurrent LIST; 1 below 4 CPUs]",
)
@output_option
@click.pass_obj
@click.option(
    "--schedule",
    default="",
    envvar="STATUSVAULT_SCHEDULE",
    help="Name of the schedule this run belongs to (names the backup, labels metrics).",
)
@encryption_option
@metrics_options
def backup(app: App, /, name: str | None, output: str, **kw: Any) -> None:
    """Back up custom resources, status included, to a directory or S3.

    NAME defaults to backup-YYYYMMDDhhmmss (UTC), or SCHEDULE-YYYYMMDDhhmmss with --schedule.
    """
    check_options("backup", kw)
    s3 = s3_options(kw)
    schedule = kw["schedule"] or ""
    if schedule:
        validate_backup_name(schedule)
    name = validate_backup_name(name or default_backup_name(schedule or "backup"))
    namespaces = () if kw["all_namespaces"] else split_csv(kw["namespaces"])
    selection = Selection(
        namespaces=namespaces,
        include_resources=split_csv(kw["include_resources"]),
        exclude_resources=split_csv(kw["exclude_resources"]),
        label_selector=kw["selector"],
        include_cluster_resources=kw["include_cluster_resources"],
        include_crds=kw["include_crds"],
        names=split_csv(kw["names"]),
    )
    store = app.store(kw["storage"], s3)
    with recorded("backup", schedule, kw["metrics_textfile"], kw["metrics_pushgateway"]) as run:
        engine = BackupEngine(
            app.client(pool_size=kw["list_concurrency"] * 2 + 4),
            app.discovery(),
            store,
            app.progress(),
            page_size=kw["page_size"],
            key=encryption_key(kw),
            list_concurrency=kw["list_concurrency"],
            listers=WorkerSpec(
                kubeconfig=app.kubeconfig,
                context=app.worker_context(),
                processes=kw["processes"] or default_list_processes(kw["list_concurrency"]),
                log_format=app.log_format,
                debug=app.debug,
            ),
        )
        result = engine.run(name, selection, schedule)
        run.success, run.duration, run.objects = True, result.duration, result.objects
        run.bytes = int(result.manifest["archive"]["size"])
    rows = [(q, r["count"], r["withStatus"]) for q, r in result.manifest["resources"].items()]
    totals = result.manifest["totals"]
    text = table(["RESOURCE", "OBJECTS", "WITH STATUS"], rows) + (
        f"\n\nBackup {result.name} completed: {totals['objects']} objects ({totals['withStatus']} with status), "
        f"{human_size(result.manifest['archive']['size'])} in {result.duration:.1f}s -> {result.storage}"
    )
    emit(result.to_dict(), output, text)


@click.command("list")
@storage_options
@click.option("--timeline", is_flag=True, help="List watches and the ranges `restore WATCH --at` can restore.")
@output_option
@click.pass_obj
def list_cmd(app: App, /, output: str, timeline: bool, **kw: Any) -> None:
    """List backups; one without its manifest cannot be restored: Writing while a run writes it, else Incomplete
    (left by a run that stopped; the same backup command replaces it)."""
    store = app.store(kw.pop("storage"), s3_options(kw))
    if timeline:
        from statusvault.cli.watchviews import show_timeline

        show_timeline(store, output)
        return
    infos = catalog.list_backups(store)
    rows = [
        (
            b.name,
            b.phase,
            b.created,
            "-" if b.objects is None else b.objects,
            "-" if b.with_status is None else b.with_status,
            human_size(b.size),
        )
        for b in infos
    ]
    writers = "".join(f"\n{b.name} is being written by {b.writer}" for b in infos if b.writer)
    text = (
        table(["NAME", "PHASE", "CREATED", "OBJECTS", "WITH STATUS", "SIZE"], rows)
        + ("\n" + writers if writers else "")
        if infos
        else f"No backups in {store.url}"
    )
    emit([b.to_dict() for b in infos], output, text)


@click.command()
@click.argument("name")
@storage_options
@output_option
@click.pass_obj
def describe(app: App, /, name: str, output: str, **kw: Any) -> None:
    """Show a backup's per-resource counts, how many objects carry status, and its size."""
    store = app.store(kw.pop("storage"), s3_options(kw))
    data = catalog.describe(store, name)
    rows = [
        (q, r["kind"], "yes" if r.get("hasStatusSubresource") else "no", r.get("count", "-"), r.get("withStatus", "-"))
        for q, r in (data["resources"] or {}).items()
    ]
    totals, archive = data["totals"] or {}, data["archive"] or {}
    text = "\n".join(
        [
            f"Name:       {name}",
            "Phase:      Completed",
            f"Created:    {data['createdAt']}",
            f"Server:     {(data['server'] or {}).get('gitVersion', '')}",
            f"Format:     {data['formatVersion']}",
            f"Objects:    {totals.get('objects')} ({totals.get('withStatus')} with status)",
            f"Size:       {human_size(archive.get('size'))} compressed, "
            f"{human_size(totals.get('uncompressedBytes'))} uncompressed",
            "",
            table(["RESOURCE", "KIND", "STATUS-SUBRESOURCE", "OBJECTS", "WITH STATUS"], rows),
        ]
    )
    emit(data, output, text)


@click.command()
@click.argument("name")
@storage_options
@encryption_option
@output_option
@click.pass_obj
def verify(app: App, /, name: str, output: str, **kw: Any) -> None:
    """Re-read a backup and check its format and every file's SHA-256; non-zero exit on any mismatch.

    An encrypted backup is decrypted with --encryption-key-file; without it only the stored archive's
    checksum can be checked."""
    key = encryption_key(kw)
    store = app.store(kw.pop("storage"), s3_options(kw))
    if is_watch(store, name):
        verify_watch(store, name, key, output)
        return
    report = catalog.verify(store, name, key)
    data = {
        "name": name,
        "ok": report.ok,
        "filesChecked": report.files_checked,
        "archiveChecksumOk": report.archive_sha_ok,
        "objectsChecked": not report.objects_unchecked,
        "mismatched": report.mismatched,
        "missing": report.missing,
        "unexpected": report.unexpected,
        "misordered": report.misordered,
        "error": report.error,
    }
    if not report.ok:
        text = f"Backup {name}: FAILED: {catalog.describe_problems(report)}"
    elif report.objects_unchecked:
        text = f"Backup {name}: archive checksum OK; encrypted: pass --encryption-key-file to check every object"
    else:
        text = f"Backup {name}: OK ({report.files_checked} files checked)"
    emit(data, output, text)
    if not report.ok:
        raise ArchiveError(f"backup {name!r} failed verification")


@click.command()
@click.argument("name")
@click.option(
    "-f",
    "--file",
    "dest",
    required=True,
    type=click.Path(dir_okay=False, path_type=Path),
    help="Where to write the archive (.tar.gz).",
)
@storage_options
@output_option
@click.pass_obj
def download(app: App, /, name: str, dest: Path, output: str, **kw: Any) -> None:
    """Download a backup's archive to a local file."""
    store = app.store(kw.pop("storage"), s3_options(kw))
    size = catalog.download(store, name, dest)
    emit(
        {"name": name, "file": str(dest), "sizeBytes": size},
        output,
        f"Downloaded backup {name} to {dest} ({human_size(size)})",
    )


@click.command()
@click.argument("name")
@click.option("-y", "--yes", is_flag=True, help="Do not ask for confirmation.")
@storage_options
@output_option
@click.pass_obj
def delete(app: App, /, name: str, yes: bool, output: str, **kw: Any) -> None:
    """Delete a backup (its manifest first, then its archive); refused while a run writes it."""
    store = app.store(kw.pop("storage"), s3_options(kw))
    if not yes and sys.stdin.isatty():
        click.confirm(f"Delete backup {name} from {store.url}?", abort=True)
    keys = catalog.delete(store, name)
    emit({"name": name, "deleted": keys}, output, f"Deleted backup {name}")


COMMANDS = (backup, list_cmd, describe, verify, download, delete)
