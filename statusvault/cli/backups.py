"""backup, list, describe, verify, download, delete."""

from __future__ import annotations

import dataclasses
import datetime as dt
import sys
from pathlib import Path
from typing import Any

import click

from statusvault import rfc3339
from statusvault.backup import LIST_CONCURRENCY, BackupRequest, BackupResult, backup_with, default_backup_name
from statusvault.backup.listers import default_list_processes
from statusvault.cli.app import App
from statusvault.cli.completion import complete_backup
from statusvault.cli.declared import option
from statusvault.cli.flags import (
    DependencyArgs,
    KeysArgs,
    LockArgs,
    MetricsArgs,
    SelectionArgs,
    SigningArgs,
    StorageArgs,
    TrustedKeysArgs,
    cluster_resources_option,
    dependency_options,
    keys_options,
    lock_options,
    metrics_options,
    output_option,
    pass_args,
    selection_options,
    signing_options,
    storage_options,
    verify_options,
)
from statusvault.cli.output import OutputFormat, emit, human_size, table
from statusvault.cli.watchviews import is_watch, verify_watch
from statusvault.dependencies import Reference
from statusvault.errors import ArchiveError, BackupExistsError
from statusvault.processes import WorkerSettings
from statusvault.storage.base import (
    ObjectLock,
    ObjectStore,
    locking,
    relock,
    validate_backup_name,
)
from statusvault.store import catalog
from statusvault.store.backups import BackupStore


@dataclasses.dataclass(frozen=True, kw_only=True)
class BackupArgs(StorageArgs, SelectionArgs, KeysArgs, SigningArgs, LockArgs, MetricsArgs, DependencyArgs):
    name: str | None
    page_size: int
    list_concurrency: int
    processes: int | None
    output: OutputFormat
    schedule: str


@dataclasses.dataclass(frozen=True, kw_only=True)
class ListArgs(StorageArgs):
    timeline: bool
    from_velero: bool
    output: OutputFormat


@dataclasses.dataclass(frozen=True, kw_only=True)
class StoredArgs(StorageArgs):
    """One stored backup (describe, verify, download, delete)."""

    name: str
    output: OutputFormat


@dataclasses.dataclass(frozen=True, kw_only=True)
class VerifyArgs(StoredArgs, TrustedKeysArgs):
    from_velero: bool


@dataclasses.dataclass(frozen=True, kw_only=True)
class DescribeArgs(StoredArgs):
    from_velero: bool


FROM_VELERO = click.option(
    "--from-velero",
    is_flag=True,
    help="NAME is a Velero backup: a tarball on disk, or a backup in the --storage location's Velero layout "
    "(backups/NAME/NAME.tar.gz).",
)


@dataclasses.dataclass(frozen=True, kw_only=True)
class DownloadArgs(StoredArgs):
    dest: Path


@dataclasses.dataclass(frozen=True, kw_only=True)
class DeleteArgs(StoredArgs):
    yes: bool


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
@option(
    "--schedule",
    left_out={"BackupSchedule": "the backups are named (and pruned) after the BackupSchedule itself"},
    default="",
    envvar="STATUSVAULT_SCHEDULE",
    help="Name of the schedule this run belongs to (names the backup, labels metrics).",
)
@dependency_options
@keys_options
@signing_options
@lock_options
@metrics_options
@pass_args(BackupArgs, check=True)
def backup(app: App, args: BackupArgs) -> None:
    """Back up custom resources, status included, to a directory or S3.

    NAME defaults to backup-YYYYMMDDhhmmss (UTC), or SCHEDULE-YYYYMMDDhhmmss with --schedule.
    """
    run = run_backup(app, args)
    result, lock = run.result, run.request.lock
    if result is None:
        assert lock is not None
        _relocked(run.request.name, run.request.store, lock, run.relocked, args.output)
        return
    rows = [(q, r["count"], r["withStatus"]) for q, r in result.manifest["resources"].items()]
    totals = result.manifest["totals"]
    text = (
        table(["RESOURCE", "OBJECTS", "WITH STATUS"], rows)
        + (
            f"\n\nBackup {result.name} completed: {totals['objects']} objects ({totals['withStatus']} with status), "
            f"{human_size(result.manifest['archive']['size'])} in {result.duration:.1f}s -> {result.storage}"
        )
        + (f"; locked: {lock.describe()}" if lock else "")
    )
    emit({**result.to_dict(), "lock": lock.to_dict() if lock else None}, args.output, text)


