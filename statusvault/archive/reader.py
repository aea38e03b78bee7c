"""Reading an archive: ArchiveReader, over the first, checking read (check.py) and the bounded tar.gz stream
(stream.py)."""

from __future__ import annotations

import dataclasses
import hashlib
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from statusvault.archive.check import FirstRead, VerifyReport, Visit, first_read
from statusvault.archive.format import (
    MANIFEST_MEMBER,
    MAX_OBJECT_BYTES,
    shown,
    stream_bound,
)
from statusvault.archive.stream import TarStream
from statusvault.errors import ArchiveError


class ArchiveReader:
    """Reads an archive file; nothing it yields has escaped the format's rules, limits and hashes.

    The first read (head(), file_entries(), objects() or verify(), whichever comes first) checks the whole
    archive once and spools its manifest; objects() then reads it again, re-checking each file's hash against
    the manifest's list, walked in step with the archive, so no map of every object is held."""

    def __init__(self, path: Path, sha256: str = "", summary: dict[str, Any] | None = None):
        self.path = path
        self.sha256 = sha256  # of the whole archive file, when the opener computed it
        self.inflated = 0  # bytes inflated by all reads so far
        self.summary = summary  # the backup's summary manifest, when the opener read it
        self._budget = stream_bound(summary or {})  # the summary manifest's totals, when given, bound the first read
        self._first: FirstRead | None = None
        # every byte is the writer's, once the opener checked the file's SHA-256: the backup was encrypted and opened
        # by a key given, or its signed manifest (naming that SHA-256) verified with a key given
        self.authenticated = False
        # bytes of object files the first read keeps, as it checked them, for objects() to hand on without reading
        # the archive again (a restore's waves); 0: none, and an archive holding more keeps none either
        self.keep = 0

    def _read_once(self) -> FirstRead:
        if self._first is None:
            self._first = first_read(self.path, self._budget, keep=self.keep)
            self.inflated += self._first.inflated
        return self._first

    @property
    def unread(self) -> bool:
        """Whether the first (checking) read has yet to happen."""
        return self._first is None

    def walk_first(self, visit: Visit) -> bool:
        """Hand each object to `visit` during the first read, which checks it, so a caller that must see every
        object anyway (planning) needs no second pass. False when the first read has happened already (walk
        objects() then). The archive's problems raise once the read ends: what `visit` saw counts only if
        this returns."""
        if self._first is not None:
            return False
        self._first = first_read(self.path, self._budget, visit, self.keep)
        self.inflated += self._first.inflated
        self._first.checked()
        return True

    def head(self) -> dict[str, Any]:
        """The manifest without its `files` list."""
        first = self._read_once()
        first.checked()
        return first.head

    def manifest(self) -> dict[str, Any]:
        """The whole manifest, `files` included (a map of every object: for tests and tools, not restores)."""
        return {**self.head(), "files": dict(self.file_entries())}

    def file_entries(self) -> Iterator[tuple[str, str]]:
        """(member path, SHA-256 hex) in the manifest's order, which is the archive's."""
        return self._read_once().checked().entries()

    def objects(self, want: Callable[[str], bool] | None = None) -> Iterator[tuple[str, bytes]]:
        """Yield (member path, JSON bytes) of object files in archive order; raise on any tampering.

        Members `want` declines are skipped unread."""
        first = self._read_once()
        entries = first.checked().entries()
        if first.members is not None:  # checked by the first read, against the manifest's list too
            yield from (m for m in first.members if want is None or want(m[0]))
            return
        with TarStream(self.path, first.inflated) as tar:  # the same file inflates to the same size
            try:
                yield from _objects(tar, entries, want)
            finally:
                self.inflated += tar.inflated

    def verify(self, expected_sha256: str | None = None) -> VerifyReport:
        """Check the whole archive: format, limits, every file's hash, nothing missing, extra or out of order."""
        report = dataclasses.replace(self._read_once().report)
        if expected_sha256 is not None:
            report.archive_sha_ok = file_sha256(self.path) == expected_sha256
        return report


def _objects(
    tar: TarStream, entries: Iterator[tuple[str, str]], want: Callable[[str], bool] | None
) -> Iterator[tuple[str, bytes]]:
    ended = False
    for member in tar.members():
        if ended or member.name == MANIFEST_MEMBER:
            if ended:
                raise ArchiveError(f"archive member {shown(member.name)} follows manifest.json (the last)")
            ended = True
            continue
        listed, expected = next(entries, ("", ""))
        if listed != member.name:  # a listed path is one the first read checked (parse_member_path)
            raise ArchiveError(f"archive member {shown(member.name)} is not listed in the manifest at its place")
        if member.size > MAX_OBJECT_BYTES:
            raise ArchiveError(f"archive member {shown(member.name)} has {member.size:,} bytes, above the limit")
        if want is not None and not want(member.name):
            continue
        data = tar.read(member)
        if hashlib.sha256(data).hexdigest() != expected:
            raise ArchiveError(f"checksum mismatch for {shown(member.name)}: the archive was modified")
        yield member.name, data
    if next(entries, None) is not None:
        raise ArchiveError("the manifest lists object files the archive does not hold")


def file_sha256(path: Path) -> str:
    """SHA-256 of a file, read in 1 MiB chunks."""
    sha = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            sha.update(chunk)
    return sha.hexdigest()
