"""The watcher's Prometheus metrics: lag (now minus the moment up to which every change is flushed), the changes
held unstored, segments, bytes, records and bases written. Served over HTTP and/or written to a textfile at each
flush."""

from __future__ import annotations

import datetime as dt
import logging
import math
import os
import time
from collections.abc import Callable
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Gauge, start_http_server, write_to_textfile

log = logging.getLogger(__name__)


class WatchMetrics:
    """Lag is the writer's to tell: a standby (one not holding the Lease) reports NaN, which alerts ignore, and
    leader 0; a new writer's lag starts from the head it found, so the time without a writer counts."""

    def __init__(self, watch: str = "", textfile: str | None = None):
        self.registry = CollectorRegistry()
        self.textfile = textfile
        self._until = time.time()
        self._leading = False
        labels = ["watch"]
        lag = Gauge("statusvault_watch_lag_seconds", "Seconds since the moment up to which every change is "
                    "flushed to the store (the recovery point); NaN on a standby.", labels,
                    registry=self.registry)  # fmt: skip
        lag.labels(watch).set_function(lambda: time.time() - self._until if self._leading else math.nan)
        self._buffered: Callable[[], int] = lambda: 0
        buffered = Gauge("statusvault_watch_buffered_records", "Changes taken but not yet stored: a kill -9 leaves "
                         "them to the next writer, which takes them again from the last stored position; NaN on a "
                         "standby.", labels, registry=self.registry)  # fmt: skip
        buffered.labels(watch).set_function(lambda: float(self._buffered()) if self._leading else math.nan)
        leader = Gauge("statusvault_watch_leader", "1 while this replica holds the Lease and writes.", labels,
                       registry=self.registry)  # fmt: skip
        leader.labels(watch).set_function(lambda: float(self._leading))

        # Labelled at once, so that every series is there (at 0) before the first write, on a standby too.
        def counter(name: str, text: str) -> Any:
            return Counter(f"statusvault_watch_{name}", text, labels, registry=self.registry).labels(watch)

        self.segments = counter("segments", "Segments written.")
        self.bytes = counter("bytes", "Segment bytes stored.")
        self.records = counter("records", "Changes written.")
        self.bases = counter("bases", "Bases completed.")

    def serve(self, port: int, address: str = "127.0.0.1") -> None:
        start_http_server(port, addr=address, registry=self.registry)

    def leading(self, until: dt.datetime | None) -> None:
        """This replica writes from now on; the record reaches `until` (None: nothing is stored yet)."""
        self._until = until.timestamp() if until is not None else time.time()
        self._leading = True

    def buffering(self, count: Callable[[], int]) -> None:
        """`count()` says how many changes the writer holds unstored (read at each scrape)."""
        self._buffered = count

    def standing_by(self) -> None:
        self._leading = False

    def based(self) -> None:
        self.bases.inc()

    def flushed(self, until: dt.datetime, manifest: dict[str, Any] | None) -> None:
        self._until = until.timestamp()
        if manifest is not None:
            self.segments.inc()
            self.bytes.inc(manifest["size"])
            self.records.inc(manifest["records"])
        if self.textfile:
            try:
                write_to_textfile(os.fspath(self.textfile), self.registry)
            except OSError as e:
                log.warning("cannot write metrics to %s: %s", self.textfile, e)
