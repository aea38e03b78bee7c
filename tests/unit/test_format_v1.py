"""Archive format v1 and the encryption format, frozen.

The checked-in golden backups (fixtures/golden/v1, made by tests/golden.py) read exactly as written; the
STREAM framing gives the checked-in known answers; readers depend on no JSON key order or layout; and
reading the manifest inflates the archive once."""

from __future__ import annotations

import gzip
import hashlib
import io
import json
import random
import shutil
from typing import Any

import orjson
import pytest
from cryptography.hazmat.primitives.ciphers.aead import AESGCM

from statusvault.archive import ArchiveReader, file_sha256
from statusvault.archive.crypto import CHUNK, MAGIC, Key, decrypt_file
from statusvault.restore.runner import open_backup
from statusvault.storage.local import LocalStore
from statusvault.store import catalog
from statusvault.store.backups import BackupStore
from tests.builders import kc_status
from tests.golden import GOLDEN, V1, expected_members, pattern, seal
from tests.hostile import END, entry, gz, manifest_bytes, sha

PLAIN = V1 / "plain"


def stored(tmp_path, folder: str) -> LocalStore:
    """The checked-in backup in a directory store, under the name it was made with."""
    dest = tmp_path / "backups" / f"golden-{folder}"
    shutil.copytree(V1 / folder, dest)
    return LocalStore(tmp_path)


def read_all(reader: ArchiveReader) -> list[tuple[str, Any]]:
    return [(path, orjson.loads(data)) for path, data in reader.objects()]


# --- the golden backups ---


def test_the_golden_backup_reads_exactly_as_written():
    reader = ArchiveReader(PLAIN / "archive.tar.gz")
    members = read_all(reader)
    assert members == expected_members()
    objects = dict(members)
    prod = objects["resources/kubernetesclusters.xyz.example.com/namespaces/golden-v1/prod.json"]
    assert prod["status"] == kc_status(1) and prod["metadata"]["uid"].endswith("000000000010")
    assert "managedFields" not in prod["metadata"]
    assert objects["resources/namespaces/cluster/golden-v1.json"]["status"] == {"phase": "Active"}
    assert objects["resources/clusterpools.infra.example.com/cluster/golden-pool.json"]["status"]["allocated"] == 5
    assert reader.verify().ok


def test_the_golden_object_files_are_compact_json_with_sorted_keys():
    for path, data in ArchiveReader(PLAIN / "archive.tar.gz").objects():
        assert data == orjson.dumps(orjson.loads(data), option=orjson.OPT_SORT_KEYS), path


def test_the_golden_manifests_agree():
    reader = ArchiveReader(PLAIN / "archive.tar.gz")
    summary = json.loads((PLAIN / "manifest.json").read_text())
    assert reader.head() == {k: v for k, v in summary.items() if k != "archive"}
    assert summary["archive"] == {
        "file": "archive.tar.gz",
        "size": (PLAIN / "archive.tar.gz").stat().st_size,
        "sha256": file_sha256(PLAIN / "archive.tar.gz"),
    }
    assert summary["formatVersion"] == "1.0" and summary["totals"]["objects"] == 6
    assert [p for p, _ in reader.file_entries()] == [p for p, _ in expected_members()]


def test_the_golden_backup_restores_and_verifies_from_a_store(tmp_path):
    store = stored(tmp_path, "plain")
    with open_backup(store, "golden-plain") as reader:
        assert read_all(reader) == expected_members()
    assert catalog.verify(store, "golden-plain").ok


def test_the_golden_encrypted_backup_reads_with_its_key(tmp_path):
    store = stored(tmp_path, "encrypted")
    key = Key.from_file(V1 / "test.key")
    with open_backup(store, "golden-encrypted", key) as reader:
        assert read_all(reader) == expected_members()
        assert reader.head()["encryption"] == {"algorithm": "AES-256-GCM-STREAM-64K", "keyId": key.id}
    assert catalog.verify(store, "golden-encrypted", key).ok
    unchecked = catalog.verify(store, "golden-encrypted")
    assert unchecked.ok and unchecked.objects_unchecked


# --- the encryption format's known answers ---

VECTORS = json.loads((GOLDEN / "crypto-vectors.json").read_text())


@pytest.mark.parametrize("vector", VECTORS["vectors"], ids=lambda v: f"{v['plaintext']['length']}B")
@pytest.mark.parametrize("pieces", [1, 7])
def test_encryption_gives_the_known_answers(vector, pieces, tmp_path):
    plain = pattern(vector["plaintext"]["length"])
    key, prefix = bytes.fromhex(VECTORS["keyHex"]), bytes.fromhex(VECTORS["noncePrefixHex"])
    sealed = seal(plain, key, prefix, pieces)  # how the writes are cut does not change the bytes
    assert len(sealed) == vector["ciphertextLength"]
    if "ciphertextHex" in vector:
        assert sealed.hex() == vector["ciphertextHex"]
    else:
        assert hashlib.sha256(sealed).hexdigest() == vector["ciphertextSha256"]
        assert sealed[:64].hex() == vector["headHex"]
    (tmp_path / "sealed").write_bytes(sealed)
    out = io.BytesIO()
    decrypt_file(tmp_path / "sealed", out, Key(key))
    assert out.getvalue() == plain


