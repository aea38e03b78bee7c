"""A local directory as an ObjectStore; writes land atomically by rename."""

from __future__ import annotations

import datetime as dt
import os
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

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
            self._prune(path.parent)  # a failed first write leaves no empty backup directory
            raise

    def get(self, key: str, limit: int = -1) -> bytes:
        path = self._existing(key)
        try:
            with open(path, "rb") as f:
                return f.read(limit)
        except OSError as e:
            raise StorageError(f"cannot read {path}: {e.strerror}") from e

    @contextmanager
    def local_file(self, key: str) -> Iterator[Path]:
        yield self._existing(key)

    def _existing(self, key: str) -> Path:
        path = self._path(key)
        if not path.is_file():
            raise StorageError(f"{self.url}/{key} does not exist")
        return path

    def exists(self, key: str) -> bool:
        return self._path(key).is_file()

    def list(self, prefix: str) -> Iterator[StoredObject]:
        folder = prefix.rpartition("/")[0]  # the deepest directory every match lies under
        base = self._path(folder) if folder.strip("/") else self.root
        if not base.is_dir():
            return
        for dirpath, dirs, files in os.walk(base):
            dirs.sort()
            for fname in sorted(files):
                if fname.startswith("."):
                    continue  # in-flight partial writes
                full = Path(dirpath) / fname
                key = full.relative_to(self.root).as_posix()
                if key.startswith(prefix):
                    st = full.stat()
                    yield StoredObject(key, st.st_size, dt.datetime.fromtimestamp(st.st_mtime, dt.UTC))

    def delete(self, key: str) -> None:
        path = self._path(key)
        path.unlink(missing_ok=True)
        self._prune(path.parent)

    def _prune(self, directory: Path) -> None:
        """Remove `directory` and its parents up to the root while they are empty."""
        while directory != self.root:
            try:
                directory.rmdir()
            except OSError:
                break
            directory = directory.parent