@dataclasses.dataclass(frozen=True)
class BackupRun:
    """What the backup command did: its request, and the backup it wrote, or (None) the locks it repaired on the
    backup a killed run of the same name had written (`relocked`: their keys)."""

    request: BackupRequest
    result: BackupResult | None
    relocked: tuple[str, ...] = ()


def run_backup(app: App, args: BackupArgs) -> BackupRun:
    """The backup command's own run, which the CLI prints and api.backup returns: the name and store checked, the
    backup written, its metrics recorded."""
    if args.schedule:
        validate_backup_name(args.schedule)
    name = validate_backup_name(args.name or default_backup_name(args.schedule or "backup"))
    store = app.store(args.storage, args.s3())
    request = backup_request(app, args, name, store)
    lock = request.lock
    if lock is not None:
        locking(store)  # a directory, a bucket without Object Lock: refused before the cluster is asked anything
    with args.recorded("backup", args.schedule) as run:
        client = app.client(pool_size=args.list_concurrency * 2 + 4)
        discovery = app.discovery()
        try:
            result = backup_with(request, client=client, discovery=discovery)
        except BackupExistsError:
            if lock is None or not (relocked := relock(store, request.name, lock)):
                raise
            run.success = True  # what a killed run left unlocked: repaired
            return BackupRun(request, None, relocked)
        run.success, run.duration, run.objects = True, result.duration, result.objects
        run.bytes = int(result.manifest["archive"]["size"])
    return BackupRun(request, result)


def _relocked(name: str, store: ObjectStore, lock: ObjectLock, keys: tuple[str, ...], output: OutputFormat) -> None:
    files = ", ".join(key.rsplit("/", 1)[-1] for key in keys)
    text = (
        f"Backup {name} already existed, but {files} lacked its Object Lock (a run stopped before locking it): "
        f"locked now ({lock.describe()})"
    )
    emit({"name": name, "storage": store.url, "lock": lock.to_dict(), "relocked": list(keys)}, output, text)


def backup_request(app: App, args: BackupArgs, name: str, store: ObjectStore) -> BackupRequest:
    """The backup the options ask for, under its checked name, into the opened store; its Object Lock (if any)
    runs from now."""
    return BackupRequest(
        store=store,
        name=name,
        selection=args.selection(),
        schedule=args.schedule,
        progress=app.progress(),
        key=args.keys(),
        signer=args.signer(),
        lock=args.lock(dt.datetime.now(dt.UTC)),
        page_size=args.page_size,
        list_concurrency=args.list_concurrency,
        with_dependencies=args.with_dependencies,
        allow_plaintext_secrets=args.allow_plaintext_secrets,
        listers=WorkerSettings(
            kubeconfig=app.kubeconfig,
            context=app.worker_context(),
            processes=args.processes or default_list_processes(args.list_concurrency),
            log_format=app.log_format,
            debug=app.debug,
        ),
    )


