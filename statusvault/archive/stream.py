"""Archive v1's tar.gz read as a stream, with every size bounded.

gzip is inflated 64 KiB at a time and its total output is capped; tar headers (ustar, at most one PAX
extended header per member) are parsed here rather than by tarfile, which reads any header whole, follows
chains of headers recursively and yields links, devices and directories. Only regular files come out."""

from __future__ import annotations

import re
import zlib
from collections.abc import Iterator
from pathlib import Path
from types import TracebackType
from typing import NamedTuple

from statusvault.archive.format import shown
from statusvault.errors import ArchiveError

BLOCK = 512
STEP = 1 << 16
ZERO = bytes(BLOCK)
MAX_PAX_BYTES = 8 << 10  # a PAX extended header: v1 writes one only for a long or non-ASCII path
REGULAR = (b"0", b"\0")
_NOT_REGULAR = {
    b"1": "hard link",
    b"2": "symbolic link",
    b"3": "character device",
    b"4": "block device",
    b"5": "directory",
    b"6": "FIFO",
    b"7": "contiguous file",
    b"g": "global extended header",
    b"x": "second extended header",
    b"K": "GNU long link name",
    b"L": "GNU long name",
    b"S": "GNU sparse file",
}
_OCTAL = re.compile(rb"[0-7]+")


class Member(NamedTuple):  # a tuple: made once per member, 10,000s per archive
    name: str
    size: int
    mtime: int = 0  # seconds since the epoch, as its header says (0: unreadable)


def _mtime(block: bytes) -> int:
    """A ustar header's modification time (octal, bytes 136-148); 0 when it is not a number."""
    try:
        return int(block[136:148].strip(b"\0 ") or b"0", 8)
    except ValueError:
        return 0


class _Inflater:
    """A gzip file's decompressed bytes, read in bounded steps; more than `budget` in all is refused."""

    def __init__(self, path: Path, budget: int, what: str = "a statusvault archive"):
        self._file = open(path, "rb")  # noqa: SIM115 - closed by close()
        self._label = path.name
        self._what = what
        self._budget = budget
        self._z = zlib.decompressobj(16 + zlib.MAX_WBITS)
        self._buf, self._pos = b"", 0
        self.total = 0  # bytes inflated so far

    def read(self, n: int) -> bytes:
        """Exactly n bytes; a stream that ends first is cut short."""
        end = self._pos + n
        if end <= len(self._buf):  # most reads: a header or a member inside the chunk inflated last
            piece = self._buf[self._pos : end]
            self._pos = end
            return piece
        parts = []
        while n:
            if self._pos == len(self._buf):
                self._buf, self._pos = self._inflate(), 0
            piece = self._buf[self._pos : self._pos + n]
            self._pos += len(piece)
            n -= len(piece)
            parts.append(piece)
        return b"".join(parts)

    def skip(self, n: int) -> None:
        while n:
            n -= len(self.read(min(n, STEP)))

    def _inflate(self) -> bytes:
        while not self._z.eof:
            data = self._z.unconsumed_tail or self._file.read(STEP)
            if not data:
                break
            try:
                out = self._z.decompress(data, STEP)
            except zlib.error as e:
                raise ArchiveError(f"{self._label} is not {self._what} (tar.gz): {e}") from None
            if out:
                self.total += len(out)
                if self.total > self._budget:
                    raise ArchiveError(
                        f"archive {self._label} inflates to more than {self._budget:,} bytes, "
                        "beyond what its manifest's uncompressedBytes or the format's limits allow"
                    )
                return out
        raise ArchiveError(f"archive {self._label} is cut short (its gzip stream ends inside the tar stream)")

    def close(self) -> None:
        self._file.close()


