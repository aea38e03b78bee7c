"""The first read of an archive: every member held to the format's rules and limits, the manifest spooled
and parsed, then what was read compared with what the manifest lists, in its order.

One pass gives both verify's report and a restore's checks; later reads only re-check each file's hash."""

from __future__ import annotations

import array
import dataclasses
import hashlib
import itertools
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import IO, Any

from statusvault.archive.format import (
    MANIFEST_MEMBER,
    MAX_MANIFEST_BYTES,
    MAX_OBJECT_BYTES,
    MAX_OBJECTS,
    MAX_UNCOMPRESSED_BYTES,
    check_manifest,
    check_member_type,
    checked_object,
    kind_digest,
    parse_member_path,
    shown,
    uncompressed_bound,
)
from statusvault.archive.manifest import FileList, load
from statusvault.archive.stream import Member, TarStream
from statusvault.errors import ArchiveError
from statusvault.model import ObjectKey

MAX_PROBLEMS = 1000  # names a report lists per kind of problem; more ends the check


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
    signed_by: str = ""  # the verification key its signature was checked with ("": none was given)
    unlocked: list[str] = dataclasses.field(default_factory=list)  # files without the Object Lock the others hold

    @property
    def ok(self) -> bool:
        return (
            not (self.mismatched or self.missing or self.unexpected or self.misordered or self.error or self.unlocked)
            and self.archive_sha_ok is not False
        )


@dataclasses.dataclass
class FirstRead:
    report: VerifyReport
    inflated: int = 0  # what the stream inflated to: a later read of the same file inflates no more
    head: dict[str, Any] = dataclasses.field(default_factory=dict)  # the manifest without `files`
    files: FileList | None = None
    problem: str = ""  # why a restore refuses the archive, "" when it does not
    # (path, bytes) of every object member in archive order, when the read was asked to keep them and they fit
    members: list[tuple[str, bytes]] | None = None

    def checked(self) -> FileList:
        """The file list of an archive that passed every check; ArchiveError naming the first problem."""
        if self.files is None or self.problem:
            raise ArchiveError(self.problem or self.report.error)
        return self.files


@dataclasses.dataclass
class _Sizes:
    objects: int = 0
    data: int = 0  # bytes of object files
    paths: int = 0  # bytes of member paths: every one is listed in the manifest, so they cannot exceed it


Visit = Callable[[str, ObjectKey, dict[str, Any]], None]  # (member path, its key, the parsed object)


def first_read(path: Path, budget: int, visit: Visit | None = None, keep: int = 0) -> FirstRead:
    """Read the archive once; any problem ends up in the report (and, as one line, in `problem`).

    visit(path, key, object) gets each object member once its own checks passed, while the read goes on (a restore
    plans in the same pass); what it saw may be used only if the whole read then shows no problem. keep: the
    object members are kept in `members` when their bytes come to at most this (a restore's waves then need
    not read the archive again)."""
    result = FirstRead(VerifyReport())
    try:
        with tempfile.TemporaryFile() as seen:  # a line per member, in order (`_fields`)
            spool, sizes = _scan(path, budget, seen, result, visit, keep)
            try:
                result.head, files = load(spool, path.name)
                check_manifest(result.head)
                _check_data_size(result.head, sizes)
                _compare(seen, files, result.head["resources"], result)
            except BaseException:
                spool.close()
                raise
            result.files = files
    except ArchiveError as e:
        result.report.error = str(e)
        result.problem = result.problem or str(e)  # a restore names the first problem, not the last straw
    return result


def _scan(
    path: Path,
    budget: int,
    seen: IO[bytes],
    result: FirstRead,
    visit: Visit | None,
    keep: int,
) -> tuple[IO[bytes], _Sizes]:
    """Pass over every member; return manifest.json spooled to a temp file. The object members go to
    `result.members` while their bytes come to at most `keep` (then none do)."""
    sizes, names = _Sizes(), array.array("q")
    kept: list[tuple[str, bytes]] | None = [] if keep else None
    manifest: IO[bytes] | None = None
    try:
        with TarStream(path, budget) as tar:
            for member in tar.members():
                result.inflated = tar.inflated
                if manifest is not None:
                    raise ArchiveError(f"archive member {shown(member.name)} follows manifest.json (the last)")
                if member.name == MANIFEST_MEMBER:
                    manifest = _spool(tar, member)
                else:
                    key, obj, data = _record(tar, member, sizes, seen)
                    names.append(hash(member.name))
                    if kept is not None and sizes.data > keep:
                        kept = None  # more than may be kept: none is
                    if kept is not None:
                        kept.append((member.name, data))
                    if visit is not None:
                        visit(member.name, key, obj)
            result.inflated = tar.inflated
        result.members = kept
        if manifest is None:
            raise ArchiveError(f"archive {path.name} has no manifest.json: the backup is incomplete")
        _check_unique(names, seen)
    except BaseException:
        if manifest is not None:
            manifest.close()
        raise
    return manifest, sizes