@pytest.mark.parametrize("vector", VECTORS["vectors"], ids=lambda v: f"{v['plaintext']['length']}B")
def test_the_framing_is_the_documented_stream_construction(vector):
    """An independent implementation of docs/archive-format.md gives the same bytes."""
    key, prefix = bytes.fromhex(VECTORS["keyHex"]), bytes.fromhex(VECTORS["noncePrefixHex"])
    plain = pattern(vector["plaintext"]["length"])
    pieces = [plain[i : i + CHUNK] for i in range(0, len(plain), CHUNK)] or [b""]  # empty only when all is
    aead = AESGCM(key)
    sealed = MAGIC + prefix
    for i, piece in enumerate(pieces):
        last = i == len(pieces) - 1
        sealed += aead.encrypt(prefix + i.to_bytes(4, "big"), piece, b"\x01" if last else b"\x00")
    assert hashlib.sha256(sealed).hexdigest() == hashlib.sha256(seal(plain, key, prefix)).hexdigest()
    if "tagsHex" in vector:
        body = sealed[len(MAGIC) + len(prefix) :]
        assert [body[i : i + CHUNK + 16][-16:].hex() for i in range(0, len(body), CHUNK + 16)] == vector["tagsHex"]


# --- no key order, no byte layout ---


def shuffled(value: Any, rng: random.Random) -> Any:
    """The same JSON value with every object's keys in another order."""
    if isinstance(value, dict):
        items = list(value.items())
        rng.shuffle(items)
        return {k: shuffled(v, rng) for k, v in items}
    if isinstance(value, list):
        return [shuffled(v, rng) for v in value]
    return value


def golden_parts() -> tuple[list[tuple[str, bytes]], dict[str, Any]]:
    reader = ArchiveReader(PLAIN / "archive.tar.gz")
    return list(reader.objects()), reader.head()


def archive_of(tmp_path, members: list[tuple[str, bytes]], manifest: bytes):
    path = tmp_path / "a.tar.gz"
    path.write_bytes(gz(b"".join(entry(p, d) for p, d in members) + entry("manifest.json", manifest) + END))
    return path


@pytest.mark.parametrize("seed", range(4))
@pytest.mark.parametrize("layout", ["files first", "files in the middle", "indented"])
def test_a_manifest_in_any_key_order_and_layout_reads_the_same(tmp_path, seed, layout):
    members, head = golden_parts()
    rng = random.Random(seed)
    files = {p: sha(d) for p, d in members}
    keys = list(shuffled(head, rng).items())
    at = {"files first": 0, "files in the middle": len(keys) // 2, "indented": rng.randrange(len(keys) + 1)}[layout]
    manifest = dict([*keys[:at], ("files", files), *keys[at:]])
    raw = json.dumps(manifest, indent=3 if layout == "indented" else None).encode()
    reader = ArchiveReader(archive_of(tmp_path, members, raw))
    assert reader.head() == head
    assert list(reader.file_entries()) == list(files.items())
    assert list(reader.objects()) == members
    assert reader.verify().ok


def test_object_files_in_any_key_order_read(tmp_path):
    members, head = golden_parts()
    rng = random.Random(7)
    reordered = [(p, json.dumps(shuffled(orjson.loads(d), rng), indent=1).encode()) for p, d in members]
    assert all(a != b for (_, a), (_, b) in zip(reordered, members, strict=True))
    head = {**head, "totals": {**head["totals"], "uncompressedBytes": sum(len(d) for _, d in reordered)}}
    reader = ArchiveReader(archive_of(tmp_path, reordered, manifest_bytes(head, [(p, sha(d)) for p, d in reordered])))
    assert [(p, orjson.loads(d)) for p, d in reader.objects()] == expected_members()
    assert reader.verify().ok


def test_a_summary_manifest_in_any_key_order_reads_the_same(tmp_path):
    store = stored(tmp_path, "plain")
    path = tmp_path / "backups" / "golden-plain" / "manifest.json"
    original = json.loads(path.read_text())
    path.write_text(json.dumps(shuffled(original, random.Random(3))))
    assert BackupStore(store).manifest("golden-plain") == original
    assert catalog.verify(store, "golden-plain").ok


# --- reading the manifest inflates the archive once ---


def test_reading_the_manifest_inflates_the_archive_once(tmp_path):
    members = [
        (f"resources/kubernetesclusters.xyz.example.com/namespaces/ns/k{i}.json", obj)
        for i in range(3000)
        for obj in [orjson.dumps({"kind": "KubernetesCluster", "metadata": {"name": f"k{i}", "namespace": "ns"}})]
    ]
    _, head = golden_parts()
    head["totals"]["uncompressedBytes"] = sum(len(d) for _, d in members)
    path = archive_of(tmp_path, members, manifest_bytes(head, [(p, sha(d)) for p, d in members]))
    stream = len(gzip.decompress(path.read_bytes()))  # the tar stream, end-of-archive blocks included
    reader = ArchiveReader(path)
    reader.head()
    reader.manifest()
    assert len(list(reader.file_entries())) == 3000
    assert reader.verify().ok
    assert stream - 20 * 512 <= reader.inflated <= stream, "the manifest costs one pass over the archive"
    assert len(list(reader.objects())) == 3000
    assert reader.inflated <= 2 * stream, "and a restore's read of the objects one more"
