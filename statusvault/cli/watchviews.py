"""The watch views of list, verify and prune: timelines, chain checks, chain retention."""

from __future__ import annotations

from typing import Any

from statusvault.archive.envelope import Keys
from statusvault.cli.output import OutputFormat, emit, human_size, table
from statusvault.errors import ArchiveError
from statusvault.storage.base import ObjectStore
from statusvault.store.backups import BackupStore
from statusvault.store.retention import Decision, RetentionPolicy
from statusvault.watch import chains
from statusvault.watch.prune import prune_watch


def is_watch(store: ObjectStore, name: str) -> bool:
    """NAME is a watch (and no backup has that name)."""
    return not BackupStore(store).is_complete(name) and chains.watch_exists(store, name)


def show_timeline(store: ObjectStore, output: OutputFormat) -> None:
    data, rows = [], []
    for watch in chains.watch_names(store):
        found = chains.chains(store, watch)
        data.append({"watch": watch, "chains": [c.to_dict() for c in found]})
        for c in found:
            d = c.to_dict()
            rows.append((watch, c.base, d["from"], d["until"], c.segments, human_size(c.stored_bytes)))
    text = table(["WATCH", "BASE", "FROM", "UNTIL", "SEGMENTS", "SIZE"], rows) if rows else f"No watches in {store.url}"
    emit(data, output, text)


def verify_watch(store: ObjectStore, name: str, key: Keys, output: OutputFormat) -> None:
    """Walk every chain; a broken one is one line and a non-zero exit."""
    try:
        found, unread = chains.verify(store, name, key)
    except ArchiveError as e:
        emit({"name": name, "ok": False, "error": str(e)}, output, f"Watch {name}: FAILED: {e}")
        raise ArchiveError(f"watch {name!r} failed verification") from None
    segments = sum(c.segments for c in found)
    data = {"name": name, "ok": True, "recordsChecked": not unread, "chains": [c.to_dict() for c in found]}
    text = f"Watch {name}: OK ({len(found)} chain(s), {segments} segment(s) checked)"
    if unread:
        text = (f"Watch {name}: links and checksums OK ({len(found)} chain(s), {segments} segment(s)); "
                "encrypted: pass --encryption-key-file to check every record")  # fmt: skip
    emit(data, output, text)


def prune_watch_cmd(
    store: ObjectStore, watch: str, policy: RetentionPolicy, dry_run: bool, output: OutputFormat
) -> None:
    decisions: list[Decision] = prune_watch(store, watch, policy, dry_run)
    verb = "would delete" if dry_run else "deleted"
    rows = [(d.name, verb if d.delete else "keep", d.reason) for d in decisions]
    deleted = sum(d.delete for d in decisions)
    text = (table(["CHAIN", "ACTION", "REASON"], rows) + "\n\n" if rows else "") + (
        f"{deleted} chain(s) of watch {watch} {verb}, {len(decisions) - deleted} kept"
    )
    data: dict[str, Any] = {"watch": watch, "dryRun": dry_run, "decisions": [vars(d) for d in decisions]}
    emit(data, output, text)
