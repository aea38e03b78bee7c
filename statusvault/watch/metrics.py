"""The watcher's Prometheus metrics: lag (now minus the moment up to which every change is flushed), segments,
bytes, records and bases written. Served over HTTP and/or written to a textfile at each flush."""

from __future__ import annotations

import datetime as dt
import logging
import os
import time
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Gauge, start_http_server, write_to_textfile

log = logging.getLogger(__name__)


class WatchMetrics:
    def __init__(self, watch: str = "", textfile: str | None = None):
        self.registry = CollectorRegistry()
        self.textfile = textfile
        self._until = time.time()
        self._last_change = 0.0
        labels = ["watch"]
        lag = Gauge("statusvault_watch_lag_seconds", "Seconds since the moment up to which every change is "
                    "flushed to the store (the recovery point).", labels, registry=self.registry)  # fmt: skip
        lag.labels(watch).set_function(lambda: time.time() - self._until)
        self.segments = Counter("statusvault_watch_segments", "Segments written.", labels, registry=self.registry)
        self.bytes = Counter("statusvault_watch_bytes", "Segment bytes stored.", labels, registry=self.registry)
        self.records = Counter("statusvault_watch_records", "Changes written.", labels, registry=self.registry)
        self.bases = Counter("statusvault_watch_bases", "Bases completed.", labels, registry=self.registry)
        self.watch = watch

    def serve(self, port: int) -> None:
        start_http_server(port, registry=self.registry)

    def seen(self, when: dt.datetime) -> None:
        self._last_change = when.timestamp()

    def based(self) -> None:
        self.bases.labels(self.watch).inc()

    def flushed(self, until: dt.datetime, manifest: dict[str, Any] | None) -> None:
        self._until = until.timestamp()
        if manifest is not None:
            self.segments.labels(self.watch).inc()
            self.bytes.labels(self.watch).inc(manifest["size"])
            self.records.labels(self.watch).inc(manifest["records"])
        if self.textfile:
            try:
                write_to_textfile(os.fspath(self.textfile), self.registry)
            except OSError as e:
                log.warning("cannot write metrics to %s: %s", self.textfile, e)
