"""Envelope encryption (archive/envelope.py): each backup its own data key, wrapped by every key given and bound
to the backup; the key that unwraps is picked from several; a wrong, missing or retired key is refused before the
archive is read, a modified wrapping is caught."""

from __future__ import annotations

import base64
import json

import pytest

from statusvault.archive.crypto import Key, is_encrypted
from statusvault.archive.envelope import FileKek, Keyring, context, open_data_key, sealed_field
from statusvault.errors import ArchiveError, ConfigError
from statusvault.storage.local import LocalStore
from statusvault.store import catalog
from statusvault.store.backups import BackupStore
from tests.sealed import back_up, cluster, key_file, names_in

NAMES = ["kc-0", "kc-1", "kc-2"]


@pytest.fixture
def store(tmp_path) -> LocalStore:
    return LocalStore(tmp_path / "store")


@pytest.fixture
def files(tmp_path) -> dict[str, FileKek]:
    return {n: FileKek.from_file(key_file(tmp_path, n)) for n in ("a", "b", "c")}


def manifest_of(store: LocalStore, name: str) -> dict:
    return json.loads((store.root / "backups" / name / "manifest.json").read_text())


def write_manifest(store: LocalStore, name: str, manifest: dict) -> None:
    (store.root / "backups" / name / "manifest.json").write_text(json.dumps(manifest))


def test_each_backup_gets_a_data_key_of_its_own_wrapped_by_every_key_given(store, files):
    kube = cluster()
    for name in ("one", "two"):
        back_up(kube, store, name, key=Keyring((files["a"], files["b"])))
    one, two = manifest_of(store, "one")["encryption"], manifest_of(store, "two")["encryption"]
    assert one["keyId"] != two["keyId"], "a data key per backup"
    assert {one["keyId"], two["keyId"]}.isdisjoint({k.key.id for k in files.values()}), "never a key file itself"
    assert [w["kek"] for w in one["wrappedKeys"]] == [files["a"].ref(), files["b"].ref()]
    assert all(w["algorithm"] == "AES-256-GCM" for w in one["wrappedKeys"])
    assert is_encrypted(store.root / "backups" / "one" / "archive.tar.gz")
    for k in ("a", "b"):
        assert names_in(store, "one", Keyring((files[k],))) == NAMES
    report = catalog.verify(store, "one", Keyring((files["b"],)))
    assert report.ok and report.files_checked == 4 and not report.objects_unchecked


def test_the_archive_keeps_the_data_key_id_but_no_wrapping(store, files):
    from statusvault.restore.runner import open_backup

    back_up(cluster(), store, "b", key=Keyring((files["a"],)))
    with open_backup(store, "b", Keyring((files["a"],))) as reader:
        inner = reader.head()["encryption"]
    assert inner == {"algorithm": "AES-256-GCM-STREAM-64K", "keyId": manifest_of(store, "b")["encryption"]["keyId"]}
    assert reader.head()["formatVersion"] == manifest_of(store, "b")["formatVersion"] == "1.2"


def test_the_key_that_unwraps_is_picked_from_several(store, files):
    back_up(cluster(), store, "b", key=Keyring((files["b"],)))
    assert names_in(store, "b", Keyring((files["a"], files["c"], files["b"]))) == NAMES


@pytest.mark.parametrize(
    ("given", "message"),
    [
        (None, r"^backup 'b' is encrypted \(key 'file:\w{16}'\): pass --encryption-key-file or --kms-key-id$"),
        (("c",), r"^backup 'b' was encrypted with key 'file:\w{16}', not with the given key \(key file .*c\.key\)$"),
    ],
    ids=["missing", "wrong"],
)
def test_a_missing_or_wrong_key_is_one_line_before_the_archive_is_read(store, files, given, message, monkeypatch):
    back_up(cluster(), store, "b", key=Keyring((files["a"],)))
    monkeypatch.setattr(LocalStore, "local_file", lambda *a: pytest.fail("the archive was read"))
    keys = Keyring(tuple(files[k] for k in given)) if given else None
    with pytest.raises(ConfigError, match=message):
        names_in(store, "b", keys)
    with pytest.raises(ConfigError, match=message):
        catalog.verify(store, "b", keys) if keys else names_in(store, "b")


