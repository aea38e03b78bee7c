from __future__ import annotations

import orjson
import pytest

from statusvault.errors import ConfigError, StorageError
from statusvault.restore.runner import open_backup
from statusvault.storage import LocalStore, ObjectStore, S3Options, open_store
from statusvault.storage.base import (
    SweepsStaleWrites,
    WritesConditionally,
    archive_key,
    backup_name_of,
    manifest_key,
    put_if,
    read_versioned,
    sweep_stale_writes,
    validate_backup_name,
)
from statusvault.storage.s3 import S3Store
from statusvault.store import catalog
from statusvault.store.backups import BackupStore
from tests.hostile import Backup
from tests.memstore import MemoryStore


@pytest.mark.parametrize("name", ["backup-20250101", "nightly.1", "a_b"])
def test_valid_names(name):
    assert validate_backup_name(name) == name
    assert backup_name_of(archive_key(name)) == name
    assert manifest_key(name) == f"backups/{name}/manifest.json"


@pytest.mark.parametrize(
    "name", ["", "../x", "a/b", ".hidden", "-x", "a b", "x" * 201, "nightly-\u0430", "\u0440rod", "b\uff11"]
)
def test_invalid_names(name):
    with pytest.raises(ConfigError):
        validate_backup_name(name)


def test_open_store_parses_urls(tmp_path):
    assert isinstance(open_store(str(tmp_path)), LocalStore)
    assert open_store(f"file://{tmp_path}").url == f"file://{tmp_path}"
    s3 = open_store("s3://bucket/some/prefix/")
    assert isinstance(s3, S3Store) and (s3.bucket, s3.prefix) == ("bucket", "some/prefix/")
    with pytest.raises(ConfigError):
        open_store("gs://bucket")
    with pytest.raises(ConfigError):
        open_store("s3:///nobucket")


def test_local_store_writes_atomically(tmp_path):
    store = LocalStore(tmp_path)
    with store.open_write("backups/a/archive.tar.gz") as w:
        w.write(b"data")
    assert store.get("backups/a/archive.tar.gz") == b"data"
    with pytest.raises(RuntimeError), store.open_write("backups/b/archive.tar.gz") as w:
        w.write(b"half")
        raise RuntimeError("boom")
    assert not store.exists("backups/b/archive.tar.gz")
    assert [o.key for o in store.list("backups/")] == ["backups/a/archive.tar.gz"]


def test_local_store_refuses_keys_that_escape(tmp_path):
    store = LocalStore(tmp_path / "root")
    with pytest.raises(StorageError):
        store.put("../outside", b"x")


def test_local_store_delete_prunes_empty_dirs(tmp_path):
    store = LocalStore(tmp_path)
    store.put("backups/a/manifest.json", b"{}")
    store.delete("backups/a/manifest.json")
    assert not (tmp_path / "backups").exists()
    assert tmp_path.exists()


def test_sweep_removes_only_stale_partial_files(tmp_path):
    import os
    import time

    store = LocalStore(tmp_path)
    killed = tmp_path / "backups" / "killed" / ".archive.tar.gz.abc.partial"
    running = tmp_path / "backups" / "running" / ".archive.tar.gz.def.partial"
    done = tmp_path / "backups" / "done" / "archive.tar.gz"
    for f in (killed, running, done):
        f.parent.mkdir(parents=True)
        f.write_bytes(b"x")
    old = time.time() - 7200
    os.utime(killed, (old, old))
    os.utime(done, (old, old))
    assert store.sweep(3600) == 1
    assert not killed.parent.exists(), "the killed backup's empty directory goes too"
    assert running.exists() and done.exists()


# --- the ObjectStore protocol, the same contract for every backend ---


def test_whole_objects_round_trip(store: ObjectStore):
    store.put("backups/a/manifest.json", b"{}")
    assert store.exists("backups/a/manifest.json") and not store.exists("backups/a/archive.tar.gz")
    assert store.get("backups/a/manifest.json") == b"{}"
    store.delete("backups/a/manifest.json")
    assert not store.exists("backups/a/manifest.json")
    with pytest.raises(StorageError):
        store.get("backups/a/manifest.json")


def test_get_reads_at_most_limit_bytes(store: ObjectStore):
    store.put("backups/a/manifest.json", b"0123456789")
    assert store.get("backups/a/manifest.json", 4) == b"0123"
    assert store.get("backups/a/manifest.json", 100) == b"0123456789"
    assert store.get("backups/a/manifest.json", 0) == b""


def test_list_is_by_key_prefix(store: ObjectStore):
    for key in ("backups/a/archive.tar.gz", "backups/a/manifest.json", "backups/ab/manifest.json", "other/x"):
        store.put(key, b"12345")
    assert sorted(o.key for o in store.list("backups/a/")) == ["backups/a/archive.tar.gz", "backups/a/manifest.json"]
    assert sorted(o.key for o in store.list("backups/a")) == [
        "backups/a/archive.tar.gz",
        "backups/a/manifest.json",
        "backups/ab/manifest.json",
    ]
    assert [(o.key, o.size) for o in store.list("backups/a/archive.tar.gz")] == [("backups/a/archive.tar.gz", 5)]
    assert list(store.list("backups/none/")) == []
    assert len(list(store.list(""))) == 4


