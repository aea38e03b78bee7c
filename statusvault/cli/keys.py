"""hold set|release (S3 legal holds) and keys rotate (re-wrapping backups' data keys)."""

from __future__ import annotations

from typing import Any

import click

from statusvault import catalog, keys
from statusvault.cli.app import App
from statusvault.cli.options import kek_of, output_option, s3_options, storage_options
from statusvault.cli.output import emit, table
from statusvault.errors import ConfigError, PartialFailure


@click.group()
def hold() -> None:
    """Legal holds on backups in a bucket with S3 Object Lock: a held backup cannot be deleted by anyone."""


def _set_hold(app: App, name: str, output: str, kw: dict[str, Any], on: bool) -> None:
    store = app.store(kw.pop("storage"), s3_options(kw))
    count = catalog.set_legal_hold(store, name, on)
    verb = "set on" if on else "released on"
    emit({"name": name, "legalHold": on, "versions": count}, output,
         f"Legal hold {verb} backup {name} ({count} object versions)")  # fmt: skip


@hold.command("set")
@click.argument("name")
@storage_options
@output_option
@click.pass_obj
def hold_set(app: App, /, name: str, output: str, **kw: Any) -> None:
    """Put a legal hold on every version of the backup's archive and manifest: no delete, prune or retention
    removes them until it is released."""
    _set_hold(app, name, output, kw, True)


@hold.command("release")
@click.argument("name")
@storage_options
@output_option
@click.pass_obj
def hold_release(app: App, /, name: str, output: str, **kw: Any) -> None:
    """Release the legal hold on every version of the backup's archive and manifest (a retention still holds)."""
    _set_hold(app, name, output, kw, False)


@click.group("keys")
def keys_group() -> None:
    """The keys that wrap encrypted backups' data keys."""


@keys_group.command("rotate")
@click.argument("names", nargs=-1, metavar="[BACKUP]...")
@click.option("--from", "old", required=True, metavar="KEY", help="The key that opens the backups now: a key "
              "file's path, or kms:ID|ARN|alias/NAME.")  # fmt: skip
@click.option("--to", "new", required=True, metavar="KEY", help="The key to wrap their data keys by as well.")
@click.option("--all", "all_", is_flag=True, help="Every complete backup in the store.")
@click.option("--retire", is_flag=True, help="Then remove the --from key's wrappings, once every backup opens with "
              "the --to key (a restore with the old key is then told it was retired).")  # fmt: skip
@storage_options
@output_option
@click.pass_obj
def rotate(app: App, /, names: tuple[str, ...], old: str, new: str, all_: bool, retire: bool, output: str,
           **kw: Any) -> None:  # fmt: skip
    """Wrap the data keys of existing backups by a new key, without re-encrypting any archive. Each backup opens
    with either key throughout; run it again to finish a run that stopped (done backups are left as they are)."""
    if bool(names) == all_:
        raise ConfigError("name the backups to rotate, or pass --all (not both)")
    store = app.store(kw.pop("storage"), s3_options(kw))
    rotation = keys.rotate(store, list(names), kek_of(old), kek_of(new), retire)
    rows = [(r.name, r.action, r.detail) for r in rotation.results]
    tail = f"\n\n{old} was not retired: {rotation.not_retired}" if rotation.not_retired else ""
    data = {"results": [r.to_dict() for r in rotation.results], "notRetired": rotation.not_retired or None}
    emit(data, output, (table(["BACKUP", "ACTION", "DETAIL"], rows) if rows else "No backups") + tail)
    if rotation.failed or rotation.not_retired:
        raise PartialFailure(f"{len(rotation.failed)} backup(s) not rotated: run the same command again once fixed")


COMMANDS = (hold, keys_group)
