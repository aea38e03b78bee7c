"""Signed backups: a backup's summary manifest (and each watch segment's manifest) carries a signature over what
decides its content, so a restore given a verification key takes only what the holder of the signing key wrote.

What is signed is a statement: a fixed prefix, the kind of document ("backup", "watch-segment"), and the SHA-256 of
the document as canonical JSON (sorted keys, compact), the `signature` field left out and the `encryption` field
reduced to its algorithm and key ID (rotating the keys that wrap a data key rewrites the rest, and each wrapping is
bound to the archive on its own). A backup's manifest names its name and its archive's size and SHA-256, and the
archive's embedded manifest lists every file's SHA-256, so the signature covers every byte restored; a segment's
manifest names its watch, base, sequence number, predecessor and SHA-256, so it covers its place in the chain.

Keys: an Ed25519 private key in a PEM file (`statusvault keys generate-signing-key`), or an asymmetric AWS KMS key
(ECC_NIST_P256, ECDSA_SHA_256) that signs without its private key leaving KMS. A verifier holds public keys only:
a PEM public key (the .pub file beside a generated key, or a KMS key's exported public key) or a KMS key ID, whose
public key is fetched once. docs/security.md says who holds which."""

from __future__ import annotations

import base64
import binascii
import dataclasses
import hashlib
import os
from pathlib import Path
from typing import Any, Protocol

import orjson

from statusvault.errors import ArchiveError, ConfigError

FIELD = "signature"
PREFIX = b"statusvault signature v1\0"
ED25519 = "Ed25519"
ECDSA_SHA_256 = "ECDSA_SHA_256"
ALGORITHMS = (ED25519, ECDSA_SHA_256)
BACKUP, SEGMENT = "backup", "watch-segment"
MAX_SIGNATURE = 512  # characters of base64: an ECDSA P-256 DER signature is at most 72 bytes


class Signer(Protocol):
    """A private key that signs statements (a key file, or a KMS key)."""

    name: str  # as the user gave it, for messages
    algorithm: str

    def key_id(self) -> str: ...

    def sign(self, message: bytes) -> bytes: ...


def key_id_of(public_key: Any) -> str:
    """A public key's ID: the first 16 hex digits of the SHA-256 of its DER SubjectPublicKeyInfo (what a signature
    records, and what `describe` shows)."""
    from cryptography.hazmat.primitives import serialization

    der = public_key.public_bytes(serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo)
    return hashlib.sha256(b"statusvault signing key\0" + der).hexdigest()[:16]


def _algorithm_of(public_key: Any, name: str) -> str:
    from cryptography.hazmat.primitives.asymmetric import ec, ed25519

    if isinstance(public_key, ed25519.Ed25519PublicKey):
        return ED25519
    if isinstance(public_key, ec.EllipticCurvePublicKey) and isinstance(public_key.curve, ec.SECP256R1):
        return ECDSA_SHA_256
    raise ConfigError(f"{name} is not an Ed25519 or ECDSA P-256 key (the kinds statusvault signs with)")


class FileSigner:
    """A private key in a PEM file: Ed25519, or ECDSA P-256."""

    def __init__(self, private_key: Any, name: str):
        self._key = private_key
        self.name = name
        self.algorithm = _algorithm_of(private_key.public_key(), name)
        self._id = key_id_of(private_key.public_key())

    @classmethod
    def from_file(cls, path: str | Path) -> FileSigner:
        from cryptography.hazmat.primitives import serialization

        data = _read(path, "signing key")
        try:
            key = serialization.load_pem_private_key(data, password=None)
        except (ValueError, TypeError):
            raise ConfigError(f"{path} does not hold a PEM private key (unencrypted PKCS#8)") from None
        return cls(key, f"signing key {path}")

    def key_id(self) -> str:
        return self._id

    def sign(self, message: bytes) -> bytes:
        if self.algorithm == ED25519:
            return bytes(self._key.sign(message))
        from cryptography.hazmat.primitives import hashes
        from cryptography.hazmat.primitives.asymmetric import ec

        return bytes(self._key.sign(message, ec.ECDSA(hashes.SHA256())))


def file_key_name(path: str | Path) -> str:
    """The name a verification key read from a file carries (and by which the controller finds one of its own)."""
    return f"verification key {path}"


@dataclasses.dataclass(frozen=True)
class PublicKey:
    """A key that checks signatures."""

    id: str
    algorithm: str
    key: Any = dataclasses.field(repr=False, compare=False)
    name: str = ""

    @classmethod
    def of(cls, public_key: Any, name: str) -> PublicKey:
        return cls(key_id_of(public_key), _algorithm_of(public_key, name), public_key, name)

    @classmethod
    def from_file(cls, path: str | Path) -> PublicKey:
        """A PEM public key, or a PEM private key (its public half is used)."""
        from cryptography.hazmat.primitives import serialization

        data = _read(path, "verification key")
        for load in (serialization.load_pem_public_key, _private_half):
            try:
                return cls.of(load(data), file_key_name(path))
            except (ValueError, TypeError):
                continue
        raise ConfigError(f"{path} does not hold a PEM public key") from None

    @classmethod
    def from_der(cls, der: bytes, name: str) -> PublicKey:
        from cryptography.hazmat.primitives import serialization

        try:
            return cls.of(serialization.load_der_public_key(der), name)
        except (ValueError, TypeError):
            raise ConfigError(f"{name} has no usable public key") from None

    def verify(self, message: bytes, signature: bytes) -> bool:
        from cryptography.exceptions import InvalidSignature

        try:
            if self.algorithm == ED25519:
                self.key.verify(signature, message)
            else:
                from cryptography.hazmat.primitives import hashes
                from cryptography.hazmat.primitives.asymmetric import ec

                self.key.verify(signature, message, ec.ECDSA(hashes.SHA256()))
        except (InvalidSignature, ValueError):
            return False
        return True


