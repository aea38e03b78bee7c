"""Segment format 1.x: gzip JSON Lines of changes, each segment described by a small manifest that names the
previous segment's SHA-256 (docs/archive-format.md, "Continuous backup"). Writing and reading, no policy."""

from __future__ import annotations

import contextlib
import datetime as dt
import gzip
import hashlib
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import IO, Any

import orjson

from statusvault import rfc3339
from statusvault.archive import file_sha256, signing
from statusvault.archive.crypto import ALGORITHM, EncryptingWriter, Key, decrypt_file
from statusvault.archive.envelope import FileKek, Keyring, Keys
from statusvault.archive.format import json_object
from statusvault.errors import ArchiveError, ConfigError
from statusvault.storage.base import ObjectStore

SEGMENT_FORMAT = "1.1"  # 1.1: an encrypted segment is bound to its place (segment_context); 1.0 is read as well
SEGMENT_KIND = "statusvault-watch-segment"
CHAIN_KIND = "statusvault-watch-chain"
MAX_RECORD_BYTES = 32 << 20  # one JSON line: an object of at most 16 MiB (the archive's limit), escaped
MAX_MANIFEST_BYTES = 4 << 20
OPS = ("put", "delete")


def segment_context(watch: str, base: str, seq: int) -> bytes:
    """What an encrypted segment (format 1.1 on) authenticates besides its bytes: its watch, base and sequence
    number, so a segment's ciphertext does not open at another place (an older segment of the same watch put in a
    newer one's stead, its plaintext manifest edited to match)."""
    return b"\0".join((b"statusvault watch segment", watch.encode(), base.encode(), str(seq).encode(), b""))


def bound(m: dict[str, Any]) -> bool:
    """Whether the segment was written bound to its place (format 1.1 on)."""
    major, _, minor = str(m.get("formatVersion", "")).partition(".")
    return major == "1" and minor.isdigit() and int(minor) >= 1


def stamp(t: dt.datetime) -> str:
    """UTC, microseconds: the format's one time syntax."""
    return rfc3339.format_micro(t)


def parse_record_time(text: str) -> dt.datetime:
    try:
        return rfc3339.parse(text)
    except ValueError:
        raise ArchiveError(f"invalid time {text[:40]!r} in a watch record") from None


def record(op: str, resource: str, rv: str, seen: dt.datetime, obj: bytes) -> bytes:
    """One JSON line; `obj` is the object's archived form (see backup.prepare_object)."""
    head = orjson.dumps({"op": op, "resource": resource, "rv": rv, "seen": stamp(seen)}, option=orjson.OPT_SORT_KEYS)
    return head[:-1] + b',"object":' + obj + b"}\n"


class _Hashing:
    def __init__(self, sink: Any):
        self.sink, self.sha, self.size = sink, hashlib.sha256(), 0

    def write(self, data: bytes, /) -> int:
        self.sha.update(data)
        self.size += len(data)
        self.sink.write(data)
        return len(data)


class SegmentBuffer:
    """Changes since the last flush, gzip-compressed into a temp file (never held in memory)."""

    def __init__(self) -> None:
        self._file: IO[bytes] = tempfile.TemporaryFile()  # noqa: SIM115 - closed by upload()/close()
        self._gz = gzip.GzipFile(fileobj=self._file, mode="wb", compresslevel=3, mtime=0)
        self.records = 0
        self.raw_bytes = 0
        self.first_seen: dt.datetime | None = None
        self.last_seen: dt.datetime | None = None

    def add(self, line: bytes, seen: dt.datetime) -> None:
        self._gz.write(line)
        self.records += 1
        self.raw_bytes += len(line)
        self.first_seen = self.first_seen or seen
        self.last_seen = seen

    def upload(self, store: ObjectStore, key: str, enc: Key | None, context: bytes = b"") -> tuple[int, str]:
        """Store the segment under `key` (encrypted with enc, bound to `context`); return (stored size, SHA-256 of
        stored bytes)."""
        self._gz.close()
        self._file.seek(0)
        with store.open_write(key) as sink:
            out = _Hashing(sink)
            writer: Any = EncryptingWriter(out, enc, context=context) if enc is not None else out
            for chunk in iter(lambda: self._file.read(1 << 20), b""):
                writer.write(chunk)
            if enc is not None:
                writer.close()
        self.close()
        return out.size, out.sha.hexdigest()

    def close(self) -> None:
        with contextlib.suppress(Exception):
            self._gz.close()
        self._file.close()


