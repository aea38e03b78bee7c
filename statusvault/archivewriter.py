"""Writing archive format v1: object files streamed into a tar.gz (optionally encrypted), manifest.json last."""

from __future__ import annotations

import gzip
import hashlib
import io
import tarfile
import tempfile
import time
from typing import IO, Any

import orjson

from statusvault.archiveformat import MANIFEST_MEMBER, MAX_OBJECT_BYTES, MAX_OBJECTS
from statusvault.crypto import EncryptingWriter, Key
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
        self._tar = tarfile.open(fileobj=self._gz, mode="w|", format=tarfile.PAX_FORMAT)  # noqa: SIM115
        self._spool: IO[bytes] = tempfile.TemporaryFile()  # noqa: SIM115 - closed by finish()/abort()
        self.files = 0
        self.raw_bytes = 0

    def add(self, path: str, data: bytes) -> None:
        if len(data) > MAX_OBJECT_BYTES or self.files >= MAX_OBJECTS:  # no reader would take the archive
            raise ArchiveError(f"{path} is beyond the archive format's limits (docs/archive-format.md, Limits)")
        info = tarfile.TarInfo(path)
        info.size = len(data)
        info.mtime = self.mtime
        info.mode = 0o644
        self._tar.addfile(info, io.BytesIO(data))
        self._tar.members.clear()  # type: ignore[attr-defined]  # TarFile remembers every member it wrote: memory would grow with the backup
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
            info = tarfile.TarInfo(MANIFEST_MEMBER)
            info.size = size
            info.mtime = self.mtime
            info.mode = 0o644
            self._tar.addfile(info, mf)
        self._tar.close()
        self._gz.close()
        if self._enc is not None:
            self._enc.close()
        self._spool.close()
        return self._out.size, self._out.sha.hexdigest()

    def abort(self) -> None:
        """Drop what is buffered: nothing more is written to the sink, now or when the streams are freed."""
        self._tar.fileobj.closed = True  # type: ignore[attr-defined]  # tarfile's stream would flush at deletion
        self._tar.closed = True  # type: ignore[attr-defined]
        self._gz.fileobj = None  # type: ignore[assignment]  # GzipFile.close would write its trailer
        self._gz.close()
        self._spool.close()