def test_a_wrapping_moved_to_another_backup_or_changed_does_not_unwrap(store, files):
    kube = cluster()
    for name in ("x", "y"):
        back_up(kube, store, name, key=Keyring((files["a"],)))
    x, y = manifest_of(store, "x"), manifest_of(store, "y")
    write_manifest(store, "y", {**y, "encryption": x["encryption"]})  # x's data key, stored as y's
    with pytest.raises(ArchiveError, match="does not unwrap with key file .*a.key: its manifest was modified"):
        names_in(store, "y", Keyring((files["a"],)))
    report = catalog.verify(store, "y", Keyring((files["a"],)))
    assert not report.ok and "does not unwrap" in report.error

    wrapped = bytearray(base64.b64decode(y["encryption"]["wrappedKeys"][0]["wrapped"]))
    wrapped[20] ^= 1
    y["encryption"]["wrappedKeys"][0]["wrapped"] = base64.b64encode(bytes(wrapped)).decode()
    write_manifest(store, "y", y)
    with pytest.raises(ArchiveError, match="does not unwrap"):
        names_in(store, "y", Keyring((files["a"],)))


def test_a_wrapping_is_bound_to_the_archive_bytes_the_manifest_names():
    data_key, kek = Key.generate(), FileKek(Key.generate())
    field = sealed_field(data_key, Keyring((kek,)), context("b", "aa" * 32, data_key.id))
    assert open_data_key(field, kek.key, "b", "aa" * 32).id == data_key.id  # a bare Key is one key file
    with pytest.raises(ArchiveError, match="does not unwrap"):
        open_data_key(field, kek.key, "b", "bb" * 32)


def test_a_retired_key_is_named_as_retired():
    data_key, old, new = Key.generate(), FileKek(Key.generate(), "old.key"), FileKek(Key.generate(), "new.key")
    field = sealed_field(data_key, Keyring((new,)), context("b", "aa" * 32, data_key.id))
    field["retiredKeys"] = [old.ref()]
    with pytest.raises(ConfigError, match=r"^old.key was retired from backup 'b': use a key it is wrapped by"):
        open_data_key(field, Keyring((old,)), "b", "aa" * 32)


def sealed_with(**fields) -> dict:
    return {"algorithm": "AES-256-GCM-STREAM-64K", "keyId": "k", **fields}


WRAPPED = {"kek": "file:x", "algorithm": "AES-256-GCM", "wrapped": "w"}


@pytest.mark.parametrize(
    "encryption",
    [
        sealed_with(wrappedKeys={}),
        sealed_with(wrappedKeys=[{"kek": "file:x"}]),
        sealed_with(wrappedKeys=[{**WRAPPED, "kek": ""}]),
        sealed_with(retiredKeys=[3]),
        sealed_with(wrappedKeys=[WRAPPED] * 17),
    ],
)
def test_a_malformed_envelope_is_refused_when_the_manifest_is_read(store, files, encryption):
    back_up(cluster(), store, "b", key=Keyring((files["a"],)))
    write_manifest(store, "b", {**manifest_of(store, "b"), "encryption": encryption})
    with pytest.raises(ArchiveError, match="malformed encryption"):
        BackupStore(store).manifest("b")


def test_a_plaintext_backup_met_with_keys_is_refused(store, files):
    back_up(cluster(), store, "b")
    with pytest.raises(ConfigError, match="is not encrypted, but an encryption key was given"):
        names_in(store, "b", Keyring((files["a"],)))
    assert names_in(store, "b", Keyring()) == NAMES, "an empty keyring is no key"