def check_segment_manifest(m: Any, watch: str, base: str, seq: int) -> dict[str, Any]:
    """A segment manifest's shape and identity; ArchiveError naming the segment otherwise."""
    where = f"segment {seq} of watch {watch!r} (base {base})"
    if not isinstance(m, dict) or m.get("kind") != SEGMENT_KIND:
        raise ArchiveError(f"{where}: not a segment manifest")
    version = str(m.get("formatVersion", ""))
    if version.split(".")[0] != "1":
        raise ArchiveError(f"{where}: segment format {version!r} is not supported (reads 1.x); upgrade statusvault")
    if (m.get("watch"), m.get("base"), m.get("seq")) != (watch, base, seq):
        raise ArchiveError(f"{where}: its manifest names another place ({m.get('base')}, {m.get('seq')})")
    for field, kind in (("sha256", str), ("previous", str), ("size", int), ("records", int), ("until", str)):
        if not isinstance(m.get(field), kind):
            raise ArchiveError(f"{where}: manifest field {field!r} is missing or malformed")
    if m.get(signing.FIELD) is not None:
        signing.check_field(m[signing.FIELD], where)
    if not isinstance(m.get("resourceVersions"), dict):
        raise ArchiveError(f"{where}: manifest field 'resourceVersions' is missing or malformed")
    return m


def read_json(store: ObjectStore, key: str, what: str) -> dict[str, Any]:
    data = store.get(key, MAX_MANIFEST_BYTES + 1)
    if len(data) > MAX_MANIFEST_BYTES:
        raise ArchiveError(f"{what} is larger than {MAX_MANIFEST_BYTES:,} bytes")
    return json_object(what, data)


@contextlib.contextmanager
def stored_segment(store: ObjectStore, key: str, m: dict[str, Any], where: str) -> Iterator[Path]:
    """The segment as stored (ciphertext when encrypted), as a local file, after its size and SHA-256 were
    checked against its manifest."""
    if not store.exists(key):
        raise ArchiveError(f"{where} is missing from the store: the chain is broken")
    with store.local_file(key) as stored:
        if stored.stat().st_size != m["size"] or file_sha256(stored) != m["sha256"]:
            raise ArchiveError(f"{where} was modified: its SHA-256 differs from its manifest")
        yield stored


@contextlib.contextmanager
def fetched_segment(store: ObjectStore, key: str, m: dict[str, Any], keys: Keys, where: str) -> Iterator[Path]:
    """The segment's plaintext gzip as a local file, after its stored size and SHA-256 were checked. Key problems
    are the archives' (opening.readable_archive): a ConfigError, as is a plaintext segment met with a key. A segment
    has no envelope: of the keys given, the key file that sealed it opens it."""
    with tempfile.TemporaryDirectory(prefix="statusvault-seg-") as tmp, stored_segment(store, key, m, where) as path:
        encryption = m.get("encryption")
        ring = Keyring.of(keys)
        if not encryption:
            if ring:  # else whoever can write the bucket could swap in a plaintext segment
                raise ConfigError(f"{where} is not encrypted, but an encryption key was given: refusing it")
            yield path
            return
        key_id, algorithm = str(encryption.get("keyId"))[:64], str(encryption.get("algorithm"))[:64]
        if algorithm != ALGORITHM:
            raise ArchiveError(f"{where} is encrypted with {algorithm!r}, which this statusvault cannot read")
        files = [k.key for k in ring.keks if isinstance(k, FileKek)]
        if not files:
            raise ConfigError(f"{where} is encrypted (key {key_id!r}): pass --encryption-key-file")
        enc = next((k for k in files if k.id == key_id), None)
        if enc is None:
            given = ", ".join(k.id for k in files)
            raise ConfigError(f"{where} was encrypted with key {key_id!r}, not with the given key ({given})")
        plain = Path(tmp) / "plain"
        context = segment_context(m["watch"], m["base"], m["seq"]) if bound(m) else b""
        with open(plain, "wb") as f:
            decrypt_file(path, f, enc, context)
        yield plain


def records(path: Path, where: str) -> Iterator[dict[str, Any]]:
    """Each record of a plaintext segment, checked for shape; ArchiveError on anything else."""
    try:
        with gzip.open(path, "rb") as f:
            while line := f.readline(MAX_RECORD_BYTES + 1):
                if len(line) > MAX_RECORD_BYTES:
                    raise ArchiveError(f"{where}: a record is larger than {MAX_RECORD_BYTES:,} bytes")
                yield _checked(orjson.loads(line), where)
    except (OSError, EOFError, orjson.JSONDecodeError) as e:
        raise ArchiveError(f"{where} is not valid gzip JSON Lines: {e}") from None


def _checked(rec: Any, where: str) -> dict[str, Any]:
    ok = (
        isinstance(rec, dict)
        and rec.get("op") in OPS
        and isinstance(rec.get("resource"), str)
        and isinstance(rec.get("seen"), str)
        and isinstance(rec.get("object"), dict)
        and isinstance((rec["object"].get("metadata") or {}).get("name"), str)
    )
    if not ok:
        raise ArchiveError(f"{where}: a record is malformed")
    checked: dict[str, Any] = rec
    return checked
