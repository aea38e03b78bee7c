"""Envelope encryption: each backup's archive is sealed (crypto.py's framing) with a random data key of its own, and
the summary manifest holds that key wrapped by one or more key-encryption keys (KEKs): key files or KMS keys.

A wrapping authenticates the backup's name, its stored archive's SHA-256 and the data key's ID along with the key,
so a wrapping copied into another backup's manifest, or left beside a swapped archive, does not unwrap. Rotating a
KEK adds or removes wrappings in the summary manifest; the archive is never re-encrypted. Archives made before
envelopes were sealed with the key file itself; a key file whose ID is the archive's keyId still opens them.
docs/archive-format.md describes the fields."""

from __future__ import annotations

import base64
import binascii
import dataclasses
from pathlib import Path
from typing import Any, Protocol

import orjson

from statusvault.archive.crypto import ALGORITHM, Key
from statusvault.archive.signing import PublicKey
from statusvault.errors import ArchiveError, ConfigError

WRAPPINGS = "wrappedKeys"
RETIRED = "retiredKeys"
MAX_WRAPPINGS = 16
MAX_FIELD = 8192  # characters of one field of a wrapping (a KMS ciphertext blob is ~250 bytes)
FILE_ALGORITHM = "AES-256-GCM"  # a key file's wrapping: 12-byte nonce, then the sealed 32 bytes and the tag
AAD_PREFIX = b"statusvault data key\0"


class Kek(Protocol):
    """A key-encryption key: wraps and unwraps data keys, authenticating a context (a KMS encryption context)."""

    name: str  # as the user gave it (a path, a KMS key ID), for messages
    algorithm: str  # recorded with each wrapping

    def ref(self) -> str:
        """What a wrapping records to name this key: "file:<key ID>" or "kms:<key ARN>"."""
        ...

    def wrap(self, secret: bytes, context: dict[str, str]) -> bytes: ...

    def unwrap(self, wrapped: bytes, context: dict[str, str]) -> bytes | None:
        """The data key's bytes; None when this key did not wrap it, or the context differs."""
        ...


class FileKek:
    """A key file (crypto.Key) as a key-encryption key."""

    algorithm = FILE_ALGORITHM

    def __init__(self, key: Key, name: str = ""):
        self.key = key
        self.name = name or f"key file {key.id}"

    @classmethod
    def from_file(cls, path: str | Path) -> FileKek:
        return cls(Key.from_file(path), f"key file {path}")

    def ref(self) -> str:
        return f"file:{self.key.id}"

    def wrap(self, secret: bytes, context: dict[str, str]) -> bytes:
        return self.key.wrap(secret, aad(context))

    def unwrap(self, wrapped: bytes, context: dict[str, str]) -> bytes | None:
        return self.key.unwrap(wrapped, aad(context))


def aad(context: dict[str, str]) -> bytes:
    """What a key file's wrapping authenticates: the context as compact JSON with sorted keys, after a prefix."""
    return AAD_PREFIX + orjson.dumps(context, option=orjson.OPT_SORT_KEYS)


@dataclasses.dataclass(frozen=True)
class Keyring:
    """The keys a command was given: those that may open encrypted backups (--encryption-key-file, --kms-key-id),
    in the order given, and those that check signed ones (--verify-key-file, --verify-kms-key-id)."""

    keks: tuple[Kek, ...] = ()
    verifiers: tuple[PublicKey, ...] = ()

    def __bool__(self) -> bool:
        """Whether a key that opens encrypted backups was given (verification keys open nothing)."""
        return bool(self.keks)

    @classmethod
    def of(cls, keys: Keys) -> Keyring:
        if isinstance(keys, Keyring):
            return keys
        if keys is None:
            return cls()
        return cls((FileKek(keys),))

    def names(self) -> str:
        return ", ".join(k.name for k in self.keks)


Keys = Keyring | Key | None  # a bare Key: one key file


def context(name: str, archive_sha256: str, key_id: str) -> dict[str, str]:
    """What every wrapping of a backup's data key is bound to."""
    return {"statusvault:backup": name, "statusvault:archive-sha256": archive_sha256, "statusvault:data-key-id": key_id}


def wrapping(kek: Kek, data_key: Key, ctx: dict[str, str]) -> dict[str, str]:
    wrapped = base64.b64encode(kek.wrap(data_key.secret, ctx)).decode()
    return {"kek": kek.ref(), "algorithm": kek.algorithm, "wrapped": wrapped}


def sealed_field(data_key: Key, keyring: Keyring, ctx: dict[str, str]) -> dict[str, Any]:
    """The summary manifest's `encryption` of a backup sealed with `data_key`, wrapped by every key given."""
    return {"algorithm": ALGORITHM, "keyId": data_key.id, WRAPPINGS: [wrapping(k, data_key, ctx) for k in keyring.keks]}


