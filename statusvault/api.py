"""The library face (docs/api.md): back up, restore, verify and list from Python, with the CLI's rules and verdict.

Two forms. `backup_with` / `restore_with` run a typed request (BackupRequest, RestoreRequest) on a client the caller
holds: the CLI, the controller and `move` run every backup and restore through them, so the verdict a restore
returns is the one all of them act on. The keyword forms take what the matching command takes, by the same names (a
long option, dashes as underscores). `restore`, `backup` and `move` read them with their command's own declarations
(command_values: type, range, choices, default) and run the command's own run (cli/restore.py: judged_restore,
cli/backups.py: run_backup, cli/move.py: prepared_move, then run_move), so an option the CLI honours the API
honours, and one it does not take (`output`) is a TypeError. What the CLI refuses with one line raises the same
`StatusVaultError` (`.exit_status` is the CLI's exit status). Nothing here prints.

    from statusvault import api
    result = api.backup("nightly", storage="/var/backups", namespace="team-a", with_dependencies=True)
    restored = api.restore("nightly", storage="/var/backups", namespace_mapping="team-a:team-b")
    if not restored.succeeded:
        print(restored.verdict.findings)
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Callable, Iterable, Iterator, Mapping
from contextlib import contextmanager
from typing import Any

import click

from statusvault.archive import VerifyReport
from statusvault.archive.envelope import FileKek, Keyring
from statusvault.archive.signing import PublicKey
from statusvault.backup import BackupRequest, BackupResult, backup_with
from statusvault.cli.app import App
from statusvault.cli.backups import BackupArgs, run_backup
from statusvault.cli.backups import backup as backup_cmd
from statusvault.cli.move import MoveArgs, move_cmd, prepared_move
from statusvault.cli.restore import RestoreArgs, judged_restore, restore_cmd
from statusvault.cli.restore import fence_plan as cli_fence_plan
from statusvault.errors import BackupExistsError, ConfigError
from statusvault.flagtable import check_options
from statusvault.kube.client import KubeClient
from statusvault.kube.discovery import Discovery, discover
from statusvault.kube.transport import load_transport
from statusvault.model import Selection, split_csv
from statusvault.move import AbortReport, MoveReport, run_move
from statusvault.move import abort_move as abort
from statusvault.restore.options import FenceMode, RestoreOptions
from statusvault.restore.quiet.fencing import FencePlan
from statusvault.restore.runner import RestoreRequest, RestoreResult, restore_with
from statusvault.storage import ObjectStore, open_store
from statusvault.storage.base import S3Options
from statusvault.store.catalog import BackupInfo, list_backups
from statusvault.store.catalog import verify as verify_backup
from statusvault.velero.backups import verify as velero_verify

log = logging.getLogger(__name__)
_UNSET = getattr(click.core, "UNSET", None)  # click 8.2+: what an option without a default is before the CLI's None

__all__ = [
    "BackupRequest",
    "BackupResult",
    "Cluster",
    "RestoreOptions",
    "RestoreRequest",
    "RestoreResult",
    "Selection",
    "abort_move",
    "backup",
    "backup_with",
    "fence_plan",
    "list_backups_in",
    "move",
    "restore",
    "restore_with",
    "verify",
]

Strings = str | Iterable[str]
Discover = Callable[[bool], Discovery]  # discover(refresh): what the cluster serves, looked up again when asked


@dataclasses.dataclass(frozen=True)
class Cluster:
    """Which cluster: a kubeconfig file and context (None: $KUBECONFIG or ~/.kube/config, its current context; in
    a pod, its service account)."""

    kubeconfig: str | None = None
    context: str | None = None

    @contextmanager
    def connected(self, pool_size: int = 16) -> Iterator[tuple[KubeClient, Discover]]:
        """A client, and discover(refresh) as the engines take it; closed at the end."""
        transport = load_transport(self.kubeconfig, self.context, pool_size=pool_size)
        cache: dict[str, Discovery] = {}
        client = KubeClient(transport)

        def discovered(refresh: bool = False) -> Discovery:
            if refresh or "d" not in cache:
                cache["d"] = discover(client)
            return cache["d"]

        try:
            yield client, discovered
        finally:
            transport.close()


def _store(storage: str | None, s3: S3Options | None) -> ObjectStore:
    return open_store(storage, s3 or S3Options())


def _keys(encryption_key_file: Strings = (), verify_key_file: Strings = ()) -> Keyring:
    """Key files that open encrypted backups, and public keys that check signed ones."""
    files = [FileKek.from_file(p) for p in split_csv(encryption_key_file)]
    verifiers = tuple(PublicKey.from_file(p) for p in split_csv(verify_key_file))
    return Keyring(tuple(files), verifiers=verifiers)


# backup options the API takes under another form or not at all, and why (a TypeError says so)
NOT_IN_BACKUP_API = {"output": "the API returns the result (BackupResult), it prints nothing"}


def backup(name: str | None = None, /, *, cluster: Cluster = Cluster(), **options: Any) -> BackupResult:
    """`statusvault backup [NAME]`: every option of the command by its long name, dashes as underscores (namespace,
    include_resources, selector, name, include_crds, all_namespaces, with_dependencies, encryption_key_file,
    signing_key_file, lock_mode, lock_for, page_size, processes, schedule, s3_endpoint_url, ...), read and checked by
    the command's own declarations, with its defaults, and run by the command's own run; returns the result with
    its manifest (`.manifest`, `.objects`). The backup is positional-only, so `name=` selects objects. A name that
    holds a killed locked run's backup raises BackupExistsError once its locks are repaired (the CLI says so and
    exits 0)."""
    args = BackupArgs(**command_values(backup_cmd, options, NOT_IN_BACKUP_API, name=name))
    app = App(cluster.kubeconfig, cluster.context, quiet=True)
    try:
        run = run_backup(app, args)
    finally:
        app.close()
    if run.result is None:
        raise BackupExistsError(f"backup {run.request.name!r} exists: a killed run wrote it; its locks were repaired")
    return run.result


# restore options the API takes under another form or not at all, and why (a TypeError says so)
NOT_IN_API = {"output": "the API returns the report (RestoreResult), it prints nothing"}


def restore(backup: str, /, *, cluster: Cluster = Cluster(), **options: Any) -> RestoreResult:
    """`statusvault restore BACKUP`: every option of the command by its long name, dashes as underscores
    (namespace, name, namespace_mapping, status_include_resources, existing_resource_policy, dry_run, pause, order,
    modifiers, fence, parallel, processes, stream, at, from_velero, restart, s3_endpoint_url, kms_key_id,
    verify_key_file, ...), read and checked by the command's own declarations, with its defaults; returns the report
    and its verdict. Not read: the environment's STATUSVAULT_* variables (the CLI's way to give options)."""
    args = RestoreArgs(**command_values(restore_cmd, options, NOT_IN_API, backup_name=backup))
    if args.fence == FenceMode.REPORT:
        raise TypeError("restore() does not take fence='report', a plan that writes nothing: call fence_plan()")
    app = App(cluster.kubeconfig, cluster.context, quiet=True)
    try:
        return judged_restore(app, args, False, None, say=log.info)[1]
    finally:
        app.close()


def fence_plan(backup: str, /, *, cluster: Cluster = Cluster(), **options: Any) -> FencePlan:
    """`statusvault restore BACKUP --fence report`: the controllers that may write the restored statuses, found from
    RBAC, and what fencing would do to each; nothing is written. Takes restore()'s options."""
    values = command_values(restore_cmd, {**options, "fence": "report"}, NOT_IN_API, backup_name=backup)
    app = App(cluster.kubeconfig, cluster.context, quiet=True)
    try:
        return cli_fence_plan(app, RestoreArgs(**values), False, say=log.info)[1]
    finally:
        app.close()