@click.command("list")
@storage_options
@click.option("--timeline", is_flag=True, help="List watches and the ranges `restore WATCH --at` can restore.")
@click.option("--from-velero", is_flag=True, help="--storage is a Velero backup storage location: list its backups.")
@output_option
@pass_args(ListArgs)
def list_cmd(app: App, args: ListArgs) -> None:
    """List backups; one without its manifest cannot be restored: Writing while a run writes it, else Incomplete
    (left by a run that stopped; the same backup command replaces it)."""
    store = app.store(args.storage, args.s3())
    if args.timeline:
        from statusvault.cli.watchviews import show_timeline

        show_timeline(store, args.output)
        return
    if args.from_velero:
        _list_velero(store, args.output)
        return
    infos = catalog.list_backups(store)
    locked = any(b.lock for b in infos)  # a LOCK column only where some backup has one
    rows = [
        (
            b.name,
            b.phase,
            b.created,
            "-" if b.objects is None else b.objects,
            "-" if b.with_status is None else b.with_status,
            human_size(b.size),
            *([b.lock.describe() if b.lock else "-"] if locked else []),
        )
        for b in infos
    ]
    writers = "".join(f"\n{b.name} is being written by {b.writer}" for b in infos if b.writer)
    text = (
        table(["NAME", "PHASE", "CREATED", "OBJECTS", "WITH STATUS", "SIZE", *(["LOCK"] if locked else [])], rows)
        + ("\n" + writers if writers else "")
        if infos
        else f"No backups in {store.url}"
    )
    emit([b.to_dict() for b in infos], args.output, text)


@click.command()
@click.argument("name", shell_complete=complete_backup)
@storage_options
@FROM_VELERO
@output_option
@pass_args(DescribeArgs)
def describe(app: App, args: DescribeArgs) -> None:
    """Show a backup's per-resource counts, how many objects carry status, and its size."""
    store = app.store(args.storage, args.s3())
    if args.from_velero:
        from statusvault.velero import backups as velero

        with velero.imported(args.name, store) as (temp, native, read):
            data = {**catalog.describe(temp, native), "storage": f"Velero backup {args.name}"}
            data["veleroFormat"], data["otherVersionsLeftOut"] = read.format_version, read.left_out
            data["formatVersion"] = f"Velero {read.format_version}"  # the backup's own, not the import's
            written = dt.datetime.fromtimestamp(read.written_at, dt.UTC) if read.written_at else None
            data["createdAt"] = rfc3339.format_seconds(written) if written else "unknown"
    else:
        data = catalog.describe(store, args.name)
    rows = [
        (q, r["kind"], "yes" if r.get("hasStatusSubresource") else "no", r.get("count", "-"), r.get("withStatus", "-"))
        for q, r in (data["resources"] or {}).items()
    ]
    totals, archive = data["totals"] or {}, data["archive"] or {}
    text = "\n".join(
        [
            f"Name:       {args.name}",
            "Phase:      Completed",
            f"Created:    {data['createdAt']}",
            f"Server:     {(data['server'] or {}).get('gitVersion', '')}",
            f"Format:     {data['formatVersion']}",
            f"Objects:    {totals.get('objects')} ({totals.get('withStatus')} with status)",
            f"Size:       {human_size(archive.get('size'))} compressed, "
            f"{human_size(totals.get('uncompressedBytes'))} uncompressed",
            *_protection(data),
            *_origin(data.get("importedFrom")),
            "",
            table(["RESOURCE", "KIND", "STATUS-SUBRESOURCE", "OBJECTS", "WITH STATUS"], rows),
            *dependency_graph(data.get("dependencies")),
        ]
    )
    emit(data, args.output, text)


def _origin(imported: Any) -> list[str]:
    """Where an imported backup came from, as its manifest records it (a store writer's claim, like the rest of an
    unsigned manifest)."""
    source = imported.get("velero") if isinstance(imported, dict) else None
    if not isinstance(source, dict):
        return []
    left = source.get("otherVersionsLeftOut") or 0
    converted = source.get("convertedCRDs")
    lines = [
        f"Imported:   from Velero backup {source.get('tarball')} (format {source.get('formatVersion')}, sha256 "
        f"{str(source.get('sha256'))[:16]}...{f', {left} object(s) of other API versions left out' if left else ''})"
    ]
    if isinstance(converted, list) and converted:
        names = ", ".join(str(c)[:253] for c in converted[:5]) + (
            f", ... ({len(converted)})" if len(converted) > 5 else ""
        )
        lines.append(f"            CRDs converted to the v1 current servers accept: {names}")
    return lines


