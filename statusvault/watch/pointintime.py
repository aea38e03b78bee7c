"""Rebuild a watch's state at one moment as a temporary v1 backup: the chain's base, then every change seen up
to that moment, folded in an on-disk SQLite table (memory does not grow with the objects). The normal restore
then reads it like any backup."""

from __future__ import annotations

import contextlib
import datetime as dt
import sqlite3
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any, NamedTuple

import orjson

from statusvault import rfc3339
from statusvault.archive import ArchiveWriter, member_path, parse_member_path
from statusvault.archive.envelope import Keys
from statusvault.errors import ArchiveError
from statusvault.model import ObjectKey
from statusvault.restore.options import parse_at
from statusvault.restore.runner import open_backup
from statusvault.storage.base import ObjectStore
from statusvault.storage.local import LocalStore
from statusvault.store.backups import BackupStore
from statusvault.watch.chains import Chain, chain_for, chains, walk
from statusvault.watch.segments import parse_record_time, stamp

SCHEMA = """
CREATE TABLE objs (resource TEXT, namespace TEXT, name TEXT, data BLOB, PRIMARY KEY (resource, namespace, name))
"""


def point_name(watch: str, at: dt.datetime) -> str:
    """The materialised backup's name: the same watch and moment always give the same name (and bytes)."""
    return f"{watch}-at-{at.astimezone(dt.UTC):%Y%m%d%H%M%S}-{at.microsecond:06d}"


@contextlib.contextmanager
def point_in_time(
    store: ObjectStore, watch: str, at: dt.datetime | None, key: Keys
) -> Iterator[tuple[ObjectStore, str, dt.datetime]]:
    """(a temporary store, the backup name in it, the moment) holding the watch's state at `at` (None: latest).

    The temporary store's URL names the watch, so a restore's journal (keyed by store URL, name and archive
    SHA-256) resumes when the same restore --at runs again."""
    chain, moment = chain_for(chains(store, watch), at, watch)
    name = point_name(watch, moment)
    with tempfile.TemporaryDirectory(prefix="statusvault-at-") as tmp:
        out = LocalStore(Path(tmp) / "store")
        out.url = f"{store.url}#watch={watch}"
        with contextlib.closing(sqlite3.connect(Path(tmp) / "state.sqlite")) as db:
            db.executescript("PRAGMA journal_mode=OFF; PRAGMA synchronous=OFF;" + SCHEMA)
            base = _load_base(db, store, chain, key)
            _apply_changes(db, store, chain, key, moment, base["resources"])
            _write_backup(db, out, name, base, moment, chain)
        yield out, name, moment


def _load_base(db: sqlite3.Connection, store: ObjectStore, chain: Chain, key: Keys) -> dict[str, Any]:
    with open_backup(store, chain.base, key) as reader:
        head = reader.head()
        rows = ((k.qualified, k.namespace, k.name, data) for k, data in _keyed(reader.objects()))
        db.executemany("INSERT INTO objs VALUES (?, ?, ?, ?)", rows)
    db.commit()
    return head


def _keyed(objects: Iterator[tuple[str, bytes]]) -> Iterator[tuple[ObjectKey, bytes]]:
    for path, data in objects:
        yield parse_member_path(path), data


def _apply_changes(
    db: sqlite3.Connection,
    store: ObjectStore,
    chain: Chain,
    key: Keys,
    moment: dt.datetime,
    resources: dict[str, Any],
) -> None:
    """Fold every change seen up to `moment` into the table: the object after it, or its absence."""
    for rec in walk(store, chain, key, upto=moment):
        if parse_record_time(rec["seen"]) > moment:
            break
        rt = resources.get(rec["resource"])
        if rt is None:
            raise ArchiveError(f"watch {chain.watch!r}: a record names {rec['resource']!r}, which its base has not")
        meta = rec["object"].get("metadata") or {}
        ident = (rec["resource"], meta.get("namespace", "") if rt["namespaced"] else "", meta["name"])
        if rec["op"] == "delete":
            db.execute("DELETE FROM objs WHERE resource = ? AND namespace = ? AND name = ?", ident)
        else:
            data = orjson.dumps(rec["object"], option=orjson.OPT_SORT_KEYS)
            db.execute("INSERT OR REPLACE INTO objs VALUES (?, ?, ?, ?)", (*ident, data))
    db.commit()


def _write_backup(
    db: sqlite3.Connection, out: ObjectStore, name: str, base: dict[str, Any], moment: dt.datetime, chain: Chain
) -> None:
    """The table as a v1 backup: the base's resource types in its order, objects by namespace and name."""
    manifest = {k: v for k, v in base.items() if k not in ("files", "encryption")}
    resources = {q: {**r, "count": 0, "withStatus": 0, "terminating": 0} for q, r in base["resources"].items()}
    backups = BackupStore(out)
    with backups.writing_archive(name) as sink:
        writer = ArchiveWriter(sink, compresslevel=1, mtime=moment.timestamp())
        for qualified, entry in resources.items():
            cursor = db.execute(
                "SELECT namespace, name, data FROM objs WHERE resource = ? ORDER BY namespace, name", (qualified,)
            )
            for namespace, obj_name, data in cursor:
                writer.add(member_path(ObjectKey(qualified, namespace, obj_name)), data)
                _count(entry, orjson.loads(data), qualified.startswith("customresourcedefinitions."))
        when = rfc3339.format_seconds(moment)
        manifest.update(name=name, createdAt=when, completedAt=when, resources=resources)
        manifest["totals"] = {
            "objects": sum(r["count"] for r in resources.values()),
            "withStatus": sum(r["withStatus"] for r in resources.values()),
            "terminating": sum(r["terminating"] for r in resources.values()),
            "uncompressedBytes": writer.raw_bytes,
        }
        manifest["pointInTime"] = {"watch": chain.watch, "at": stamp(moment), "base": chain.base}
        size, sha = writer.finish(manifest)
    manifest["archive"] = backups.archive_entry(size, sha)
    backups.complete(name, manifest)
    backups.manifest(name)  # the same checks as any stored backup


def _count(entry: dict[str, Any], obj: dict[str, Any], is_crd: bool) -> None:
    entry["count"] += 1
    entry["withStatus"] += int(bool(obj.get("status")) and not is_crd)
    entry["terminating"] += int("deletionTimestamp" in (obj.get("metadata") or {}))


class Moment(NamedTuple):
    """A watch's moment as a backup: the temporary store holding it, its name there, the lineage a restore of it
    keys its journal by, and the moment itself (`latest` resolved)."""

    store: ObjectStore
    name: str
    lineage: str
    at: dt.datetime


@contextlib.contextmanager
def moment_of(store: ObjectStore, watch: str, at: str, key: Keys) -> Iterator[Moment]:
    """`restore --at AT` (or a Restore's spec.at): the watch's state at AT (`latest`, or an RFC 3339 time) as a
    temporary backup. A restore of `latest` keys its journal by the watch and `latest` (the moment moves on between
    runs); one of a fixed moment by the moment's own backup."""
    wanted = parse_at(at)
    with point_in_time(store, watch, wanted, key) as (moment_store, name, moment):
        yield Moment(moment_store, name, "" if wanted else f"{watch}-at-latest", moment)
