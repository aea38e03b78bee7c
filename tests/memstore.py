"""Stores in memory for unit tests: the ObjectStore protocol and nothing more, and one that also writes
conditionally."""

from __future__ import annotations

import datetime as dt
import io
import tempfile
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from statusvault.errors import StorageError
from statusvault.storage.base import StoredObject, Versioned


class MemoryStore:
    """The protocol and nothing more, in memory: what an engine may count on from any store."""

    url = "memory://"

    def __init__(self) -> None:
        self.objects: dict[str, bytes] = {}
        self.modified: dict[str, dt.datetime] = {}

    def put(self, key: str, data: bytes) -> None:
        self.objects[key] = data
        self.modified[key] = dt.datetime.now(dt.UTC)

    def get(self, key: str, limit: int = -1) -> bytes:
        if key not in self.objects:
            raise StorageError(f"{self.url}{key} does not exist")
        return self.objects[key][: limit if limit >= 0 else None]

    def exists(self, key: str) -> bool:
        return key in self.objects

    def list(self, prefix: str) -> Iterator[StoredObject]:
        found = [(k, v, self.modified[k]) for k, v in list(self.objects.items()) if k.startswith(prefix)]
        return iter([StoredObject(k, len(v), when) for k, v, when in found])

    def delete(self, key: str) -> None:
        self.objects.pop(key, None)

    @contextmanager
    def open_write(self, key: str) -> Iterator[io.BytesIO]:
        buf = io.BytesIO()
        yield buf
        self.put(key, buf.getvalue())

    @contextmanager
    def local_file(self, key: str) -> Iterator[Path]:
        with tempfile.TemporaryDirectory() as tmp:
            path = Path(tmp) / "object"
            path.write_bytes(self.get(key))
            yield path


class ConditionalMemoryStore(MemoryStore):
    """Writes conditionally, as S3 and a directory do, each object aged by the store's own (monotonic) clock."""

    url = "memory+cas://"

    def __init__(self) -> None:
        super().__init__()
        self.written: dict[str, tuple[int, float]] = {}  # key -> (version, when)
        self.writes = 0
        self.lock = threading.Lock()

    def put(self, key: str, data: bytes) -> None:
        with self.lock:
            self._write(key, data)

    def _write(self, key: str, data: bytes) -> str:
        self.writes += 1
        super().put(key, data)
        self.written[key] = (self.writes, time.monotonic())
        return str(self.writes)

    def delete(self, key: str) -> None:
        with self.lock:
            self.objects.pop(key, None)
            self.written.pop(key, None)

    def read_versioned(self, key: str, limit: int = -1) -> Versioned | None:
        with self.lock:
            if key not in self.objects:
                return None
            version, when = self.written[key]
            return Versioned(self.get(key, limit), str(version), time.monotonic() - when)

    def put_if(self, key: str, data: bytes, version: str | None) -> str | None:
        with self.lock:
            current = str(self.written[key][0]) if key in self.objects else None
            return self._write(key, data) if current == version else None