def test_a_streamed_write_appears_only_when_it_completes(store: ObjectStore):
    with store.open_write("backups/a/archive.tar.gz") as w:
        w.write(b"part one, ")
        assert not store.exists("backups/a/archive.tar.gz")
        assert list(store.list("backups/")) == []
        w.write(b"part two")
    assert store.get("backups/a/archive.tar.gz") == b"part one, part two"
    with pytest.raises(RuntimeError), store.open_write("backups/b/archive.tar.gz") as w:
        w.write(b"half")
        raise RuntimeError("killed")
    assert not store.exists("backups/b/archive.tar.gz")


def test_local_file_holds_the_object_while_open(store: ObjectStore):
    store.put("backups/a/archive.tar.gz", b"archive bytes")
    with store.local_file("backups/a/archive.tar.gz") as path:
        assert path.read_bytes() == b"archive bytes"
        assert path.read_bytes() == b"archive bytes", "readers read it more than once"
    with pytest.raises(StorageError), store.local_file("backups/none/archive.tar.gz"):
        pass


def test_stale_writes_are_swept_only_where_a_store_leaves_them(store: ObjectStore):
    assert sweep_stale_writes(store, 3600) == 0
    assert isinstance(store, SweepsStaleWrites) == (not isinstance(store, MemoryStore))


def test_an_aborted_multipart_upload_leaves_nothing(s3_store: S3Store, monkeypatch):
    import statusvault.storage.s3 as s3

    monkeypatch.setattr(s3, "PART_SIZE", 5 << 20)
    with pytest.raises(RuntimeError), s3_store.open_write("backups/b/archive.tar.gz") as w:
        w.write(bytes(6 << 20))  # one part uploaded
        raise RuntimeError("killed")
    assert not s3_store.exists("backups/b/archive.tar.gz")
    assert not s3_store.client.list_multipart_uploads(Bucket="vault").get("Uploads")


def test_a_missing_bucket_fails_the_listing_by_name(s3_store: S3Store):
    gone = S3Store("no-such-bucket", "", S3Options(region="us-east-1"), client=s3_store.client)
    with pytest.raises(StorageError, match="bucket 'no-such-bucket' does not exist"):
        list(gone.list("backups/"))


def test_a_conditional_write_wins_only_where_the_condition_holds(store: ObjectStore):
    """Absent (None) or the version read: a second writer with the same condition loses. Stores without
    conditional writes get the same answers from read-compare-write (without its atomicity)."""
    key = "backups/a/writer.json"
    first = put_if(store, key, b"one", None)
    assert first is not None
    assert put_if(store, key, b"two", None) is None, "it exists"
    current = read_versioned(store, key)
    assert current is not None and (current.data, current.version) == (b"one", first)
    assert -2 < current.age < 60, "by the store's clock: just written"
    second = put_if(store, key, b"two", first)
    assert second is not None and second != first
    assert put_if(store, key, b"three", first) is None, "another writer wrote since"
    assert store.get(key) == b"two"
    assert read_versioned(store, "backups/a/none.json") is None
    store.delete(key)
    assert put_if(store, key, b"four", second) is None, "gone: the version read is no longer there"
    assert not store.exists(key)


def test_conditional_writes_are_native_to_every_store_but_the_plain_protocol(store: ObjectStore):
    assert isinstance(store, WritesConditionally) == (type(store) is not MemoryStore)


def test_a_local_lease_is_aged_by_the_stores_own_clock(tmp_path):
    import os
    import time

    store = LocalStore(tmp_path)
    put_if(store, "backups/a/writer.json", b"x", None)
    old = time.time() - 300
    os.utime(tmp_path / "backups" / "a" / "writer.json", (old, old))
    current = read_versioned(store, "backups/a/writer.json")
    assert current is not None and 299 < current.age < 310


def test_engines_work_on_any_store_that_fits_the_protocol():
    """The catalog and a restore's reader know no backend: a store that is neither a directory nor S3 serves."""
    store = MemoryStore()
    planted = Backup.base("mem", "hostile").planted()
    store.put("backups/mem/archive.tar.gz", planted.archive)
    store.put("backups/mem/manifest.json", orjson.dumps(planted.summary))
    assert [b.name for b in catalog.list_backups(store)] == ["mem"]
    assert catalog.verify(store, "mem").ok
    with open_backup(store, "mem") as reader:
        assert len(list(reader.objects())) == 4
    BackupStore(store).delete("mem")
    assert store.objects == {}


def test_an_s3_store_without_conditional_writes_reads_and_compares(s3_store: S3Store, monkeypatch, caplog):
    import botocore.exceptions

    plain = s3_store.client.put_object

    def put_object(**kw):
        if "IfNoneMatch" in kw or "IfMatch" in kw:
            raise botocore.exceptions.ClientError({"Error": {"Code": "NotImplemented", "Message": "no"}}, "PutObject")
        return plain(**kw)

    monkeypatch.setattr(s3_store.client, "put_object", put_object)
    first = put_if(s3_store, "backups/a/writer.json", b"one", None)
    assert first is not None and put_if(s3_store, "backups/a/writer.json", b"two", None) is None
    assert put_if(s3_store, "backups/a/writer.json", b"two", first) is not None
    assert s3_store.get("backups/a/writer.json") == b"two"
    assert "has no conditional writes" in caplog.text
