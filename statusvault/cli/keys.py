"""hold set|release (S3 legal holds) and keys rotate (re-wrapping backups' data keys)."""

from __future__ import annotations

import dataclasses

import click

from statusvault.archive import signing
from statusvault.cli.app import App
from statusvault.cli.backups import StoredArgs
from statusvault.cli.completion import complete_backup
from statusvault.cli.flags import StorageArgs, kek_of, output_option, pass_args, storage_options
from statusvault.cli.output import OutputFormat, emit, table
from statusvault.errors import ConfigError, PartialFailure
from statusvault.keys import rotation as keys
from statusvault.store.backups import BackupStore


@dataclasses.dataclass(frozen=True, kw_only=True)
class HoldArgs(StoredArgs):
    """One stored backup's legal hold (hold set, hold release)."""


@dataclasses.dataclass(frozen=True, kw_only=True)
class RotateArgs(StorageArgs):
    names: tuple[str, ...]
    old: str
    new: str
    all_: bool
    retire: bool
    output: OutputFormat


@click.group()
def hold() -> None:
    """Legal holds on backups in a bucket with S3 Object Lock: a held backup cannot be deleted by anyone."""


def _set_hold(app: App, args: HoldArgs, on: bool) -> None:
    store = app.store(args.storage, args.s3())
    count = BackupStore(store).set_legal_hold(args.name, on)
    verb = "set on" if on else "released on"
    emit({"name": args.name, "legalHold": on, "versions": count}, args.output,
         f"Legal hold {verb} backup {args.name} ({count} object versions)")  # fmt: skip


@hold.command("set")
@click.argument("name", shell_complete=complete_backup)
@storage_options
@output_option
@pass_args(HoldArgs)
def hold_set(app: App, args: HoldArgs) -> None:
    """Put a legal hold on every version of the backup's archive and manifest: no delete, prune or retention
    removes them until it is released."""
    _set_hold(app, args, True)


@hold.command("release")
@click.argument("name", shell_complete=complete_backup)
@storage_options
@output_option
@pass_args(HoldArgs)
def hold_release(app: App, args: HoldArgs) -> None:
    """Release the legal hold on every version of the backup's archive and manifest (a retention still holds)."""
    _set_hold(app, args, False)


@click.group("keys")
def keys_group() -> None:
    """The keys that wrap encrypted backups' data keys, and those that sign backups."""


@keys_group.command("rotate")
@click.argument("names", nargs=-1, metavar="[BACKUP]...", shell_complete=complete_backup)
@click.option("--from", "old", required=True, metavar="KEY", help="The key that opens the backups now: a key "
              "file's path, or kms:ID|ARN|alias/NAME.")  # fmt: skip
@click.option("--to", "new", required=True, metavar="KEY", help="The key to wrap their data keys by as well.")
@click.option("--all", "all_", is_flag=True, help="Every complete backup in the store.")
@click.option("--retire", is_flag=True, help="Then remove the --from key's wrappings, once every backup opens with "
              "the --to key (a restore with the old key is then told it was retired).")  # fmt: skip
@storage_options
@output_option
@pass_args(RotateArgs, check=True)
def rotate(app: App, args: RotateArgs) -> None:
    """Wrap the data keys of existing backups by a new key, without re-encrypting any archive. Each backup opens
    with either key throughout; run it again to finish a run that stopped (done backups are left as they are)."""
    if bool(args.names) == args.all_:
        raise ConfigError("name the backups to rotate, or pass --all (not both)")
    store = app.store(args.storage, args.s3())
    rotation = keys.rotate(store, list(args.names), kek_of(args.old), kek_of(args.new), args.retire)
    rows = [(r.name, r.action, r.detail) for r in rotation.results]
    tail = f"\n\n{args.old} was not retired: {rotation.not_retired}" if rotation.not_retired else ""
    data = {"results": [r.to_dict() for r in rotation.results], "notRetired": rotation.not_retired or None}
    emit(data, args.output, (table(["BACKUP", "ACTION", "DETAIL"], rows) if rows else "No backups") + tail)
    if rotation.failed or rotation.not_retired:
        raise PartialFailure(f"{len(rotation.failed)} backup(s) not rotated: run the same command again once fixed")


@dataclasses.dataclass(frozen=True, kw_only=True)
class GenerateKeyArgs:
    path: str
    output: OutputFormat


@keys_group.command("generate-signing-key")
@click.argument("path", type=click.Path(dir_okay=False))
@output_option
@pass_args(GenerateKeyArgs)
def generate_signing_key(app: App, args: GenerateKeyArgs) -> None:
    """Write a new Ed25519 signing key to PATH (PEM, mode 0600) and its public key to PATH.pub.

    Backups made with --signing-key-file PATH are signed; a restore, verify or controller given --verify-key-file
    PATH.pub takes only backups signed by it. Keep PATH where backups are made, PATH.pub where they are restored."""
    pub, key = signing.generate(args.path)
    emit({"privateKey": args.path, "publicKey": str(pub), "keyId": key.id}, args.output,
         f"Signing key {key.id} written to {args.path}; its public key to {pub}")  # fmt: skip


COMMANDS = (hold, keys_group)