# move options the API takes under another form or not at all, and why (a TypeError says so)
NOT_IN_MOVE_API = {
    "output": "the API returns the report (MoveReport), it prints nothing",
    "yes": "delete_source=True is the caller's confirmation: the API asks nothing",
    "abort": "call abort_move() with the same options: it returns what giving the move up did",
}


def move(**options: Any) -> MoveReport:
    """`statusvault move`: every option of the command by its long name, dashes as underscores (from_kubeconfig,
    from_context, to_kubeconfig, to_context, storage, namespace, namespace_mapping, pause, fence, modifiers,
    backup_name, parallel, delete_source, strict, state_dir, ...), read and checked by the command's own
    declarations, with its defaults; the clusters are checked to be two before any write. Returns the report: its
    `.verdict` is the one the CLI's exit status comes from (`.succeeded`: done). Run it again to resume."""
    args = _move_args(options)
    if args.fence == "report":
        raise TypeError("move() does not take fence='report', a plan that writes nothing: `statusvault move "
                        "--fence report` prints it")  # fmt: skip
    app = App(None, None, quiet=True)
    try:
        return run_move(prepared_move(app, args))
    finally:
        app.close()


def abort_move(**options: Any) -> AbortReport:
    """`statusvault move ... --abort`: give the move the same options name up (its paused copies in the target
    deleted, its record dropped, the source unpaused)."""
    args = _move_args(options)
    app = App(None, None, quiet=True)
    try:
        return abort(prepared_move(app, dataclasses.replace(args, abort=True)))
    finally:
        app.close()


