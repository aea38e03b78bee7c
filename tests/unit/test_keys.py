"""Key rotation (statusvault/keys/rotation.py): data keys re-wrapped without re-encrypting; every backup opens with the
old or the new key at every moment of a run; a run that stopped is finished by running it again; the old key is retired
only once every backup opens with the new one."""

from __future__ import annotations

import json
import shutil

import pytest

from statusvault.archive.envelope import FileKek, Keyring
from statusvault.errors import ConfigError, StorageError
from statusvault.keys import rotation as keys
from statusvault.storage.base import manifest_key
from statusvault.storage.local import LocalStore
from statusvault.store import catalog
from statusvault.store.backups import BackupStore
from tests.golden import V1
from tests.sealed import back_up, cluster, key_file, names_in

NAMES = ["kc-0", "kc-1", "kc-2"]


@pytest.fixture
def store(tmp_path) -> LocalStore:
    return LocalStore(tmp_path / "store")


@pytest.fixture
def old(tmp_path) -> FileKek:
    return FileKek.from_file(key_file(tmp_path, "old"))


@pytest.fixture
def new(tmp_path) -> FileKek:
    return FileKek.from_file(key_file(tmp_path, "new"))


def archive_bytes(store: LocalStore, name: str) -> bytes:
    return (store.root / "backups" / name / "archive.tar.gz").read_bytes()


def test_rotation_wraps_each_data_key_anew_and_leaves_the_archives_as_they_were(store, old, new):
    kube = cluster()
    for name in ("a", "b"):
        back_up(kube, store, name, key=Keyring((old,)))
    before = {n: archive_bytes(store, n) for n in ("a", "b")}

    rotation = keys.rotate(store, [], old, new)

    assert [(r.name, r.action) for r in rotation.results] == [("a", "wrapped"), ("b", "wrapped")]
    assert {n: archive_bytes(store, n) for n in ("a", "b")} == before, "no archive re-encrypted"
    for name in ("a", "b"):
        for key in (old, new):
            assert names_in(store, name, Keyring((key,))) == NAMES
        assert catalog.verify(store, name, Keyring((new,))).ok
    again = keys.rotate(store, [], old, new)
    assert [r.action for r in again.results] == ["unchanged", "unchanged"], "idempotent"


def test_retire_removes_the_old_wrapping_once_every_backup_opens_with_the_new_key(store, old, new):
    back_up(cluster(), store, "a", key=Keyring((old,)))
    rotation = keys.rotate(store, ["a"], old, new, retire=True)
    assert [(r.name, r.action) for r in rotation.results] == [("a", "retired")] and not rotation.not_retired
    assert names_in(store, "a", Keyring((new,))) == NAMES
    with pytest.raises(ConfigError, match=r"^key file .*old.key was retired from backup 'a': use a key it is wrapped"):
        names_in(store, "a", Keyring((old,)))
    encryption = BackupStore(store).manifest("a")["encryption"]
    assert [w["kek"] for w in encryption["wrappedKeys"]] == [new.ref()] and encryption["retiredKeys"] == [old.ref()]
    assert [r.action for r in keys.rotate(store, ["a"], old, new, retire=True).results] == ["unchanged"]


def test_nothing_is_retired_while_a_backup_does_not_open_with_the_new_key(store, old, new, tmp_path):
    other = FileKek.from_file(key_file(tmp_path, "other"))
    kube = cluster()
    back_up(kube, store, "a", key=Keyring((old,)))
    back_up(kube, store, "b", key=Keyring((other,)))  # OLD never opened it: NEW cannot be added

    rotation = keys.rotate(store, [], old, new, retire=True)

    assert [(r.name, r.action) for r in rotation.results] == [("a", "wrapped"), ("b", "failed")]
    assert "was encrypted with key" in rotation.failed[0].detail
    assert rotation.not_retired == "1 backup(s) do not open with key file " + str(tmp_path / "new.key") + " yet"
    assert names_in(store, "a", Keyring((old,))) == NAMES, "still opens with OLD"


def test_a_rotation_that_stopped_is_finished_by_running_it_again(store, old, new, monkeypatch):
    kube = cluster()
    for name in ("a", "b", "c"):
        back_up(kube, store, name, key=Keyring((old,)))
    real = LocalStore.put_if
    writes: list[str] = []

    def put_if(self, key, data, version):  # every backup opens with OLD or NEW after each write; the third fails
        if len(writes) == 2:
            raise StorageError("the store went away")
        written = real(self, key, data, version)
        writes.append(key)
        for name in ("a", "b", "c"):
            assert names_in(store, name, Keyring((old,))) == NAMES
            if manifest_key(name) in writes:
                assert names_in(store, name, Keyring((new,))) == NAMES
        return written

    monkeypatch.setattr(LocalStore, "put_if", put_if)
    first = keys.rotate(store, [], old, new, retire=True)
    assert [r.action for r in first.results] == ["wrapped", "wrapped", "failed"] and first.not_retired
    monkeypatch.setattr(LocalStore, "put_if", real)
    second = keys.rotate(store, [], old, new, retire=True)
    assert [r.action for r in second.results] == ["retired"] * 3
    assert all(names_in(store, n, Keyring((new,))) == NAMES for n in ("a", "b", "c"))


def test_a_manifest_rewritten_meanwhile_is_read_again_not_overwritten(store, old, new, tmp_path, monkeypatch):
    third = FileKek.from_file(key_file(tmp_path, "third"))
    back_up(cluster(), store, "a", key=Keyring((old,)))
    real = LocalStore.put_if
    raced: list[bool] = []

    def put_if(self, key, data, version):
        if not raced:  # another rotation lands between this one's read and its write
            raced.append(True)
            assert keys.rotate(store, ["a"], old, third).results[0].action == "wrapped"
        return real(self, key, data, version)

    monkeypatch.setattr(LocalStore, "put_if", put_if)
    assert keys.rotate(store, ["a"], old, new).results[0].action == "wrapped"
    wrapped = [w["kek"] for w in BackupStore(store).manifest("a")["encryption"]["wrappedKeys"]]
    assert wrapped == [old.ref(), third.ref(), new.ref()]


def test_an_archive_sealed_with_the_key_file_itself_is_rotated_but_that_key_not_retired(tmp_path, new):
    """The golden encrypted backup (made before envelopes) gains a wrapping by NEW; its own key keeps opening it."""
    shutil.copytree(V1 / "encrypted", tmp_path / "s" / "backups" / "golden-encrypted")
    store, old = LocalStore(tmp_path / "s"), FileKek.from_file(V1 / "test.key")

    rotation = keys.rotate(store, [], old, new, retire=True)

    assert rotation.results[0].action == "failed" and "sealed with key file" in rotation.results[0].detail
    assert "cannot be retired from it without re-encrypting" in rotation.results[0].detail
    for key in (old, new):
        assert catalog.verify(store, "golden-encrypted", Keyring((key,))).ok
    encryption = json.loads((tmp_path / "s" / "backups" / "golden-encrypted" / "manifest.json").read_text())
    assert [w["kek"] for w in encryption["encryption"]["wrappedKeys"]] == [old.ref(), new.ref()]


def test_plaintext_backups_are_skipped_and_the_same_key_twice_refused(store, old):
    back_up(cluster(), store, "plain")
    other = FileKek(old.key, "the same key under another name")
    with pytest.raises(ConfigError, match="--from and --to name the same key"):
        keys.rotate(store, [], old, other)
    assert keys.rotate(store, ["plain"], old, FileKek.from_file(key_file(store.root.parent, "x"))).results == [
        keys.Rotated("plain", "skipped", "not encrypted")
    ]