def dependency_graph(deps: Any, limit: int = 200) -> list[str]:
    """describe's and a dry run's view of the dependencies: each object, what brought it and how."""
    if not isinstance(deps, dict) or not isinstance(deps.get("edges"), list):
        return []
    rows = []
    for edge in deps["edges"][:limit]:
        e = Reference.from_list(edge)
        rows.append((str(e.target), str(e.source), e.via))
    more = len(deps["edges"]) - len(rows)
    missing = [Reference.from_list(m) for m in deps.get("missing") or ()]
    return [
        "",
        f"Dependencies: {deps.get('objects', 0)} object(s)",
        table(["DEPENDENCY", "NEEDED BY", "REFERENCE"], rows) if rows else "(none)",
        *([f"... and {more} more reference(s) (-o json lists them all)"] if more > 0 else []),
        *(f"missing: {m.target} ({m.via} of {m.source}) does not exist" for m in missing[:20]),
    ]


def _protection(data: dict[str, Any]) -> list[str]:
    """describe's Lock, Encryption and Signed lines, when the backup has them."""
    lock, encryption = data.get("lock"), data.get("encryption")
    lines = []
    if lock:
        parts = [f"{lock['mode'].lower()} until {lock['retainUntil']}"] if lock["mode"] else []
        lines.append("Lock:       " + ", ".join(parts + (["legal hold"] if lock["legalHold"] else [])))
    if encryption:
        lines.append(f"Encrypted:  data key wrapped by {', '.join(encryption['keys']) or 'no key'}")
    signature = data.get("signature")
    if signature:
        lines.append(
            f"Signed:     by key {signature['keyId']} ({signature['algorithm']}; verify with --verify-key-file)"
        )
    return lines


@click.command()
@click.argument("name", shell_complete=complete_backup)
@storage_options
@keys_options
@verify_options
@FROM_VELERO
@output_option
@pass_args(VerifyArgs)
def verify(app: App, args: VerifyArgs) -> None:
    """Re-read a backup and check its format and every file's SHA-256; non-zero exit on any mismatch.

    An encrypted backup is decrypted with the key file or KMS key that unwraps its data key; without one only the
    stored archive's checksum can be checked."""
    keys = args.keys()
    store = app.store(args.storage, args.s3())
    name = args.name
    if args.from_velero:
        _verify_velero(store, name, args.output)
        return
    if is_watch(store, name):
        verify_watch(store, name, keys, args.output)
        return
    report = catalog.verify(store, name, keys)
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
        "unlocked": report.unlocked,
        "signedBy": report.signed_by or None,
    }
    emit(data, args.output, catalog.verdict_line(name, report))
    if not report.ok:
        raise ArchiveError(f"backup {name!r} failed verification")


def _list_velero(store: ObjectStore, output: OutputFormat) -> None:
    from statusvault.velero import backups as velero

    found = velero.stored(store)
    rows = [(b.name, b.phase or "-", b.format_version or "-", b.started or "-", b.errors, human_size(b.size))
            for b in found]  # fmt: skip
    text = (
        table(["NAME", "PHASE", "FORMAT", "STARTED", "ERRORS", "SIZE"], rows)
        if found
        else (f"No Velero backups in {store.url}")
    )
    emit([b.to_dict() for b in found], output, text)


def _verify_velero(store: ObjectStore, source: str, output: OutputFormat) -> None:
    """A Velero backup read whole and checked as any archive (a problem is one line and exit 1), then the native
    backup made of it verified."""
    from statusvault.velero import backups as velero

    report, read = velero.verify(source, store)
    if not report.ok:  # judged before anything says OK
        raise ArchiveError(f"Velero backup {source!r} failed verification: {catalog.describe_problems(report)}")
    left = read.left_out_note()
    data = {"name": source, "ok": report.ok, "veleroFormat": read.format_version, "objects": read.total,
            "otherVersionsLeftOut": read.left_out, "convertedCRDs": sorted(read.converted_crds)}  # fmt: skip
    emit(data, output, f"Velero backup {source}: OK (format {read.format_version}, {read.total} objects checked{left})")


