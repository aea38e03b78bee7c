"""Client-side encryption end to end: the store holds ciphertext; only the key restores or fully verifies."""

from __future__ import annotations

import base64
import json
import os

import pytest

from statusvault.archive.crypto import is_encrypted
from statusvault.errors import ExitStatus
from tests.builders import cr, kc_status
from tests.integration.crs.test_restore import KC, delete_namespace

pytestmark = pytest.mark.version_neutral("encryption is the client's and the store's: the server sees plain objects")


@pytest.fixture
def keys(tmp_path):
    out = {}
    for name in ("right", "wrong"):
        path = tmp_path / f"{name}.key"
        path.write_text(base64.b64encode(os.urandom(32)).decode())
        out[name] = str(path)
    return out


def test_encrypted_backup_restores_only_with_its_key(run, kube, crds, make, namespace, keys):
    make(cr(KC, "KubernetesCluster", "prod", status=kc_status(4)), namespace)
    assert run("backup", "sealed", "-n", namespace, "--encryption-key-file", keys["right"]).code == 0
    archive = run.storage / "backups" / "sealed" / "archive.tar.gz"
    assert is_encrypted(archive)
    assert json.loads((run.storage / "backups" / "sealed" / "manifest.json").read_text())["encryption"]["keyId"]

    unchecked = run("verify", "sealed", "-o", "json")
    assert unchecked.code == 0 and json.loads(unchecked.out)["objectsChecked"] is False
    checked = run("verify", "sealed", "--encryption-key-file", keys["right"], "-o", "json")
    assert checked.code == 0 and json.loads(checked.out)["filesChecked"] >= 2

    delete_namespace(kube, namespace)
    no_key = run("restore", "sealed")
    assert no_key.code == ExitStatus.USAGE
    assert "is encrypted (key " in no_key.err and "pass --encryption-key-file" in no_key.err
    wrong = run("restore", "sealed", "--encryption-key-file", keys["wrong"])
    assert wrong.code == ExitStatus.USAGE and "was encrypted with key" in wrong.err
    assert kube.get(crds.resolve("namespaces"), None, namespace) is None, "refused before any write"

    ok = run("restore", "sealed", "--encryption-key-file", keys["right"])
    assert ok.code == 0, ok.err
    assert kube.get(crds.resolve("kc"), namespace, "prod")["status"] == kc_status(4)


def test_tampered_ciphertext_is_refused_even_with_a_matching_manifest(run, make, namespace, keys):
    """Someone who can write the bucket rewrites a byte and the manifest's checksum: the key still catches it."""
    import hashlib

    make(cr(KC, "KubernetesCluster", "prod", status=kc_status(4)), namespace)
    assert run("backup", "sealed", "-n", namespace, "--encryption-key-file", keys["right"]).code == 0
    folder = run.storage / "backups" / "sealed"
    data = bytearray((folder / "archive.tar.gz").read_bytes())
    data[100] ^= 1
    (folder / "archive.tar.gz").write_bytes(bytes(data))
    manifest = json.loads((folder / "manifest.json").read_text())
    manifest["archive"]["sha256"] = hashlib.sha256(data).hexdigest()
    (folder / "manifest.json").write_text(json.dumps(manifest))

    result = run("restore", "sealed", "--encryption-key-file", keys["right"])
    assert result.code == ExitStatus.ERROR
    assert result.err.strip() == (  # the wrapped data key is bound to the archive's SHA-256 the backup wrote
        f"error: the data key of backup 'sealed' does not unwrap with key file {keys['right']}: its manifest was "
        "modified, or its wrapped key belongs to another backup or archive"
    )


def test_a_key_refuses_plaintext_and_archives_of_other_backups(run, make, namespace, keys):
    """With a key, a swapped-in plaintext archive or another encrypted backup's archive is refused."""
    import shutil

    make(cr(KC, "KubernetesCluster", "prod", status=kc_status(4)), namespace)
    assert run("backup", "plain", "-n", namespace).code == 0
    refused = run("restore", "plain", "--encryption-key-file", keys["right"])
    assert refused.code == ExitStatus.USAGE and "is not encrypted, but an encryption key was given" in refused.err

    for name in ("a", "b"):
        assert run("backup", name, "-n", namespace, "--encryption-key-file", keys["right"]).code == 0
    folder = run.storage / "backups"
    shutil.copyfile(folder / "a" / "archive.tar.gz", folder / "b" / "archive.tar.gz")
    manifest = json.loads((folder / "b" / "manifest.json").read_text())
    manifest["archive"] = json.loads((folder / "a" / "manifest.json").read_text())["archive"]
    (folder / "b" / "manifest.json").write_text(json.dumps(manifest))
    swapped = run("restore", "b", "--encryption-key-file", keys["right"])
    assert swapped.code == ExitStatus.ERROR
    assert swapped.err.startswith("error: the data key of backup 'b' does not unwrap with key file ")
    manifest["encryption"] = json.loads((folder / "a" / "manifest.json").read_text())["encryption"]
    (folder / "b" / "manifest.json").write_text(json.dumps(manifest))  # a's wrapped key too: bound to a's name
    swapped = run("restore", "b", "--encryption-key-file", keys["right"])
    assert swapped.code == ExitStatus.ERROR and "does not unwrap" in swapped.err
