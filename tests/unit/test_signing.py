"""Signed backups (archive/signing.py): what a signature covers, and every way a document that is not the signer's
is refused. The real-store attacks are in tests/integration/test_signing.py."""

from __future__ import annotations

import copy
import os
import stat

import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec

from statusvault.archive import signing
from statusvault.archive.signing import FileSigner, PublicKey
from statusvault.errors import ArchiveError, ConfigError

MANIFEST = {
    "formatVersion": "1.1",
    "name": "b1",
    "createdAt": "2026-11-27T10:00:00Z",
    "resources": {"kubernetesclusters.xyz.example.com": {"count": 3, "withStatus": 3}},
    "totals": {"objects": 3, "withStatus": 3},
    "archive": {"file": "archive.tar.gz", "size": 1234, "sha256": "a" * 64},
    "encryption": {"algorithm": "AES-256-GCM-STREAM-64K", "keyId": "k1", "wrappedKeys": [{"kek": "file:x"}]},
}


@pytest.fixture
def keypair(tmp_path) -> tuple[FileSigner, PublicKey]:
    pub, _ = signing.generate(tmp_path / "signing.pem")
    return FileSigner.from_file(tmp_path / "signing.pem"), PublicKey.from_file(pub)


def signed(signer: FileSigner, document=MANIFEST) -> dict:
    doc = copy.deepcopy(document)
    doc[signing.FIELD] = signing.sign(doc, signing.BACKUP, signer)
    return doc


def test_a_signed_manifest_verifies_and_names_its_key(keypair):
    signer, public = keypair
    assert (
        signing.authenticate(signed(signer), signing.BACKUP, "backup 'b1'", (public,)) == public.id == signer.key_id()
    )


@pytest.mark.parametrize(
    "change",
    [
        lambda m: m["archive"].update(sha256="b" * 64),  # another archive
        lambda m: m["archive"].update(size=1),
        lambda m: m.update(name="b2"),  # the same backup stored under another name
        lambda m: m.update(formatVersion="1.0"),  # a downgrade
        lambda m: m["totals"].update(objects=4),
        lambda m: m["encryption"].update(keyId="k2"),
        lambda m: m.pop("encryption"),  # a plaintext archive put in an encrypted one's stead
        lambda m: m.update(extra={"a": 1}),
    ],
    ids=["archive-sha", "archive-size", "name", "format", "totals", "data-key", "encryption-dropped", "added-field"],
)
def test_any_change_after_signing_is_refused(keypair, change):
    signer, public = keypair
    doc = signed(signer)
    change(doc)
    with pytest.raises(ArchiveError, match=rf"signature of backup 'b1' does not verify with key {public.id}"):
        signing.authenticate(doc, signing.BACKUP, "backup 'b1'", (public,))


def test_rewrapping_the_data_key_keeps_the_signature(keypair):
    """Key rotation rewrites the encryption field's wrappings; each wrapping is bound to the archive on its own."""
    signer, public = keypair
    doc = signed(signer)
    doc["encryption"]["wrappedKeys"].append({"kek": "kms:arn"})
    doc["encryption"]["retiredKeys"] = ["file:x"]
    assert signing.authenticate(doc, signing.BACKUP, "backup 'b1'", (public,)) == public.id


def test_a_signature_is_bound_to_its_kind(keypair):
    """A backup manifest's signature does not pass for a watch segment's (the statement names its kind)."""
    signer, public = keypair
    with pytest.raises(ArchiveError, match="does not verify"):
        signing.authenticate(signed(signer), signing.SEGMENT, "backup 'b1'", (public,))


def test_unsigned_is_refused_when_a_key_is_given_unless_sealed(keypair):
    _, public = keypair
    with pytest.raises(ArchiveError, match=r"backup 'b1' is not signed, and a verification key was given"):
        signing.authenticate(MANIFEST, signing.BACKUP, "backup 'b1'", (public,))
    assert signing.authenticate(MANIFEST, signing.BACKUP, "backup 'b1'", (public,), sealed=True) is None
    assert signing.authenticate(MANIFEST, signing.BACKUP, "backup 'b1'", ()) is None, "no key: nothing checked"


def test_another_signers_backup_is_refused(keypair, tmp_path):
    _, public = keypair
    signing.generate(tmp_path / "other.pem")
    other = FileSigner.from_file(tmp_path / "other.pem")
    with pytest.raises(ArchiveError, match=rf"signed by key '{other.key_id()}', not by a verification key given"):
        signing.authenticate(signed(other), signing.BACKUP, "backup 'b1'", (public,))


def test_a_forged_signature_naming_the_right_key_is_refused(keypair, tmp_path):
    signer, public = keypair
    signing.generate(tmp_path / "mallory.pem")
    forged = signed(FileSigner.from_file(tmp_path / "mallory.pem"))
    forged[signing.FIELD]["keyId"] = public.id
    with pytest.raises(ArchiveError, match="does not verify"):
        signing.authenticate(forged, signing.BACKUP, "backup 'b1'", (public,))


@pytest.mark.parametrize(
    "field",
    [{"algorithm": "none", "keyId": "x", "value": "AA=="}, {"algorithm": "Ed25519", "keyId": "x"}, "sig",
     {"algorithm": "Ed25519", "keyId": "x", "value": "A" * 600}],
    ids=["algorithm", "no-value", "not-an-object", "too-long"],
)  # fmt: skip
def test_a_malformed_signature_field_is_refused(keypair, field):
    _, public = keypair
    with pytest.raises(ArchiveError, match="malformed signature field"):
        signing.authenticate({**MANIFEST, "signature": field}, signing.BACKUP, "backup 'b1'", (public,))


def test_an_ecdsa_p256_key_file_signs_as_a_kms_key_does(tmp_path):
    key = ec.generate_private_key(ec.SECP256R1())
    path = tmp_path / "p256.pem"
    path.write_bytes(key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                       serialization.NoEncryption()))  # fmt: skip
    signer = FileSigner.from_file(path)
    public = PublicKey.from_file(path)  # a private key file: its public half verifies
    assert signer.algorithm == public.algorithm == signing.ECDSA_SHA_256
    assert signing.authenticate(signed(signer), signing.BACKUP, "backup 'b1'", (public,)) == public.id


def test_a_generated_key_is_private_and_never_overwritten(tmp_path):
    pub, public = signing.generate(tmp_path / "k.pem")
    assert stat.S_IMODE(os.stat(tmp_path / "k.pem").st_mode) == 0o600
    assert PublicKey.from_file(pub) == public
    with pytest.raises(ConfigError, match="exists: refusing to overwrite a key"):
        signing.generate(tmp_path / "k.pem")


@pytest.mark.parametrize(
    "content", [b"", b"not a key", b"-----BEGIN PUBLIC KEY-----\nAAAA\n-----END PUBLIC KEY-----\n"]
)
def test_a_file_that_is_no_key_is_one_line(tmp_path, content):
    path = tmp_path / "bad.pem"
    path.write_bytes(content)
    with pytest.raises(ConfigError, match="does not hold a PEM public key"):
        PublicKey.from_file(path)
    with pytest.raises(ConfigError, match="does not hold a PEM private key"):
        FileSigner.from_file(path)
