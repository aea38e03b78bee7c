"""Client-side encryption of archives: AES-256-GCM over 64 KiB chunks (the STREAM construction).

Layout: MAGIC, an 8-byte random nonce prefix, then chunks of ciphertext+tag. Chunk i is sealed with nonce
prefix || i (4 bytes, big-endian) and associated data b"\\x01" for the last chunk, b"\\x00" for the others (after
a context, when one binds the ciphertext to its place: a watch segment's), so reordering, dropping, truncating or
appending chunks fails authentication. Only the key holder can read or
undetectably change a backup; the store sees ciphertext (whose SHA-256 the manifest still records).
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import os
from pathlib import Path
from typing import IO

from statusvault.errors import ArchiveError, ConfigError
from statusvault.storage.base import Writer

MAGIC = b"SVENC1\n"
ALGORITHM = "AES-256-GCM-STREAM-64K"
CHUNK = 64 * 1024
TAG = 16
PREFIX = 8
MORE, LAST = b"\x00", b"\x01"


class Key:
    def __init__(self, secret: bytes):
        from cryptography.hazmat.primitives.ciphers.aead import AESGCM  # imported only when a key is used

        if len(secret) != 32:
            raise ConfigError("an encryption key is 32 bytes (base64 in a file: `head -c 32 /dev/urandom | base64`)")
        self._aead = AESGCM(secret)
        self._secret = secret
        self.id = hashlib.sha256(b"statusvault key id\0" + secret).hexdigest()[:16]  # names the key, reveals nothing

    @classmethod
    def generate(cls) -> Key:
        """A random key: each envelope-encrypted backup's own data key (archive/envelope.py)."""
        return cls(os.urandom(32))

    @classmethod
    def from_file(cls, path: str | Path) -> Key:
        """A file holding the key in base64 (44 characters) or as 32 raw bytes."""
        try:
            raw = Path(path).read_bytes()
        except OSError as e:
            raise ConfigError(f"cannot read the encryption key file: {e}") from None
        if len(raw) == 32:
            return cls(raw)
        try:
            return cls(base64.b64decode(raw.strip(), validate=True))
        except (binascii.Error, ValueError):
            raise ConfigError(f"{path} does not hold a base64 32-byte key") from None

    def seal(self, nonce: bytes, data: bytes, last: bool, context: bytes = b"") -> bytes:
        return self._aead.encrypt(nonce, data, context + (LAST if last else MORE))

    def open(self, nonce: bytes, data: bytes, last: bool, context: bytes = b"") -> bytes:
        return self._aead.decrypt(nonce, data, context + (LAST if last else MORE))

    @property
    def secret(self) -> bytes:
        """The key's 32 bytes: a data key's, to be wrapped under a key-encryption key."""
        return self._secret

    def wrap(self, secret: bytes, aad: bytes) -> bytes:
        """`secret` (a data key's bytes) sealed under this key: a random 12-byte nonce, then AES-256-GCM of it with
        `aad` authenticated alongside."""
        nonce = os.urandom(12)
        return nonce + self._aead.encrypt(nonce, secret, aad)

    def unwrap(self, wrapped: bytes, aad: bytes) -> bytes | None:
        """What `wrap` sealed, or None when this is not the key it was sealed under or anything (`aad` included)
        differs."""
        from cryptography.exceptions import InvalidTag

        try:
            return self._aead.decrypt(wrapped[:12], wrapped[12:], aad) if len(wrapped) > 12 + TAG else None
        except InvalidTag:
            return None

    def describe(self) -> dict[str, object]:
        """What a manifest records about the encryption (never the key)."""
        return {"algorithm": ALGORITHM, "keyId": self.id}


class EncryptingWriter:
    """A Writer that encrypts into another Writer; close() seals the last chunk. A `context` is authenticated with
    every chunk (a watch segment's watch, base and sequence number): the ciphertext opens only where it belongs."""

    def __init__(self, sink: Writer, key: Key, prefix: bytes | None = None, context: bytes = b""):
        self.sink = sink
        self.key = key
        self.context = context
        self.prefix = os.urandom(PREFIX) if prefix is None else prefix  # given only by known-answer tests
        if len(self.prefix) != PREFIX:
            raise ValueError(f"a nonce prefix is {PREFIX} bytes")
        self.counter = 0
        self.buf = bytearray()
        sink.write(MAGIC + self.prefix)

    def write(self, data: bytes, /) -> int:
        self.buf += data
        while len(self.buf) > CHUNK:  # a chunk is sealed only once more data follows it
            self._emit(bytes(self.buf[:CHUNK]), last=False)
            del self.buf[:CHUNK]
        return len(data)

    def flush(self) -> None:
        pass  # gzip flushes its fileobj; chunks are sealed as they fill

    def close(self) -> None:
        self._emit(bytes(self.buf), last=True)
        self.buf.clear()

    def _emit(self, data: bytes, last: bool) -> None:
        nonce = self.prefix + self.counter.to_bytes(4, "big")
        self.sink.write(self.key.seal(nonce, data, last, self.context))
        self.counter += 1


def is_encrypted(path: Path) -> bool:
    with open(path, "rb") as f:
        return f.read(len(MAGIC)) == MAGIC


def decrypt_file(src: Path, dest: IO[bytes], key: Key, context: bytes = b"") -> None:
    """Decrypt src into dest; ArchiveError when the key is wrong, the context is not the one it was sealed with, or
    any byte was changed, cut or added."""
    from cryptography.exceptions import InvalidTag

    with open(src, "rb") as f:
        if f.read(len(MAGIC)) != MAGIC:
            raise ArchiveError(f"{src.name} is not an encrypted statusvault archive")
        prefix = f.read(PREFIX)
        if len(prefix) != PREFIX:
            raise ArchiveError(f"{src.name} is cut short: no encryption header")
        counter = 0
        chunk = f.read(CHUNK + TAG)
        while True:
            following = f.read(CHUNK + TAG)
            nonce = prefix + counter.to_bytes(4, "big")
            try:
                dest.write(key.open(nonce, chunk, last=not following, context=context))
            except InvalidTag:
                raise ArchiveError(
                    "cannot decrypt the archive: wrong key, or the archive was modified or cut short"
                ) from None
            if not following:
                return
            chunk, counter = following, counter + 1
