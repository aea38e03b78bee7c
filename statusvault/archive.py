"""Archive format v1: a gzip'd tar of one JSON file per object plus manifest.json (see docs/archive-format.md)."""

from __future__ import annotations

import dataclasses
import gzip
import hashlib
import io
import json
import re
import shutil
import tarfile
import tempfile
import time
import zlib
from collections.abc import Callable, Iterator
from pathlib import Path, PurePosixPath
from typing import IO, Any

import orjson

from statusvault.crypto import EncryptingWriter, Key
from statusvault.errors import ArchiveError
from statusvault.model import ObjectKey
from statusvault.storage.base import Writer

FORMAT_VERSION = "1.0"
SUPPORTED_MAJOR = 1
MANIFEST_MEMBER = "manifest.json"
RESOURCES_DIR = "resources"


def member_path(key: ObjectKey) -> str:
    """Velero's layout: resources/<resource>.<group>/namespaces/<ns>/<name>.json or .../cluster/<name>.json."""
    if key.namespace:
        return f"{RESOURCES_DIR}/{key.qualified}/namespaces/{key.namespace}/{key.name}.json"
    return f"{RESOURCES_DIR}/{key.qualified}/cluster/{key.name}.json"


def parse_member_path(path: str) -> ObjectKey:
    """The inverse of member_path; refuses anything that escapes the archive root or the layout."""
    p = PurePosixPath(path)
    if p.is_absolute() or ".." in p.parts or "" in p.parts or not path.endswith(".json"):
        raise ArchiveError(f"archive member {path!r} is outside the archive layout")
    parts = p.parts
    if len(parts) == 5 and parts[0] == RESOURCES_DIR and parts[2] == "namespaces":
        return ObjectKey(parts[1], parts[3], parts[4][:-5])
    if len(parts) == 4 and parts[0] == RESOURCES_DIR and parts[2] == "cluster":
        return ObjectKey(parts[1], "", parts[3][:-5])
    raise ArchiveError(f"archive member {path!r} is outside the archive layout")


def check_format(manifest: dict[str, Any]) -> None:
    version = str(manifest.get("formatVersion", ""))
    try:
        major = int(version.split(".")[0])
    except ValueError:
        raise ArchiveError(f"manifest has no valid formatVersion ({version!r})") from None
    if major != SUPPORTED_MAJOR:
        raise ArchiveError(
            f"archive format {version} is not supported by this statusvault "
            f"(reads {SUPPORTED_MAJOR}.x); upgrade statusvault"
        )


RESOURCE_FIELDS = {"group": str, "version": str, "resource": str, "kind": str, "namespaced": bool}


def check_resources(manifest: dict[str, Any]) -> None:
    """The manifest's per-resource entries have the fields readers rely on."""
    resources = manifest.get("resources")
    if not isinstance(resources, dict):
        raise ArchiveError("manifest has no resources map")
    for name, entry in resources.items():
        if not isinstance(entry, dict) or any(not isinstance(entry.get(f), t) for f, t in RESOURCE_FIELDS.items()):
            raise ArchiveError(f"manifest entry for {name!r} is malformed")


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
        self._spool.close()


@dataclasses.dataclass
class VerifyReport:
    files_checked: int = 0
    mismatched: list[str] = dataclasses.field(default_factory=list)
    missing: list[str] = dataclasses.field(default_factory=list)
    unexpected: list[str] = dataclasses.field(default_factory=list)
    misordered: list[str] = dataclasses.field(default_factory=list)  # listed, but not at their place (order is format)
    archive_sha_ok: bool | None = None
    error: str = ""
    objects_unchecked: bool = False  # encrypted and verified without the key: only the stored checksum was checked

    @property
    def ok(self) -> bool:
        return (
            not (self.mismatched or self.missing or self.unexpected or self.misordered or self.error)
            and self.archive_sha_ok is not False
        )


def _open_stream(path: Path) -> tarfile.TarFile:
    try:
        return tarfile.open(path, mode="r|gz")
    except (tarfile.TarError, OSError, EOFError, zlib.error) as e:
        raise ArchiveError(f"{path.name} is not a statusvault archive (tar.gz): {e}") from e


