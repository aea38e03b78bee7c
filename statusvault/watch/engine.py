"""The watcher: under a Lease, keep a watch's record going. A base (a normal backup) starts each chain; every
change the streams deliver goes into the chain's buffer, flushed as a segment every flush interval or size
limit. A new base is made every base interval, and whenever a stream lost changes (410 Gone)."""

from __future__ import annotations

import contextlib
import dataclasses
import datetime as dt
import logging
import queue
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any

from statusvault.archive.crypto import Key
from statusvault.archive.signing import Signer
from statusvault.backup import BackupEngine, BackupRequest
from statusvault.backup.selection import select_resources
from statusvault.controller.lease import Lease
from statusvault.errors import ArchiveError, StatusVaultError
from statusvault.kube.api import KubeApi
from statusvault.kube.discovery import Discovery
from statusvault.model import Selection
from statusvault.runtime.killpoints import kill_point
from statusvault.storage.base import ObjectStore, validate_backup_name
from statusvault.store.backups import BackupStore
from statusvault.watch.chains import read_head, why_not_continued
from statusvault.watch.metrics import WatchMetrics
from statusvault.watch.segments import parse_record_time
from statusvault.watch.streams import Change, Item, Position, Relisted, StreamSet, streams_for
from statusvault.watch.writer import ChainWriter, FencedError

log = logging.getLogger(__name__)


@dataclasses.dataclass(frozen=True, kw_only=True)
class WatchConfig:
    """One watch, as `watch run` asks for it."""

    name: str
    selection: Selection
    lease_namespace: str
    holder: str
    flush_interval: float = 10.0
    base_interval: float = 3600.0
    max_segment_bytes: int = 8 << 20  # uncompressed bytes of changes that force a flush
    lease_seconds: int = 30
    page_size: int = 500
    watch_timeout: int = 300
    signer: Signer | None = None  # signs the bases and every segment (archive/signing.py)


@dataclasses.dataclass
class _Pending:
    """A chain whose base is being made: it collects every change after its cut until the base is done."""

    writer: ChainWriter
    future: Future[Any]
    tainted: bool = False  # a stream lost changes after the cut: the base cannot be trusted with this buffer


def base_name(watch: str, now: dt.datetime) -> str:
    return validate_backup_name(f"{watch}-base-{now:%Y%m%d%H%M%S}")


class WatchEngine:
    def __init__(
        self,
        client: KubeApi,
        discover: Callable[[], Discovery],
        store: ObjectStore,
        config: WatchConfig,
        key: Key | None = None,
        metrics: WatchMetrics | None = None,
    ):
        self.client, self.discover, self.store, self.config, self.key = client, discover, store, config, key
        self.metrics = metrics or WatchMetrics()
        self.stop = threading.Event()

    def run(self) -> None:
        """Wait for the Lease, lead until it is lost or stop is set; again."""
        lease = Lease(self.client, self.config.lease_namespace, f"statusvault-watch-{self.config.name}",
                      self.config.holder, self.config.lease_seconds)  # fmt: skip
        while not self.stop.is_set():
            if not lease.acquire():
                self.stop.wait(self.config.lease_seconds / 3)
                continue
            log.info("watch %s: %s holds the Lease and writes", self.config.name, self.config.holder)
            try:
                self._lead(lease)
            except FencedError as e:
                log.error("watch %s: %s; standing down", self.config.name, e)
            finally:
                self.metrics.standing_by()
                lease.release()

    def _lead(self, lease: Lease) -> None:
        cfg = self.config
        discovery = self.discover()
        streams = streams_for(select_resources(discovery, cfg.selection), cfg.selection)
        items: queue.Queue[Item] = queue.Queue(maxsize=10000)
        head = read_head(self.store, cfg.name)
        self.metrics.leading(parse_record_time(str(head["until"])) if head and head.get("until") else None)
        resumed = self._resume(head, {s.key for s in streams})
        streamset = StreamSet(self.client, streams, items, cfg.watch_timeout)
        positions = streamset.start(resumed.positions if resumed else {})
        loop = _Loop(self, items, streamset, lease)
        loop.current = resumed
        try:
            loop.run(positions, discovery)
        finally:
            streamset.stop.set()

    def _resume(self, head: dict[str, Any] | None, streams: set[str]) -> ChainWriter | None:
        """A writer continuing the head's chain, when this one may (same streams, selection and key); else None,
        and the log says why a new base starts."""
        if head is None:
            why: str | None = "no chain to continue"
        elif head.get("closed"):
            why = f"chain {head.get('base')} was closed (a stream lost changes)"
        elif set(head.get("resourceVersions") or ()) != streams:
            why = "the watched collections changed"
        else:
            try:
                why = why_not_continued(self.store, head, self.config.selection.to_dict(), self.key, self.config.signer)
                if why is None:
                    writer = ChainWriter.resume(self.store, head, self.key, self.config.signer)
                    log.info("watch %s: continuing chain %s after segment %s", self.config.name, writer.base,
                             writer.seq)  # fmt: skip
                    return writer
            except ArchiveError as e:
                why = str(e)
        log.info("watch %s: %s: starting a new base", self.config.name, why)
        return None