def _move_args(options: dict[str, Any]) -> MoveArgs:
    values = command_values(move_cmd, options, NOT_IN_MOVE_API)
    values["yes"] = values["delete_source"]  # the call is the confirmation
    return MoveArgs(**values)


def command_values(
    command: click.Command, given: Mapping[str, Any], refused: Mapping[str, str], **fixed: Any
) -> dict[str, Any]:
    """Keyword options as `command`'s parameters, each read by the command's own declaration: its type, range or
    choices, its default and its callback (a list is a Python list or a comma-separated string, as a flag repeated).
    A name the command does not take is a TypeError, as for any function; a value it refuses a ConfigError with
    the CLI's words."""
    ctx = click.Context(command)
    by_flag = {f"--{k.replace('_', '-')}": k for k in given}
    params = {}
    for param in command.params:
        if isinstance(param, click.Option):
            key = next((by_flag[o] for o in param.opts if o in by_flag), None)
            params[param.name] = (param, key)
    taken = {key for _, key in params.values() if key is not None}
    for key in given:
        if key in refused:
            raise TypeError(f"{command.name}() does not take {key!r}: {refused[key]}")
        if key not in taken:
            raise TypeError(f"{command.name}() got an unexpected option {key!r}")
    values = dict(fixed)
    for name, (param, key) in params.items():
        raw = given[key] if key is not None else param.get_default(ctx)
        if param.multiple and isinstance(raw, str):
            raw = (raw,)
        try:
            value = param.process_value(ctx, raw)
        except click.BadParameter as e:
            raise ConfigError(f"{key or name}: {e.format_message()}") from None
        values[str(name)] = None if value is _UNSET else value  # no default: None, as the CLI passes it
    check_options(values)
    return values


def verify(
    name: str,
    *,
    storage: str | None = None,
    s3: S3Options | None = None,
    encryption_key_file: Strings = (),
    verify_key_file: Strings = (),
    from_velero: bool = False,
) -> VerifyReport:
    """`statusvault verify`, judged as the command judges it: every file's checksum (and the signature, given a
    public key), and in a store with Object Lock every file's lock; `.ok` says. `from_velero`: `name` is a Velero
    backup of the storage (or a tarball's path), checked as the command checks it."""
    store = _store(storage, s3)
    if from_velero:
        if encryption_key_file or verify_key_file:
            raise TypeError("verify(from_velero=True) takes no keys: a Velero backup is neither encrypted nor signed")
        return velero_verify(name, store)[0]
    return verify_backup(store, name, _keys(encryption_key_file, verify_key_file))


def list_backups_in(storage: str | None = None, s3: S3Options | None = None) -> list[BackupInfo]:
    """`statusvault list`: every backup in the store, complete or not (`.phase`)."""
    return list_backups(_store(storage, s3))