def _members(tar: tarfile.TarFile) -> Iterator[tarfile.TarInfo]:
    """Iterate a streamed tar without TarFile's list of every member read (memory stays flat)."""
    while (member := tar.next()) is not None:
        tar.members.clear()  # type: ignore[attr-defined]
        yield member


READ_ERRORS = (tarfile.TarError, OSError, EOFError, zlib.error, gzip.BadGzipFile)


FILES_MARKER = b',"files":{'
HEAD_LIMIT = 16 << 20  # the manifest's head (all but "files") is small: look for "files" this far
_ENTRY = re.compile(rb'"((?:[^"\\]|\\.)*)":"([0-9a-f]{64})",?')


class ArchiveReader:
    """Reads an archive file; every object file is checked against the manifest's SHA-256.

    The manifest's `files` list is kept as raw bytes and walked in step with the archive (the writer puts
    both in the same order), so a restore does not hold a path->hash map of every object.
    """

    def __init__(self, path: Path, sha256: str = ""):
        self.path = path
        self.sha256 = sha256  # of the whole archive file, when the opener computed it
        self._head: dict[str, Any] | None = None
        self._files_raw: IO[bytes] | None = None  # the spooled manifest, when in the writer's layout
        self._files_span = (0, 0)  # where the entries of "files" are in it
        self._files_dict: dict[str, str] = {}  # "files" of a manifest in another layout
        self._manifest: dict[str, Any] | None = None

    def head(self) -> dict[str, Any]:
        """The manifest without its `files` list."""
        if self._head is None:
            self._load(self._spool_manifest())
        assert self._head is not None
        return self._head

    def manifest(self) -> dict[str, Any]:
        """The whole manifest, `files` included (a map of every object: for verify, not for restores)."""
        if self._manifest is None:
            self._manifest = {**self.head(), "files": dict(self.file_entries())}
        return self._manifest

    def file_entries(self) -> Iterator[tuple[str, str]]:
        """(member path, SHA-256 hex) in the manifest's order, which is the archive's."""
        self.head()
        if self._files_raw is None:
            yield from self._files_dict.items()
            return
        spool, (offset, end) = self._files_raw, self._files_span
        buf, pos = b"", 0
        while True:
            m = _ENTRY.match(buf, pos)
            if m is None or m.end() == len(buf):  # an entry may continue in the next chunk: read more first
                spool.seek(offset)
                chunk = spool.read(min(1 << 16, end - offset))
                offset += len(chunk)
                if chunk:
                    buf, pos = buf[pos:] + chunk, 0
                    continue
                if m is None:
                    if pos < len(buf):
                        raise ArchiveError(f"manifest.json in {self.path.name} has a malformed file list")
                    return
            yield json.loads(b'"' + m.group(1) + b'"'), m.group(2).decode()
            pos = m.end()

    def _load(self, spool: IO[bytes]) -> None:
        """Parse the manifest's head; keep the offsets of its `files` entries in the spooled manifest."""
        size = spool.seek(0, 2)
        spool.seek(0)
        prefix, idx = b"", -1
        while idx < 0 and len(prefix) < HEAD_LIMIT:
            chunk = spool.read(1 << 16)
            if not chunk:
                break
            prefix += chunk
            idx = prefix.find(FILES_MARKER)
        spool.seek(size - 2)
        head: Any = None
        if idx > 0 and spool.read(2) == b"}}":
            try:
                head = json.loads(prefix[:idx] + b"}")
                self._files_raw, self._files_span = spool, (idx + len(FILES_MARKER), size - 2)
            except ValueError:
                head = None
        if head is None:  # another layout: parse it whole
            spool.seek(0)
            try:  # stdlib json: orjson's parser reserves ~15x the input, a spike on large manifests
                whole = json.loads(spool.read())
            except ValueError as e:
                raise ArchiveError(f"manifest.json in {self.path.name} is not valid JSON: {e}") from e
            if not isinstance(whole, dict) or not isinstance(whole.get("files"), dict):
                raise ArchiveError("manifest.json has no file list")
            head = {k: v for k, v in whole.items() if k != "files"}
            self._files_dict = whole["files"]
        if not isinstance(head, dict):
            raise ArchiveError("manifest.json is not a JSON object")
        check_format(head)
        check_resources(head)
        self._head = head

    def _spool_manifest(self) -> IO[bytes]:
        """Copy manifest.json to a temp file in chunks: a 100k-object manifest is ~12 MB."""
        tar = _open_stream(self.path)
        try:
            for member in _members(tar):
                if member.name == MANIFEST_MEMBER and member.isfile():
                    f = tar.extractfile(member)
                    assert f is not None
                    spool = tempfile.TemporaryFile()  # noqa: SIM115 - lives as long as the reader
                    shutil.copyfileobj(f, spool, 1 << 16)
                    return spool
        except READ_ERRORS as e:
            raise ArchiveError(f"archive {self.path.name} is corrupt: {e}") from e
        finally:
            tar.close()
        raise ArchiveError(f"archive {self.path.name} has no manifest.json: the backup is incomplete")

    def objects(self, want: Callable[[str], bool] | None = None) -> Iterator[tuple[str, bytes]]:
        """Yield (member path, JSON bytes) of object files in archive order; raise on any tampering."""
        entries = self.file_entries()
        tar = _open_stream(self.path)
        try:
            for member in _members(tar):
                if member.name == MANIFEST_MEMBER:
                    continue
                parse_member_path(member.name)
                if not member.isfile():
                    raise ArchiveError(f"archive member {member.name!r} is not a regular file")
                listed, expected = next(entries, ("", ""))
                if listed != member.name:
                    raise ArchiveError(f"archive member {member.name!r} is not listed in the manifest at its place")
                if want is not None and not want(member.name):
                    continue
                f = tar.extractfile(member)
                assert f is not None
                data = f.read()
                if hashlib.sha256(data).hexdigest() != expected:
                    raise ArchiveError(f"checksum mismatch for {member.name}: the archive was modified")
                yield member.name, data
            if next(entries, None) is not None:
                raise ArchiveError("the manifest lists object files the archive does not hold")
        except READ_ERRORS as e:
            raise ArchiveError(f"archive {self.path.name} is corrupt: {e}") from e
        finally:
            tar.close()

    def verify(self, expected_sha256: str | None = None) -> VerifyReport:
        """Check the whole archive: format, every file's hash, nothing missing or extra."""
        report = VerifyReport()
        if expected_sha256 is not None:
            report.archive_sha_ok = file_sha256(self.path) == expected_sha256
        try:
            entries = self.file_entries()
            ahead: dict[str, str] = {}  # entries read past while looking for a member: only in a tampered archive
            tar = _open_stream(self.path)
            try:
                for member in _members(tar):
                    if member.name == MANIFEST_MEMBER:
                        continue
                    expected = ahead.pop(member.name, None)
                    if expected is not None:
                        report.misordered.append(member.name)
                    while expected is None and (entry := next(entries, None)) is not None:
                        if entry[0] == member.name:
                            expected = entry[1]
                        else:
                            ahead[entry[0]] = entry[1]
                    if expected is None or not member.isfile():
                        report.unexpected.append(member.name)
                        continue
                    parse_member_path(member.name)
                    f = tar.extractfile(member)
                    assert f is not None
                    report.files_checked += 1
                    if hashlib.sha256(f.read()).hexdigest() != expected:
                        report.mismatched.append(member.name)
            finally:
                tar.close()
            report.missing = sorted([*ahead, *(path for path, _ in entries)])
        except ArchiveError as e:
            report.error = str(e)
        except READ_ERRORS as e:
            report.error = f"archive {self.path.name} is corrupt: {e}"
        return report


def file_sha256(path: Path) -> str:
    """SHA-256 of a file, read in 1 MiB chunks."""
    sha = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            sha.update(chunk)
    return sha.hexdigest()