def _private_half(data: bytes) -> Any:
    from cryptography.hazmat.primitives import serialization

    return serialization.load_pem_private_key(data, password=None).public_key()


def _read(path: str | Path, what: str) -> bytes:
    try:
        data = Path(path).read_bytes()
    except OSError as e:
        raise ConfigError(f"cannot read the {what} file: {e}") from None
    if len(data) > 64 << 10:
        raise ConfigError(f"{path} is too large to be a {what}")
    return data


def generate(path: str | Path) -> tuple[Path, PublicKey]:
    """A new Ed25519 key: the private key to `path` (PEM, mode 0600, refused if it exists) and the public key to
    `path`.pub; returns the public key's path and the key."""
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric import ed25519

    key = ed25519.Ed25519PrivateKey.generate()
    private = key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )
    public = key.public_key().public_bytes(serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo)
    path, pub = Path(path), Path(f"{path}.pub")
    for p in (path, pub):
        if p.exists():
            raise ConfigError(f"{p} exists: refusing to overwrite a key")
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "wb") as f:
            f.write(private)
        pub.write_bytes(public)
    except OSError as e:
        raise ConfigError(f"cannot write the key: {e}") from None
    return pub, PublicKey.of(key.public_key(), file_key_name(pub))


def statement(document: dict[str, Any], kind: str) -> bytes:
    """What a signature over `document` signs (see the module's docstring)."""
    body = {k: v for k, v in document.items() if k != FIELD}
    encryption = body.get("encryption")
    if isinstance(encryption, dict):
        body["encryption"] = {k: encryption.get(k) for k in ("algorithm", "keyId")}
    digest = hashlib.sha256(orjson.dumps(body, option=orjson.OPT_SORT_KEYS)).digest()
    return PREFIX + kind.encode() + b"\0" + digest


def sign(document: dict[str, Any], kind: str, signer: Signer) -> dict[str, str]:
    """The `signature` field of `document`."""
    value = signer.sign(statement(document, kind))
    return {"algorithm": signer.algorithm, "keyId": signer.key_id(), "value": base64.b64encode(value).decode()}


def check_field(signature: Any, what: str) -> None:
    """The `signature` field's shape: ArchiveError naming what is wrong."""
    ok = (
        isinstance(signature, dict)
        and signature.get("algorithm") in ALGORITHMS
        and isinstance(signature.get("keyId"), str)
        and 0 < len(signature["keyId"]) <= 64
        and isinstance(signature.get("value"), str)
        and 0 < len(signature["value"]) <= MAX_SIGNATURE
    )
    if not ok:
        raise ArchiveError(f"{what} has a malformed signature field")


def describe(document: dict[str, Any]) -> dict[str, str] | None:
    """What `describe` shows of a signature: its algorithm and key ID."""
    signature = document.get(FIELD)
    return {"algorithm": signature["algorithm"], "keyId": signature["keyId"]} if isinstance(signature, dict) else None


def authenticate(
    document: dict[str, Any], kind: str, what: str, verifiers: tuple[PublicKey, ...], sealed: bool = False
) -> str | None:
    """Check `document`'s signature against the verification keys given; returns the ID of the key that signed it
    (None: nothing was checked, no key was given). With keys given, a document that is not signed is refused
    unless `sealed` (an encrypted backup opened by a key given is authenticated by that key), and one signed by
    another key, or whose signature does not verify, is refused: ArchiveError, before anything is written."""
    if not verifiers:
        return None
    signature = document.get(FIELD)
    given = ", ".join(v.id for v in verifiers)
    if signature is None:
        if sealed:
            return None
        raise ArchiveError(
            f"{what} is not signed, and a verification key was given ({given}): refusing it (anyone who can write "
            "the store could have written it)"
        )
    check_field(signature, what)
    verifier = next((v for v in verifiers if v.id == signature["keyId"]), None)
    if verifier is None:
        raise ArchiveError(
            f"{what} is signed by key {signature['keyId'][:64]!r}, not by a verification key given ({given}): "
            "refusing it"
        )
    try:
        value = base64.b64decode(signature["value"], validate=True)
    except (binascii.Error, ValueError):
        value = b""
    if signature["algorithm"] != verifier.algorithm or not verifier.verify(statement(document, kind), value):
        raise ArchiveError(
            f"the signature of {what} does not verify with key {verifier.id}: it was changed after it was signed"
        )
    return verifier.id
