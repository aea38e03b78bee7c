from __future__ import annotations

import pytest

from statusvault.errors import ConfigError, StorageError
from statusvault.storage import LocalStore, open_store
from statusvault.storage.base import archive_key, backup_name_of, manifest_key, validate_backup_name
from statusvault.storage.s3 import S3Store


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
