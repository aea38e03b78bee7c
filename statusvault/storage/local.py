"""A local directory as an ObjectStore; writes land atomically by rename."""

from __future__ import annotations

import datetime as dt
import os
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import BinaryIO

from statusvault.errors import StorageError
from statusvault.storage.base import StoredObject, Writer


class LocalStore:
    def __init__(self, root: Path):
        self.root = root.expanduser().resolve()
        self.url = f"file://{self.root}"

    def _path(self, key: str) -> Path:
        path = (self.root / key).resolve()
        if self.root not in path.parents:
            raise StorageError(f"key {key!r} escapes the storage root {self.root}")
        return path

    def check(self) -> None:
        try:
            self.root.mkdir(parents=True, exist_ok=True)
        except OSError as e:
            raise StorageError(f"cannot use {self.root} as backup storage: {e.strerror}") from e
        if not os.access(self.root, os.W_OK | os.X_OK):
            raise StorageError(f"backup storage {self.root} is not writable")

    def sweep(self, older_than: float) -> int:
        """Stale `.<name>.*.partial` files (a SIGKILLed writer's), and the directories they leave empty."""
        cutoff = time.time() - older_than
        removed = 0
        for dirpath, _dirs, files in os.walk(self.root, topdown=False):
            here = 0
            for fname in files:
                full = Path(dirpath) / fname
                if fname.startswith(".") and fname.endswith(".partial") and full.stat().st_mtime < cutoff:
                    full.unlink(missing_ok=True)
                    here += 1
            if here and Path(dirpath) != self.root and not any(Path(dirpath).iterdir()):
                Path(dirpath).rmdir()  # the killed backup's own directory
            removed += here
        return removed

    def put(self, key: str, data: bytes) -> None:
        with self.open_write(key) as w:
            w.write(data)

    @contextmanager
    def open_write(self, key: str) -> Iterator[Writer]:
        path = self._path(key)
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".partial", dir=path.parent)
        except OSError as e:
            raise StorageError(f"cannot write to {path.parent}: {e.strerror}") from e
        try:
            with os.fdopen(fd, "wb", buffering=1 << 20) as f:
                yield f
                f.flush()
                os.fsync(f.fileno())
            os.replace(tmp, path)
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise

    def get(self, key: str) -> bytes:
        with self.open_read(key) as f:
            return f.read()

    @contextmanager
    def open_read(self, key: str) -> Iterator[BinaryIO]:
        path = self._path(key)
        try:
            f = open(path, "rb")  # noqa: SIM115 - closed below
        except FileNotFoundError as e:
            raise StorageError(f"{self.url}/{key} does not exist") from e
        except OSError as e:
            raise StorageError(f"cannot read {path}: {e.strerror}") from e
        with f:
            yield f

    def fetch(self, key: str, dest: Path) -> None:
        import shutil

        with self.open_read(key) as src, open(dest, "wb") as out:
            shutil.copyfileobj(src, out, 1 << 20)

    def local_path(self, key: str) -> Path:
        """The file behind `key`, so readers can skip a copy."""
        return self._path(key)

    def exists(self, key: str) -> bool:
        return self._path(key).is_file()

    def list(self, prefix: str) -> Iterator[StoredObject]:
        base = self._path(prefix) if prefix.strip("/") else self.root
        if not base.is_dir():
            return
        for dirpath, _dirs, files in os.walk(base):
            for fname in sorted(files):
                if fname.startswith("."):
                    continue  # in-flight partial writes
                full = Path(dirpath) / fname
                st = full.stat()
                yield StoredObject(
                    full.relative_to(self.root).as_posix(),
                    st.st_size,
                    dt.datetime.fromtimestamp(st.st_mtime, dt.UTC),
                )

    def delete(self, key: str) -> None:
        path = self._path(key)
        path.unlink(missing_ok=True)
        parent = path.parent
        while parent != self.root:
            try:
                parent.rmdir()
            except OSError:
                break
            parent = parent.parent