def check_field(encryption: Any) -> None:
    """The `encryption` field's shape: ArchiveError naming what is wrong."""
    if (
        not isinstance(encryption, dict)
        or not isinstance(encryption.get("algorithm"), str)
        or not isinstance(encryption.get("keyId"), str)
    ):
        raise ArchiveError("manifest has a malformed encryption field")
    wrappings, retired = encryption.get(WRAPPINGS, []), encryption.get(RETIRED, [])
    if not isinstance(wrappings, list) or len(wrappings) > MAX_WRAPPINGS or not all(map(_wrapping_ok, wrappings)):
        raise ArchiveError(f"manifest has a malformed encryption.{WRAPPINGS} (at most {MAX_WRAPPINGS} wrappings)")
    if not isinstance(retired, list) or len(retired) > 256 or not all(_text_ok(r) for r in retired):
        raise ArchiveError(f"manifest has a malformed encryption.{RETIRED}")


def _wrapping_ok(w: Any) -> bool:
    return isinstance(w, dict) and all(_text_ok(w.get(f)) for f in ("kek", "algorithm", "wrapped"))


def _text_ok(value: Any) -> bool:
    return isinstance(value, str) and 0 < len(value) <= MAX_FIELD


def refs(encryption: dict[str, Any]) -> list[str]:
    """The keys that open the backup: its wrappings' KEKs, or the key file of an archive made before envelopes."""
    wrapped = [w["kek"] for w in encryption.get(WRAPPINGS) or []]
    return wrapped if WRAPPINGS in encryption else [f"file:{encryption['keyId']}"]


def open_data_key(encryption: dict[str, Any], keys: Keys, name: str, archive_sha256: str) -> Key:
    """The key that decrypts the backup's archive, from the keys given. ConfigError when none of them opens it (no
    key, other keys, a retired key); ArchiveError when one that should open it does not (a modified manifest)."""
    keyring, key_id = Keyring.of(keys), encryption["keyId"]
    known = ", ".join(repr(r[:120]) for r in refs(encryption)) or "none left"
    if not keyring:
        raise ConfigError(f"backup {name!r} is encrypted (key {known}): pass --encryption-key-file or --kms-key-id")
    direct = next((k.key for k in keyring.keks if isinstance(k, FileKek) and k.key.id == key_id), None)
    if direct is not None:
        return direct  # the key file sealed the archive itself (made before envelopes)
    ctx = context(name, archive_sha256, key_id)
    for kek in keyring.keks:
        wrapped = next((w for w in encryption.get(WRAPPINGS) or [] if w["kek"] == kek.ref()), None)
        if wrapped is not None:
            return _unwrapped(kek, wrapped, ctx, name)
    retired = [k.name for k in keyring.keks if k.ref() in (encryption.get(RETIRED) or [])]
    if retired:
        raise ConfigError(f"{retired[0]} was retired from backup {name!r}: use a key it is wrapped by ({known})")
    raise ConfigError(f"backup {name!r} was encrypted with key {known}, not with the given key ({keyring.names()})")


def _unwrapped(kek: Kek, wrapping: dict[str, Any], ctx: dict[str, str], name: str) -> Key:
    try:
        wrapped = base64.b64decode(wrapping["wrapped"], validate=True)
    except (binascii.Error, ValueError):
        wrapped = b""
    secret = kek.unwrap(wrapped, ctx) if wrapping["algorithm"] == kek.algorithm and wrapped else None
    if secret is None or len(secret) != 32 or Key(secret).id != ctx["statusvault:data-key-id"]:
        raise ArchiveError(
            f"the data key of backup {name!r} does not unwrap with {kek.name}: its manifest was modified, or its "
            "wrapped key belongs to another backup or archive"
        )
    return Key(secret)


def with_wrapping(encryption: dict[str, Any], data_key: Key, kek: Kek, name: str, sha: str) -> dict[str, Any]:
    """`encryption` with the data key also wrapped by `kek` (no longer retired), or as it was when it is already."""
    ref = kek.ref()
    wrappings = list(encryption.get(WRAPPINGS) or [])
    if any(w["kek"] == ref for w in wrappings):
        return encryption
    if len(wrappings) >= MAX_WRAPPINGS:
        raise ConfigError(f"backup {name!r} has {MAX_WRAPPINGS} wrapped keys already: retire one first")
    wrappings.append(wrapping(kek, data_key, context(name, sha, encryption["keyId"])))
    retired = [r for r in encryption.get(RETIRED) or [] if r != ref]
    return {**encryption, WRAPPINGS: wrappings, **({RETIRED: retired} if retired else {})}


def without_wrapping(encryption: dict[str, Any], kek: Kek, name: str) -> dict[str, Any]:
    """`encryption` with `kek`'s wrapping removed and the key recorded as retired (so a restore with it is told)."""
    ref = kek.ref()
    if ref == f"file:{encryption['keyId']}":
        raise ConfigError(
            f"backup {name!r} was sealed with {kek.name} itself (made before envelope encryption): that key opens it "
            "whatever its manifest says, and cannot be retired from it without re-encrypting the archive"
        )
    wrappings = [w for w in encryption.get(WRAPPINGS) or [] if w["kek"] != ref]
    if not wrappings:
        raise ConfigError(f"backup {name!r} would have no key left: {kek.name} is the only one it is wrapped by")
    retired = [*(r for r in encryption.get(RETIRED) or [] if r != ref), ref]
    return {**encryption, WRAPPINGS: wrappings, RETIRED: retired}