def _record(tar: TarStream, member: Member, sizes: _Sizes, seen: IO[bytes]) -> tuple[ObjectKey, dict[str, Any], bytes]:
    """One object member checked and its line written for the comparison with the manifest; its object and bytes."""
    key = parse_member_path(member.name)
    if member.size > MAX_OBJECT_BYTES:
        raise ArchiveError(
            f"archive member {shown(member.name)} has {member.size:,} bytes, above the limit for an object"
        )
    sizes.objects += 1
    sizes.data += member.size
    sizes.paths += len(member.name)
    if sizes.objects > MAX_OBJECTS or sizes.data > MAX_UNCOMPRESSED_BYTES or sizes.paths > MAX_MANIFEST_BYTES:
        raise ArchiveError(
            f"archive {tar.label} holds more object files than the limits allow, at {shown(member.name)}"
        )
    data = tar.read(member)
    obj = checked_object(member.name, key, data)
    fields = (member.name, hashlib.sha256(data).hexdigest(), kind_digest(obj["kind"]), key.qualified, key.namespace)
    seen.write("\t".join(fields).encode() + b"\n")  # a checked path holds no control character
    return key, obj, data


def _check_unique(names: array.array[int], seen: IO[bytes]) -> None:
    """No member path twice, found from 8-byte fingerprints (1M paths in 8 MB), sorted once at the end."""
    twice = _repeated(names)
    met: set[str] = set()  # paths whose fingerprint repeats: a repeated path, or (rarely) a collision
    seen.seek(0)
    for line in seen if twice else ():
        path = _fields(line)[0]
        if hash(path) in twice:
            if path in met:
                raise ArchiveError(f"archive member {shown(path)} appears twice")
            met.add(path)
    seen.seek(0, 2)


FINGERPRINT_BUCKETS = 64


def _repeated(names: array.array[int]) -> set[int]:
    """The fingerprints met more than once. Sorted a bucket at a time: a sorted list holds a Python int per path
    (~40 bytes), 40 MB at a million paths at once; a bucket's is 1/64 of that."""
    buckets = [array.array("q") for _ in range(FINGERPRINT_BUCKETS)]
    for h in names:
        buckets[h % FINGERPRINT_BUCKETS].append(h)
    twice: set[int] = set()
    for i, bucket in enumerate(buckets):
        ordered = sorted(bucket)
        buckets[i] = array.array("q")
        twice.update(a for a, b in itertools.pairwise(ordered) if a == b)
    return twice


def _spool(tar: TarStream, member: Member) -> IO[bytes]:
    if member.size > MAX_MANIFEST_BYTES:
        raise ArchiveError(f"manifest.json in {tar.label} has {member.size:,} bytes, above the limit")
    spool = tempfile.TemporaryFile()  # noqa: SIM115 - lives as long as the reader
    for chunk in tar.chunks(member):
        spool.write(chunk)
    return spool


def _check_data_size(head: dict[str, Any], sizes: _Sizes) -> None:
    """The object files hold no more bytes than the manifest's uncompressedBytes says."""
    bound = uncompressed_bound(head)
    if bound is not None and sizes.data > bound:
        raise ArchiveError(
            f"the archive's object files hold {sizes.data:,} bytes, "
            f"more than its manifest's uncompressedBytes ({bound:,})"
        )


def _compare(seen: IO[bytes], files: FileList, resources: dict[str, Any], result: FirstRead) -> None:
    """Walk the members read and the manifest's list in step; fill the report and the first problem."""
    entries = files.entries()
    ahead: dict[str, str] = {}  # entries read past while looking for a member: only in a damaged archive
    report = result.report
    seen.seek(0)
    for line in seen:
        path, sha, kind, qualified, namespace = _fields(line)
        check_member_type(path, qualified, bool(namespace), kind, resources)
        expected = ahead.pop(path, None)
        if expected is not None:
            result.problem = result.problem or _misplaced(path)
            _note(report.misordered, path)
        while expected is None and (entry := next(entries, None)) is not None:
            if entry[0] == path:
                expected = entry[1]
            else:
                ahead[entry[0]] = entry[1]
                if len(ahead) > MAX_PROBLEMS:
                    raise ArchiveError(f"more than {MAX_PROBLEMS:,} of the manifest's files are not at their place")
        if expected is None:
            result.problem = result.problem or _misplaced(path)
            _note(report.unexpected, path)
            continue
        report.files_checked += 1
        if sha != expected:
            result.problem = result.problem or f"checksum mismatch for {shown(path)}: the archive was modified"
            _note(report.mismatched, path)
    for path in itertools.chain(ahead, (p for p, _ in entries)):
        result.problem = result.problem or f"the manifest lists object files the archive does not hold: {shown(path)}"
        _note(report.missing, path)
    report.missing.sort()


def _fields(line: bytes) -> list[str]:
    """(path, sha256, kind digest, resource, namespace) of a line `_record` wrote."""
    return line[:-1].decode().split("\t")


def _misplaced(path: str) -> str:
    return f"archive member {shown(path)} is not listed in the manifest at its place"


def _note(names: list[str], path: str) -> None:
    if len(names) >= MAX_PROBLEMS:
        raise ArchiveError(f"more than {MAX_PROBLEMS:,} members are damaged, missing or out of place")
    names.append(path)
