"""A local directory as an ObjectStore; writes land atomically by rename."""

from __future__ import annotations

import datetime as dt
import fcntl
import os
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from statusvault.errors import StorageError
from statusvault.storage.base import StoredObject, Versioned, Writer

LOCK_FILE = ".statusvault.lock"  # taken by conditional writes (hidden: never listed)


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

    def read_versioned(self, key: str, limit: int = -1) -> Versioned | None:
        path = self._path(key)
        try:
            with open(path, "rb") as f:
                st = os.fstat(f.fileno())
                data = f.read(limit)
        except FileNotFoundError:
            return None
        except OSError as e:
            raise StorageError(f"cannot read {path}: {e.strerror}") from e
        return Versioned(data, _version(st), self._now() - st.st_mtime)

    def put_if(self, key: str, data: bytes, version: str | None) -> str | None:
        """Under the store's lock: a new file is linked into place (which fails if one is there, lock or not),
        a known version replaced."""
        path = self._path(key)
        with self._locked():
            try:
                current: str | None = _version(path.stat())
            except FileNotFoundError:
                current = None
            if current != version:
                return None
            tmp = ""
            try:
                path.parent.mkdir(parents=True, exist_ok=True)
                fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".partial", dir=path.parent)
                with os.fdopen(fd, "wb") as f:
                    f.write(data)
                    os.fsync(f.fileno())
                if version is None:
                    os.link(tmp, path)
                else:
                    os.replace(tmp, path)
                return _version(path.stat())
            except FileExistsError:
                return None
            except OSError as e:
                raise StorageError(f"cannot write to {path.parent}: {e.strerror}") from e
            finally:
                if tmp:
                    Path(tmp).unlink(missing_ok=True)

    @contextmanager
    def _locked(self) -> Iterator[None]:
        try:
            self.root.mkdir(parents=True, exist_ok=True)
            fd = os.open(self.root / LOCK_FILE, os.O_RDWR | os.O_CREAT, 0o644)
        except OSError as e:
            raise StorageError(f"cannot write to {self.root}: {e.strerror}") from e
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            yield
        finally:
            os.close(fd)  # releases the lock

    def _now(self) -> float:
        """The store's clock: the modified time a file made now gets (on a shared mount, its server's)."""
        try:
            with tempfile.TemporaryFile(prefix=".clock.", suffix=".partial", dir=self.root) as f:
                return os.fstat(f.fileno()).st_mtime
        except OSError:
            return time.time()

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
                    try:
                        st = full.stat()
                    except FileNotFoundError:  # deleted since the directory was read (another run's clean-up)
                        continue
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


def _version(st: os.stat_result) -> str:
    """Every write makes a new file (a temp file renamed or linked into place): a new inode and modified time."""
    return f"{st.st_ino}:{st.st_mtime_ns}:{st.st_size}"
