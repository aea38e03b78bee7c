"""BackupStore: the one owner of a store's backup layout, on every kind of store."""

from __future__ import annotations

import orjson
import pytest

from statusvault.errors import ArchiveError, BackupNotFoundError, StorageError
from statusvault.storage.base import ObjectStore
from statusvault.store.backups import BackupStore
from statusvault.store.writerlease import claim
from tests.hostile import Backup


def _complete(backups: BackupStore, name: str) -> dict:
    planted = Backup.base(name, "team-a").planted()
    with backups.writing_archive(name) as sink:
        sink.write(planted.archive)
    manifest = {
        **planted.summary,
        "archive": backups.archive_entry(len(planted.archive), planted.summary["archive"]["sha256"]),
    }
    assert not backups.is_complete(name), "an archive alone is not a backup"
    backups.complete(name, manifest)
    return manifest


def test_a_backup_is_complete_once_its_manifest_is_written(store: ObjectStore):
    backups = BackupStore(store)
    manifest = _complete(backups, "b1")
    assert backups.is_complete("b1")
    assert backups.manifest("b1") == manifest
    [stored] = backups.stored()
    assert (stored.name, stored.complete, stored.leased) == ("b1", True, False)
    assert stored.size == backups.archive_size("b1") + len(store.get("backups/b1/manifest.json"))


def test_an_archive_without_its_manifest_reads_as_incomplete_and_a_missing_one_as_not_found(store: ObjectStore):
    backups = BackupStore(store)
    with backups.writing_archive("half") as sink:
        sink.write(b"x")
    with pytest.raises(ArchiveError, match="incomplete"):
        backups.manifest("half")
    with pytest.raises(BackupNotFoundError, match="not found"):
        backups.manifest("none")
    backups.discard_archive("half")
    assert backups.stored() == []


def test_a_backup_being_written_is_named_as_such(store: ObjectStore):
    backups = BackupStore(store)
    with claim(store, "w"):
        with pytest.raises(ArchiveError, match="being written by another run"):
            backups.manifest("w")
        assert [s.leased for s in backups.stored()] == [True]


def test_a_manifest_rewrite_changes_only_what_it_read(conditional_store: ObjectStore):
    backups = BackupStore(conditional_store)
    _complete(backups, "b1")
    assert backups.rewrite_manifest("b1", lambda m: {**m, "schedule": "nightly"})
    assert backups.manifest("b1")["schedule"] == "nightly"
    assert not backups.rewrite_manifest("b1", lambda m: m), "an unchanged manifest is not written"

    rounds = iter(range(100))

    def racing(m: dict) -> dict:  # another writer replaces the manifest between each read and write
        conditional_store.put("backups/b1/manifest.json", orjson.dumps({**m, "schedule": f"theirs-{next(rounds)}"}))
        return {**m, "schedule": "ours"}

    with pytest.raises(StorageError, match="changed 5 times"):
        backups.rewrite_manifest("b1", racing)
    assert backups.manifest("b1")["schedule"] == "theirs-4", "no lost write overwrote the other writer's"


def test_delete_removes_the_manifest_first_and_refuses_a_live_writer(store: ObjectStore):
    backups = BackupStore(store)
    _complete(backups, "b1")
    removed = backups.delete("b1")
    assert removed[0].endswith("/manifest.json") and len(removed) == 2
    assert backups.stored() == []
    with pytest.raises(BackupNotFoundError):
        backups.delete("b1")
    with claim(store, "w"):
        with backups.writing_archive("w") as sink:
            sink.write(b"x")
        with pytest.raises(StorageError, match="being written by another run"):
            backups.delete("w")


def test_the_controllers_reports_are_kept_outside_the_backups(store: ObjectStore):
    backups = BackupStore(store)
    url = backups.put_report("Restore", "team-a", "r1", "abc", {"phase": "Completed"})
    assert url.startswith(store.url.rstrip("/")) and "/reports/" in url
    assert backups.stored() == []
    key = url.removeprefix(store.url.rstrip("/") + "/")
    assert orjson.loads(store.get(key)) == {"phase": "Completed"}
