"""Writing archive format v1: object files streamed into a tar.gz (optionally encrypted), manifest.json last."""

from __future__ import annotations

import gzip
import hashlib
import tarfile
import tempfile
import time
from collections.abc import Callable
from typing import IO, Any

import orjson

from statusvault.archive.crypto import EncryptingWriter, Key
from statusvault.archive.format import MANIFEST_MEMBER, MAX_OBJECT_BYTES, MAX_OBJECTS
from statusvault.archive.stream import byte_sum
from statusvault.errors import ArchiveError
from statusvault.storage.base import Writer


class _HashingSink:
    """Counts and hashes the compressed bytes on their way to the store."""

    def __init__(self, sink: Writer):
        self.sink = sink
        self.sha = hashlib.sha256()
        self.size = 0

    def write(self, data: bytes) -> int:
        self.sha.update(data)
        self.size += len(data)
        self.sink.write(data)
        return len(data)

    def flush(self) -> None:
        pass


class _TarOut:
    """Tar members written straight into the compressed stream, byte for byte what tarfile's PAX format writes.

    An ASCII path of at most 100 bytes (every path of a normal backup) takes a ustar header made from a
    template: the name, size and checksum filled in. Any other path goes through tarfile (a pax header). One
    compressor call per ~64 KiB instead of tarfile's several per member, and no per-member TarInfo copies."""

    def __init__(self, write: Callable[[bytearray], object], mtime: int):
        self._write = write  # into the compressor
        self.mtime = mtime
        self.offset = 0
        self._buf = bytearray()
        self._template = bytearray(self._info("", 0).tobuf(tarfile.PAX_FORMAT, "utf-8", "surrogateescape"))

    def _info(self, path: str, size: int) -> tarfile.TarInfo:
        info = tarfile.TarInfo(path)
        info.size, info.mtime, info.mode = size, self.mtime, 0o644
        return info

    def header(self, path: str, size: int) -> bytes:
        name = path.encode("utf-8", "surrogateescape")
        if len(name) > 100 or not name.isascii():
            return self._info(path, size).tobuf(tarfile.PAX_FORMAT, "utf-8", "surrogateescape")
        head = self._template.copy()
        head[0:100] = name.ljust(100, b"\0")
        head[124:136] = b"%011o\0" % size
        head[148:156] = b"        "
        head[148:155] = b"%06o\0" % byte_sum(head)
        return bytes(head)

    def add(self, path: str, data: bytes) -> None:
        self.write(self.header(path, len(data)))
        self.write(data)
        self.write(_ZEROS[: -len(data) % tarfile.BLOCKSIZE])

    def add_file(self, path: str, size: int, fileobj: IO[bytes]) -> None:
        self.write(self.header(path, size))
        for chunk in iter(lambda: fileobj.read(1 << 20), b""):
            self.write(chunk)
        self.write(_ZEROS[: -size % tarfile.BLOCKSIZE])

    def write(self, data: bytes) -> None:
        self._buf += data
        self.offset += len(data)
        if len(self._buf) >= 1 << 16:
            self._write(self._buf)
            self._buf.clear()

    def close(self) -> None:
        """The end-of-archive blocks, padded to a whole tar record as tarfile does."""
        self.write(_ZEROS[: 2 * tarfile.BLOCKSIZE])
        self.write(bytes(-self.offset % tarfile.RECORDSIZE))
        self._write(self._buf)
        self._buf.clear()


_ZEROS = bytes(tarfile.RECORDSIZE)


class ArchiveWriter:
    """Streams object files into a tar.gz; the per-file SHA-256 list is spooled to disk, not memory."""

    def __init__(self, sink: Writer, compresslevel: int = 3, mtime: float | None = None, key: Key | None = None):
        self._out = _HashingSink(sink)  # size and SHA-256 of what is stored (the ciphertext when encrypted)
        self._enc = EncryptingWriter(self._out, key) if key is not None else None
        self.mtime = int(mtime if mtime is not None else time.time())
        self._gz = gzip.GzipFile(
            fileobj=self._enc or self._out,
            mode="wb",
            compresslevel=compresslevel,
            mtime=self.mtime,
        )
        self._tar = _TarOut(self._gz.write, self.mtime)
        self._spool: IO[bytes] = tempfile.TemporaryFile()  # noqa: SIM115 - closed by finish()/abort()
        self.files = 0
        self.raw_bytes = 0

    def add(self, path: str, data: bytes) -> None:
        if len(data) > MAX_OBJECT_BYTES or self.files >= MAX_OBJECTS:  # no reader would take the archive
            raise ArchiveError(f"{path} is beyond the archive format's limits (docs/archive-format.md, Limits)")
        self._tar.add(path, data)
        digest = hashlib.sha256(data).hexdigest()
        self._spool.write(orjson.dumps(path) + b":" + orjson.dumps(digest) + b",")
        self.files += 1
        self.raw_bytes += len(data)

    def finish(self, manifest: dict[str, Any]) -> tuple[int, str]:
        """Write manifest.json (with every file's SHA-256) as the last member; return (size, sha256)."""
        with tempfile.TemporaryFile() as mf:
            head = orjson.dumps({k: v for k, v in manifest.items() if k != "files"}, option=orjson.OPT_SORT_KEYS)
            mf.write(head[:-1] + (b',"files":{' if len(head) > 2 else b'{"files":{'))
            self._spool.seek(0)
            prev = b""
            for chunk in iter(lambda: self._spool.read(1 << 20), b""):
                mf.write(prev)
                prev = chunk
            mf.write(prev[:-1] if prev.endswith(b",") else prev)
            mf.write(b"}}")
            size = mf.tell()
            mf.seek(0)
            self._tar.add_file(MANIFEST_MEMBER, size, mf)
        self._tar.close()
        self._gz.close()
        if self._enc is not None:
            self._enc.close()
        self._spool.close()
        return self._out.size, self._out.sha.hexdigest()

    def abort(self) -> None:
        """Drop what is buffered: nothing more is written to the sink, now or when the streams are freed."""
        self._gz.fileobj = None  # type: ignore[assignment]  # GzipFile.close would write its trailer
        self._gz.close()
        self._spool.close()
