"""The embedded manifest's bytes: its head parsed, its `files` object found and then walked in chunks.

Neither key order nor whitespace is part of the format: `files` may come anywhere in the top-level object,
and any JSON layout parses the same. Only the head (everything but `files`) is parsed whole, and it is
bounded (MAX_HEAD_BYTES); `files` is read entry by entry, so a reader never holds every path at once."""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import IO, Any

import orjson

from statusvault.archive.format import MAX_HEAD_BYTES, MAX_OBJECTS, check_json_size, json_document
from statusvault.errors import ArchiveError

READ = 1 << 16
MAX_ENTRY = 32 << 10  # one "path": "sha256" entry, whitespace and escapes included
_TOKEN = re.compile(rb'[ \t\n\r]+|"[^"\\]*(?:\\.[^"\\]*)*"|[{}\[\],:]|[^ \t\n\r"{}\[\],:]+')
_ENTRY = re.compile(
    rb'[ \t\n\r]*"([^"\\\x00-\x1f]*(?:\\.[^"\\\x00-\x1f]*)*)"[ \t\n\r]*:[ \t\n\r]*"([0-9a-f]{64})"[ \t\n\r]*([,}])'
)
_CLOSE = re.compile(rb"[ \t\n\r]*\}")


class FileList:
    """The inside of the `files` object of a spooled manifest: (path, sha256) pairs in their order."""

    def __init__(self, spool: IO[bytes], start: int, end: int, label: str):
        self._spool, self._start, self._label = spool, start, label
        self.end = end  # the offset of its closing brace

    @classmethod
    def measure(cls, spool: IO[bytes], start: int, label: str) -> FileList:
        """Walk the entries from `start` once, checking each one's form, to find where the object ends. Their paths
        are decoded (and so checked) by entries(), which every reader walks to the end before it trusts the list."""
        ends: list[int] = []
        count = sum(1 for _ in _walk(spool, start, spool.seek(0, 2), label, ends))
        if count > MAX_OBJECTS:
            raise ArchiveError(f"manifest.json in {label} lists more than {MAX_OBJECTS:,} files (the limit)")
        return cls(spool, start, ends[0], label)

    def entries(self) -> Iterator[tuple[str, str]]:
        label = self._label
        return ((_path(m[1], label), m[2].decode()) for m in _walk(self._spool, self._start, self.end + 1, label, []))


def _walk(spool: IO[bytes], offset: int, stop: int, label: str, ends: list[int]) -> Iterator[re.Match[bytes]]:
    """Entries from `offset` as matches of _ENTRY (path, sha256), reading no further than `stop`; appends the
    closing brace's offset to `ends`."""
    buf, pos, count = b"", 0, 0
    while True:
        close = _CLOSE.match(buf, pos) if not count else None
        m = close or _ENTRY.match(buf, pos)
        if m is None:
            spool.seek(offset)
            chunk = spool.read(min(READ, stop - offset))
            if not chunk or len(buf) - pos > MAX_ENTRY:
                raise ArchiveError(f"manifest.json in {label} has a malformed file list")
            buf, pos, offset = buf[pos:] + chunk, 0, offset + len(chunk)
            continue
        if close is None:
            count += 1
            yield m
        if close is not None or m.group(3) == b"}":
            ends.append(offset - len(buf) + m.end() - 1)
            return
        pos = m.end()


def _path(raw: bytes, label: str) -> str:
    try:
        path: str = orjson.loads(b'"' + raw + b'"') if b"\\" in raw else raw.decode("utf-8")
    except (orjson.JSONDecodeError, UnicodeDecodeError):
        raise ArchiveError(f"manifest.json in {label} has a malformed file list") from None
    return path