class TarStream:
    """The regular files of a tar.gz, in order; the caller reads a member's data or leaves it to be skipped."""

    def __init__(self, path: Path, budget: int, what: str = "a statusvault archive"):
        self.label = path.name
        self._z = _Inflater(path, budget, what)
        self._left = 0  # data (and padding) of the current member not yet read

    def __enter__(self) -> TarStream:
        return self

    def __exit__(self, *exc: type[BaseException] | BaseException | TracebackType | None) -> None:
        self._z.close()

    @property
    def inflated(self) -> int:
        return self._z.total

    def members(self) -> Iterator[Member]:
        while True:
            self._z.skip(self._left)
            block = self._z.read(BLOCK)
            if block == ZERO:
                return  # the end-of-archive marker; anything after it is not part of the archive
            name, size, kind = _header(block, self.label)
            mtime = _mtime(block)
            if kind == b"x":
                name, size, kind = self._extended(size)
            if kind not in REGULAR:
                what = _NOT_REGULAR.get(kind, f"member of type {shown(kind)}")
                raise ArchiveError(f"archive member {shown(name)} is a {what}, not a regular file")
            self._left = size + (-size % BLOCK)
            yield Member(name, size, mtime)

    def read(self, member: Member) -> bytes:
        """The data of the member just yielded (the caller has checked its size)."""
        padded = self._z.read(self._left)  # with its padding: one read per member
        self._left = 0
        return padded[: member.size]

    def chunks(self, member: Member) -> Iterator[bytes]:
        """The data of the member just yielded, in pieces of at most 64 KiB."""
        left = member.size
        while left:
            piece = self._z.read(min(left, STEP))
            self._left -= len(piece)
            left -= len(piece)
            yield piece

    def _extended(self, size: int) -> tuple[str, int, bytes]:
        """A PAX extended header, then the header it applies to, merged."""
        if size > MAX_PAX_BYTES:
            raise ArchiveError(f"archive {self.label} has a {size:,}-byte extended header (limit {MAX_PAX_BYTES:,})")
        records = _pax_records(self._z.read(size), self.label)
        self._z.skip(-size % BLOCK)
        block = self._z.read(BLOCK)
        if block == ZERO:
            raise ArchiveError(f"archive {self.label} ends after an extended header")
        name, size, kind = _header(block, self.label)
        if "path" in records:
            name = _text(records["path"], self.label)
        if "size" in records:
            if not records["size"].isdigit():
                raise ArchiveError(f"archive member {shown(name)} has an invalid size in its extended header")
            size = int(records["size"])
        if any(k.startswith("GNU.sparse") for k in records):
            kind = b"S"
        return name, size, kind


def _header(block: bytes, label: str) -> tuple[str, int, bytes]:
    """(name, size, type flag) of a ustar header block, after checking its checksum and fields."""
    stored = _octal(block[148:156])
    unsigned = byte_sum(block) - sum(block[148:156]) + 8 * 32  # the checksum field counted as spaces
    if stored != unsigned and stored != _signed_sum(block):
        raise ArchiveError(f"archive {label} has a damaged tar header (not a tar stream, or modified)")
    magic = block[257:263]
    if magic not in (b"ustar\x00", b"ustar "):
        raise ArchiveError(f"archive {label} has a tar header in an unknown format (magic {shown(magic)})")
    name = block[:100].split(b"\0", 1)[0]
    prefix = block[345:500].split(b"\0", 1)[0] if magic == b"ustar\x00" else b""
    text = _text(prefix + b"/" + name if prefix else name, label)
    size = _octal(block[124:136])
    if size is None:
        raise ArchiveError(f"archive member {shown(text)} has an invalid size field")
    return text, size, block[156:157]


def byte_sum(data: bytes | bytearray) -> int:
    """The sum of the bytes, exactly: Adler-32's first half is 1 + that sum modulo 65,521, which 256 bytes
    (at most 65,280) never reach. A C loop per 256 bytes instead of a Python one per byte (planning reads
    100,000 headers)."""
    total = 0
    for i in range(0, len(data), 256):
        total += (zlib.adler32(data[i : i + 256]) & 0xFFFF) - 1
    return total


def _signed_sum(block: bytes) -> int:
    """The checksum some old tar writers computed, with bytes taken as signed."""
    return sum(b - 256 if b > 127 else b for b in block[:148] + block[156:]) + 8 * 32


def _octal(field: bytes) -> int | None:
    digits = field.split(b"\0", 1)[0].strip(b" ")
    if not digits:
        return 0
    return int(digits, 8) if _OCTAL.fullmatch(digits) else None


def _text(raw: bytes, label: str) -> str:
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError:
        raise ArchiveError(f"archive {label} has a member name that is not UTF-8: {shown(raw)}") from None


def _pax_records(data: bytes, label: str) -> dict[str, bytes]:
    """`<length> <keyword>=<value>\\n` records (POSIX pax); a malformed one refuses the archive."""
    records: dict[str, bytes] = {}
    pos = 0
    while pos < len(data):
        space = data.find(b" ", pos, pos + 20)
        length = int(data[pos:space]) if space > pos and data[pos:space].isdigit() else 0
        end = pos + length
        keyword, eq, value = data[space + 1 : end - 1].partition(b"=")
        if length <= space - pos or end > len(data) or data[end - 1 : end] != b"\n" or not eq:
            raise ArchiveError(f"archive {label} has a malformed extended header")
        records[_text(keyword, label)] = value
        pos = end
    return records
