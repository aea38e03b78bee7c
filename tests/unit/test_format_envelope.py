"""Format 1.1, frozen: fixtures/golden/v1/envelope (tests/golden.py) holds a backup whose data key its summary
manifest holds wrapped by the test key. It reads exactly as the plain golden backup does, with that key only,
and the fields docs/archive-format.md describes are where it says."""

from __future__ import annotations

import base64
import hashlib
import json
import shutil

import orjson
import pytest

from statusvault.archive.crypto import Key
from statusvault.archive.envelope import AAD_PREFIX, FileKek, Keyring
from statusvault.errors import ConfigError
from statusvault.restore.runner import open_backup
from statusvault.storage.local import LocalStore
from statusvault.store import catalog
from tests.golden import DATA_KEY, V1, expected_members

ENVELOPE = V1 / "envelope"


@pytest.fixture
def store(tmp_path) -> LocalStore:
    shutil.copytree(ENVELOPE, tmp_path / "backups" / "golden-envelope")
    return LocalStore(tmp_path)


def test_the_golden_envelope_backup_reads_with_the_key_that_wraps_its_data_key(store):
    key = FileKek.from_file(V1 / "test.key")
    with open_backup(store, "golden-envelope", Keyring((key,))) as reader:
        assert [(p, orjson.loads(d)) for p, d in reader.objects()] == expected_members()
        assert reader.head()["formatVersion"] == "1.1"
    assert catalog.verify(store, "golden-envelope", Keyring((key,))).ok
    with pytest.raises(ConfigError, match="was encrypted with key 'file:"):
        catalog.verify(store, "golden-envelope", Key(b"\x07" * 32))


def test_the_wrapping_is_the_documented_aes_gcm_of_the_data_key_over_the_context():
    from cryptography.hazmat.primitives.ciphers.aead import AESGCM

    summary = json.loads((ENVELOPE / "manifest.json").read_text())
    (wrapping,) = summary["encryption"]["wrappedKeys"]
    kek = Key.from_file(V1 / "test.key")
    assert (wrapping["kek"], wrapping["algorithm"]) == (f"file:{kek.id}", "AES-256-GCM")
    context = {
        "statusvault:archive-sha256": summary["archive"]["sha256"],
        "statusvault:backup": "golden-envelope",
        "statusvault:data-key-id": summary["encryption"]["keyId"],
    }
    blob = base64.b64decode(wrapping["wrapped"])
    aad = AAD_PREFIX + json.dumps(context, separators=(",", ":"), sort_keys=True).encode()
    secret = AESGCM(kek.secret).decrypt(blob[:12], blob[12:], aad)
    assert secret == DATA_KEY and Key(secret).id == summary["encryption"]["keyId"]
    assert hashlib.sha256(b"statusvault key id\0" + secret).hexdigest()[:16] == summary["encryption"]["keyId"]
