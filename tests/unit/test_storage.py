from __future__ import annotations

import datetime as dt
import io
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import boto3
import orjson
import pytest

from statusvault import catalog
from statusvault.errors import ConfigError, StorageError
from statusvault.restore.service import open_backup
from statusvault.storage import LocalStore, ObjectStore, S3Options, open_store
from statusvault.storage.base import (
    StoredObject,
    SweepsStaleWrites,
    archive_key,
    backup_name_of,
    manifest_key,
    sweep_stale_writes,
    validate_backup_name,
)
from statusvault.storage.s3 import S3Store
from tests.hostile import Backup


@pytest.mark.parametrize("name", ["backup-20250101", "nightly.1", "a_b"])
def test_valid_names(name):
    assert validate_backup_name(name) == name
    assert backup_name_of(archive_key(name)) == name
    assert manifest_key(name) == f"backups/{name}/manifest.json"


@pytest.mark.parametrize("name", ["", "../x", "a/b", ".hidden", "-x", "a b", "x" * 201])
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


class MemoryStore:
    """The protocol and nothing more, in memory: what an engine may count on from any store."""

    url = "memory://"

    def __init__(self) -> None:
        self.objects: dict[str, bytes] = {}

    def put(self, key: str, data: bytes) -> None:
        self.objects[key] = data

    def get(self, key: str, limit: int = -1) -> bytes:
        if key not in self.objects:
            raise StorageError(f"{self.url}{key} does not exist")
        return self.objects[key][: limit if limit >= 0 else None]

    def exists(self, key: str) -> bool:
        return key in self.objects

    def list(self, prefix: str) -> Iterator[StoredObject]:
        now = dt.datetime.now(dt.UTC)
        return iter([StoredObject(k, len(v), now) for k, v in self.objects.items() if k.startswith(prefix)])

    def delete(self, key: str) -> None:
        self.objects.pop(key, None)

    @contextmanager
    def open_write(self, key: str) -> Iterator[io.BytesIO]:
        buf = io.BytesIO()
        yield buf
        self.objects[key] = buf.getvalue()

    @contextmanager
    def local_file(self, key: str) -> Iterator[Path]:
        with tempfile.TemporaryDirectory() as tmp:
            path = Path(tmp) / "object"
            path.write_bytes(self.get(key))
            yield path


@pytest.fixture
def s3_store(monkeypatch) -> Iterator[S3Store]:
    """An S3Store over moto's in-process S3 (no server, no network)."""
    from moto import mock_aws

    for var, value in {"AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing"}.items():
        monkeypatch.setenv(var, value)
    with mock_aws():
        client = boto3.client("s3", region_name="us-east-1")
        client.create_bucket(Bucket="vault")
        yield S3Store("vault", "team", S3Options(region="us-east-1"), client=client)


@pytest.fixture(params=["local", "s3", "memory"])
def store(request, tmp_path) -> ObjectStore:
    if request.param == "local":
        return LocalStore(tmp_path / "root")
    if request.param == "s3":
        s3: S3Store = request.getfixturevalue("s3_store")
        return s3
    return MemoryStore()


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
    catalog.delete(store, "mem")
    assert store.objects == {}