@click.command()
@click.argument("name", shell_complete=complete_backup)
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
@pass_args(DownloadArgs)
def download(app: App, args: DownloadArgs) -> None:
    """Download a backup's archive to a local file."""
    store = app.store(args.storage, args.s3())
    size = catalog.download(store, args.name, args.dest)
    emit(
        {"name": args.name, "file": str(args.dest), "sizeBytes": size},
        args.output,
        f"Downloaded backup {args.name} to {args.dest} ({human_size(size)})",
    )


@click.command()
@click.argument("name", shell_complete=complete_backup)
@click.option("-y", "--yes", is_flag=True, help="Do not ask for confirmation.")
@storage_options
@output_option
@pass_args(DeleteArgs)
def delete(app: App, args: DeleteArgs) -> None:
    """Delete a backup (its manifest first, then its archive); refused while a run writes it."""
    store = app.store(args.storage, args.s3())
    if not args.yes and sys.stdin.isatty():
        click.confirm(f"Delete backup {args.name} from {store.url}?", abort=True)
    keys = BackupStore(store).delete(args.name)
    emit({"name": args.name, "deleted": keys}, args.output, f"Deleted backup {args.name}")


@dataclasses.dataclass(frozen=True, kw_only=True)
class ImportArgs(StorageArgs, KeysArgs, SigningArgs):
    source: str
    name: str | None
    velero_storage: str | None
    allow_plaintext_secrets: bool
    output: OutputFormat


@click.command("import-velero")
@click.argument("source")
@click.option("--name", help="The native backup's name. [default: the Velero backup's]")
@click.option(
    "--velero-storage",
    metavar="URL",
    help="SOURCE names a backup in this Velero backup storage location (its backups/NAME/NAME.tar.gz), reached with "
    "the --s3-* options; without it SOURCE is a Velero backup tarball on disk.",
)
@storage_options
@keys_options
@signing_options
@click.option(
    "--allow-plaintext-secrets",
    is_flag=True,
    help="Let the native backup hold the Velero backup's Secrets without encryption (refused by default).",
)
@output_option
@pass_args(ImportArgs)
def import_velero(app: App, args: ImportArgs) -> None:
    """Write a native, verifiable statusvault backup from a Velero backup (a tarball, or a backup in a Velero
    backup storage location), so it can be locked, encrypted, signed and rotated like any other.

    Every object comes in its preferred API version, status included; other API versions Velero kept are left out
    and counted. The Velero backup is checked as any archive is (sizes, paths, members, JSON), and refused with one
    line. Encrypting or signing the result vouches for what the Velero backup held."""
    from statusvault.velero import backups as velero

    bsl = app.store(args.velero_storage, args.s3()) if args.velero_storage else None
    store = app.store(args.storage, args.s3())
    with velero.source_path(args.source, bsl) as path, velero.read_tarball(path) as read:
        name = validate_backup_name(args.name or velero.native_name(path.name))
        result = velero.import_backup(
            read,
            store,
            name,
            key=args.keys(),
            signer=args.signer(),
            allow_plaintext_secrets=args.allow_plaintext_secrets,
        )
    totals = result.manifest["totals"]
    left = read.left_out_note()
    text = (
        f"Imported Velero backup {args.source} (format {read.format_version}) as {result.name}: "
        f"{totals['objects']} objects ({totals['withStatus']} with status){left} -> {result.storage}"
    )
    data = {**result.to_dict(), "veleroFormat": read.format_version, "otherVersionsLeftOut": read.left_out}
    emit(data, args.output, text)


COMMANDS = (backup, list_cmd, describe, verify, download, delete, import_velero)