class _Tokens:
    """JSON tokens of the spooled manifest from an offset (whitespace skipped), read 64 KiB at a time."""

    def __init__(self, spool: IO[bytes], label: str):
        self.spool, self.label = spool, label
        self.size = spool.seek(0, 2)
        self.buf, self.pos, self.base = b"", 0, 0  # buf holds spool[base : base + len(buf)]

    @property
    def offset(self) -> int:
        return self.base + self.pos

    def seek(self, offset: int) -> None:
        self.buf, self.pos, self.base = b"", 0, offset

    def next(self) -> bytes:
        """The next token; b"" at the end of the manifest."""
        while True:
            m = _TOKEN.match(self.buf, self.pos)
            if (m is None or m.end() == len(self.buf)) and self._more():
                continue  # a token may go on in the next chunk
            if m is None:
                if self.pos < len(self.buf):
                    raise ArchiveError(f"manifest.json in {self.label} is not valid JSON")
                return b""
            self.pos = m.end()
            if m.group()[0] not in b" \t\n\r":
                return m.group()

    def _more(self) -> bool:
        if len(self.buf) - self.pos > MAX_HEAD_BYTES:
            raise ArchiveError(f"manifest.json in {self.label} is larger than the limit ({MAX_HEAD_BYTES:,} bytes)")
        self.spool.seek(self.base + len(self.buf))
        chunk = self.spool.read(max(READ, len(self.buf) - self.pos))  # doubling: a long token costs O(n)
        if not chunk:
            return False
        self.base, self.buf, self.pos = self.base + self.pos, self.buf[self.pos :] + chunk, 0
        return True


def load(spool: IO[bytes], label: str) -> tuple[dict[str, Any], FileList]:
    """The manifest's head (every member but `files`, parsed) and its file list (found, not loaded)."""
    tokens = _Tokens(spool, label)
    if tokens.next() != b"{":
        raise ArchiveError(f"manifest.json in {label} is not a JSON object")
    pieces: list[tuple[int, int]] = []  # spans of the head's `"key": value` members
    files: FileList | None = None
    tok = tokens.next()
    while tok != b"}":
        start = tokens.offset - len(tok)
        if _key(tok, tokens) == "files":
            if files is not None:
                raise ArchiveError(f"manifest.json in {label} has two file lists")
            files = _files(tokens)
        else:
            _skip_value(tokens, MAX_HEAD_BYTES - sum(e - s for s, e in pieces) - (tokens.offset - start))
            pieces.append((start, tokens.offset))
        tok = tokens.next()
        if tok == b",":
            tok = tokens.next()
        elif tok != b"}":
            raise ArchiveError(f"manifest.json in {label} is not valid JSON")
    if tokens.next() != b"" or files is None:
        raise ArchiveError(f"manifest.json in {label} has {'no file list' if files is None else 'trailing data'}")
    return _head(spool, pieces, label), files


def _key(tok: bytes, tokens: _Tokens) -> str:
    try:
        key = orjson.loads(tok) if tok.startswith(b'"') else None
    except orjson.JSONDecodeError:
        key = None
    if not isinstance(key, str) or tokens.next() != b":":
        raise ArchiveError(f"manifest.json in {tokens.label} is not valid JSON")
    return key


def _files(tokens: _Tokens) -> FileList:
    if tokens.next() != b"{":
        raise ArchiveError(f"manifest.json in {tokens.label} has a file list that is not an object")
    files = FileList.measure(tokens.spool, tokens.offset, tokens.label)
    tokens.seek(files.end + 1)
    return files


def _skip_value(tokens: _Tokens, budget: int) -> None:
    """Pass over one value (nested objects and arrays included), refusing one longer than `budget` bytes."""
    start, depth = tokens.offset, 0
    while True:
        tok = tokens.next()
        if tok in (b"{", b"["):
            depth += 1
        elif tok in (b"}", b"]"):
            depth -= 1
        elif tok in (b"", b",", b":") and depth == 0:
            raise ArchiveError(f"manifest.json in {tokens.label} is not valid JSON")
        if tokens.offset - start > budget:
            raise ArchiveError(
                f"manifest.json in {tokens.label} has a head larger than the limit ({MAX_HEAD_BYTES:,} bytes)"
            )
        if depth <= 0:
            if depth < 0:
                raise ArchiveError(f"manifest.json in {tokens.label} is not valid JSON")
            return


def _head(spool: IO[bytes], pieces: list[tuple[int, int]], label: str) -> dict[str, Any]:
    parts = []
    for start, end in pieces:
        spool.seek(start)
        parts.append(spool.read(end - start))
    data = b"{" + b",".join(parts) + b"}"
    check_json_size(f"manifest.json in {label}", data)
    head: dict[str, Any] = json_document(f"manifest.json in {label}", data)
    return head