class _Loop:
    """The leader's loop: one thread takes every queued item, stamps it, and writes it to the chains."""

    def __init__(self, engine: WatchEngine, items: queue.Queue[Item], streamset: StreamSet, lease: Lease):
        self.e, self.items, self.streamset, self.lease = engine, items, streamset, lease
        self.current: ChainWriter | None = None
        self.pending: _Pending | None = None
        self.pool = ThreadPoolExecutor(1, thread_name_prefix="base")
        self.next_flush = time.monotonic() + engine.config.flush_interval
        self.next_base = time.monotonic() + engine.config.base_interval
        self.last_base: dt.datetime | None = None
        engine.metrics.buffering(self.buffered)

    def buffered(self) -> int:
        """Changes taken and not yet stored (a base being made holds the same ones from its cut on)."""
        current, pending = self.current, self.pending
        writers = [w for w in (current, pending.writer if pending else None) if w is not None]
        return max((w.buffer.records for w in writers), default=0)

    def run(self, positions: dict[str, str], discovery: Discovery) -> None:
        self.discovery = discovery
        if self.current is None:
            self._start_base(positions)
        try:
            while not self.e.stop.is_set() and not self.lease.lost.is_set():
                if self.streamset.failed is not None:
                    raise self.streamset.failed
                with contextlib.suppress(queue.Empty):
                    self._take(self.items.get(timeout=0.2))
                self._tick()
            if not self.lease.lost.is_set() and self.current is not None:
                self._flush()  # a clean stop: nothing seen is left behind
        finally:
            self.pool.shutdown(wait=False, cancel_futures=True)
            for w in (self.current, self.pending.writer if self.pending else None):
                if w is not None:
                    w.discard()

    def _take(self, item: Item) -> None:
        now = dt.datetime.now(dt.UTC)
        writers = [w for w in (self.current, self.pending.writer if self.pending else None) if w is not None]
        if isinstance(item, Change):
            for w in writers:
                w.add(item, now)
        elif isinstance(item, Position):
            for w in writers:
                w.note(item.stream, item.rv)
        elif isinstance(item, Relisted):
            self._gone(item, now)

    def _gone(self, item: Relisted, now: dt.datetime) -> None:
        """Changes of one stream were lost: the current chain ends here, a new base starts one."""
        if self.current is not None:
            self._flush(closed=True)
            log.warning("watch %s: a stream lost changes (410 Gone); chain %s ends at %s; starting a new base",
                        self.e.config.name, self.current.base, now.isoformat())  # fmt: skip
            self.current.discard()
            self.current = None
        if self.pending is not None:
            self.pending.tainted = True
            self.pending.writer.note(item.stream, item.rv)
        else:
            positions = dict(self.streamset_positions())
            positions[item.stream] = item.rv
            self._start_base(positions)

    def streamset_positions(self) -> dict[str, str]:
        w = self.current or (self.pending.writer if self.pending else None)
        return dict(w.positions) if w else {}

    def _start_base(self, positions: dict[str, str]) -> None:
        cfg = self.e.config
        now = dt.datetime.now(dt.UTC)
        if self.last_base is not None:  # a base's name is its second: one a second (a 410 just after a base)
            now = max(now, self.last_base + dt.timedelta(seconds=1))
        self.last_base = now
        name = base_name(cfg.name, now)
        writer = ChainWriter(self.e.store, cfg.name, name, positions, self.e.key, cfg.signer)
        base = BackupRequest(store=self.e.store, name=name, selection=cfg.selection, schedule=f"watch:{cfg.name}",
                             key=self.e.key, signer=cfg.signer, page_size=cfg.page_size)  # fmt: skip
        future = self.pool.submit(BackupEngine(self.e.client, self.discovery, base).run)
        self.pending = _Pending(writer, future)
        self.next_base = time.monotonic() + cfg.base_interval
        log.info("watch %s: making base %s", cfg.name, name)

    def _tick(self) -> None:
        if self.pending is not None and self.pending.future.done():
            self._adopt(self.pending)
        now = time.monotonic()
        too_big = self.current is not None and self.current.buffer.raw_bytes >= self.e.config.max_segment_bytes
        if self.current is not None and (now >= self.next_flush or too_big):
            self._flush()
        if self.pending is None and now >= self.next_base:
            self._start_base(self.streamset_positions())

    def _adopt(self, pending: _Pending) -> None:
        """The base is done: the pending chain becomes the current one (unless the base failed or is tainted)."""
        self.pending = None
        error = pending.future.exception()
        if error is not None or pending.tainted:
            log.error("watch %s: base %s is not usable (%s); starting another",
                      self.e.config.name, pending.writer.base, error or "a stream lost changes meanwhile")  # fmt: skip
            pending.writer.discard()
            if error is None:  # complete, but no chain will name it: not left behind as a plain backup
                self._drop_base(pending.writer.base)
            self.e.stop.wait(min(30.0, self.e.config.flush_interval))
            self._start_base(pending.writer.positions)
            return
        result = pending.future.result()
        kill_point("watch.base-landed")
        start = dt.datetime.now(dt.UTC)  # the base's LIST has ended: restorable from now on
        pending.writer.open(result.manifest["archive"]["sha256"], start, self.e.config.selection.to_dict())
        if self.current is not None:
            kill_point("watch.next-chain-opened")
            self._flush()
            self.current.discard()
        self.current = pending.writer
        self.e.metrics.based()
        log.info("watch %s: base %s complete (%d objects); chain restorable from %s",
                 self.e.config.name, result.name, result.objects, start.isoformat())  # fmt: skip
        self._flush()

    def _drop_base(self, name: str) -> None:
        try:
            BackupStore(self.e.store).delete(name)
        except StatusVaultError as e:
            log.warning("watch %s: could not delete the unused base %s: %s", self.e.config.name, name, e)

    def _flush(self, closed: bool = False) -> None:
        assert self.current is not None
        if self.lease.lost.is_set():
            raise FencedError("the Lease was lost")
        now = dt.datetime.now(dt.UTC)
        manifest = self.current.flush(now, self.e.config.holder, closed)
        self.e.metrics.flushed(now, manifest)
        self.next_flush = time.monotonic() + self.e.config.flush_interval
