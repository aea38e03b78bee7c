"""Run several producers at once and read their records back in a fixed order, through disk spools.

A backup lists several resource types (or namespaces) at once, but the archive must hold them in archive
order. Each producer writes its records to a spool of its own (a temp file, so memory stays bounded); the
consumer reads the spools one after another, each while it is still being written."""

from __future__ import annotations

import os
import struct
import tempfile
import threading
import weakref
from collections.abc import Callable, Generator, Iterable, Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import IO

Record = tuple[str, bytes, int]  # (name, data, flags)
_HEAD = struct.Struct("<IIB")  # name length, data length, flags


class Cancelled(Exception):
    """Raised inside a producer once the consumer has stopped reading."""


class Spool:
    """One producer's records on a temp file: appended by the producer, read by the consumer as they come."""

    def __init__(self, cancelled: threading.Event) -> None:
        self._file: IO[bytes] = tempfile.TemporaryFile(prefix="statusvault-list-")  # noqa: SIM115 - close()
        self._fd = self._file.fileno()
        self._cond = threading.Condition()
        self._written = 0
        self._done = False
        self._error: BaseException | None = None
        self._cancelled = cancelled

    def check(self) -> None:
        """Raise Cancelled once the consumer has stopped reading (for a producer that waits on something)."""
        if self._cancelled.is_set():
            raise Cancelled

    def put_many(self, records: list[Record]) -> None:
        """Append records (a LIST page's) with one write, and wake the reader once."""
        self.check()
        parts: list[bytes] = []
        for name, data, flags in records:
            raw = name.encode()
            parts += (_HEAD.pack(len(raw), len(data), flags), raw, data)
        blob = b"".join(parts)
        os.pwrite(self._fd, blob, self._written)
        with self._cond:
            self._written += len(blob)
            self._cond.notify_all()

    def finish(self, error: BaseException | None = None) -> None:
        with self._cond:
            self._done, self._error = True, error
            self._cond.notify_all()

    def records(self) -> Iterator[Record]:
        """Every record in the order it was put; raises the producer's error at the point it stopped."""
        offset = 0
        while True:
            with self._cond:
                while offset >= self._written and not self._done:
                    self._cond.wait()
                written, done, error = self._written, self._done, self._error
            while offset < written:
                offset += yield from self._read(offset, written)
            if done and offset >= written:
                if error is not None:
                    raise error
                return

    def _read(self, offset: int, written: int) -> Generator[Record, None, int]:
        """The whole records in up to READ_CHUNK bytes from offset (at least one); returns the bytes read."""
        chunk = os.pread(self._fd, min(written - offset, READ_CHUNK), offset)
        name_len, data_len, _ = _HEAD.unpack_from(chunk)
        if _HEAD.size + name_len + data_len > len(chunk):  # one record larger than READ_CHUNK
            chunk = os.pread(self._fd, _HEAD.size + name_len + data_len, offset)
        pos = 0
        while pos + _HEAD.size <= len(chunk):
            name_len, data_len, flags = _HEAD.unpack_from(chunk, pos)
            start = pos + _HEAD.size
            end = start + name_len + data_len
            if end > len(chunk):
                break
            yield chunk[start : start + name_len].decode(), chunk[start + name_len : end], flags
            pos = end
        return pos

    def close(self) -> None:
        self._file.close()


READ_CHUNK = 1 << 20


class InOrder:
    """Run the producers `concurrency` at a time (in their order); iterating yields each one's records in that
    order (read each to its end before the next). Use it as a context manager: leaving the block stops the
    producers still running (at their next record) and waits for them.

    At most `concurrency` producers run ahead of the one being read, so the spools on disk stay bounded by
    what those produce. Nothing here joins a thread from a generator's finalizer: a generator abandoned in a
    reference cycle is finalized by the garbage collector at any point of any thread, and a join there can
    deadlock on the interpreter's own thread locks. An instance dropped without `close` only tells its
    producers to stop."""

    def __init__(self, producers: Iterable[Callable[[Spool], None]], concurrency: int) -> None:
        self._cancelled = threading.Event()
        self._todo = iter(producers)
        self._window: list[Spool] = []
        self._pool = ThreadPoolExecutor(max(1, concurrency), thread_name_prefix="list")
        weakref.finalize(self, self._cancelled.set)
        try:
            for _ in range(max(1, concurrency)):
                self._start_next()
        except BaseException:  # no spool (disk full): the producers already running stop, and are waited for
            self.close()
            raise

    def __enter__(self) -> InOrder:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __iter__(self) -> Iterator[Iterator[Record]]:
        while self._window:
            yield self._window[0].records()
            self._window.pop(0).close()
            self._start_next()

    def close(self) -> None:
        """Stop the producers still running, wait for them, and drop the spools not read."""
        self._cancelled.set()
        self._pool.shutdown(wait=True, cancel_futures=True)
        for spool in self._window:  # only once no producer can write to them any more
            spool.close()
        self._window.clear()

    def _start_next(self) -> None:
        produce = next(self._todo, None)
        if produce is not None:
            self._window.append(Spool(self._cancelled))
            self._pool.submit(_run, produce, self._window[-1])


def _run(produce: Callable[[Spool], None], spool: Spool) -> None:
    try:
        produce(spool)
    except Cancelled:
        spool.finish()
    except BaseException as e:  # handed to the consumer, raised where it reads
        spool.finish(e)
    else:
        spool.finish()
