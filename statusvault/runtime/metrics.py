"""Prometheus metrics for one backup/restore run: a node-exporter textfile and/or a Pushgateway push.

Pushes use add semantics (POST): a failed run pushes its failure series only, so the last success survives.
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import os
import time
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # prometheus_client is imported when a run publishes metrics, not by every command
    from prometheus_client import CollectorRegistry

log = logging.getLogger(__name__)
JOB = "statusvault"


@dataclasses.dataclass
class RunMetrics:
    """The facts of one run, turned into gauges labelled by operation and schedule."""

    operation: str  # backup | restore | prune
    schedule: str = ""
    success: bool = False
    duration: float = 0.0
    objects: int = 0
    bytes: int = 0
    errors: int = 0
    finished: float = dataclasses.field(default_factory=time.time)

    def registry(self, last_success: float | None = None) -> CollectorRegistry:
        from prometheus_client import CollectorRegistry, Gauge

        reg = CollectorRegistry()
        labels = {"schedule": self.schedule}

        def gauge(name: str, doc: str, value: float) -> None:
            g = Gauge(f"statusvault_{self.operation}_{name}", doc, list(labels), registry=reg)
            g.labels(**labels).set(value)

        gauge("success", "1 if the last run succeeded, else 0.", float(self.success))
        gauge("errors", "Objects or steps that failed in the last run.", self.errors)
        gauge("last_run_timestamp_seconds", "When the last run finished (unix time).", self.finished)
        if self.success:
            gauge("duration_seconds", "Duration of the last successful run.", self.duration)
            gauge("objects", "Objects handled by the last successful run.", self.objects)
            gauge("bytes", "Archive bytes of the last successful run.", self.bytes)
            gauge("last_success_timestamp_seconds", "When the last successful run finished (unix time).", self.finished)
        else:
            gauge("last_failure_timestamp_seconds", "When the last failed run finished (unix time).", self.finished)
            if last_success is not None:
                gauge(
                    "last_success_timestamp_seconds", "When the last successful run finished (unix time).", last_success
                )
        return reg


def _previous_success(path: Path, operation: str, schedule: str) -> float | None:
    """The last-success timestamp an earlier run wrote to the textfile, kept across a failure."""
    from prometheus_client.parser import text_string_to_metric_families

    try:
        text = path.read_text()
    except OSError:
        return None
    name = f"statusvault_{operation}_last_success_timestamp_seconds"
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name == name and sample.labels.get("schedule", "") == schedule:
                return float(sample.value)
    return None


def write_textfile(path: Path, run: RunMetrics) -> None:
    from prometheus_client import write_to_textfile

    previous = None if run.success else _previous_success(path, run.operation, run.schedule)
    path.parent.mkdir(parents=True, exist_ok=True)
    write_to_textfile(os.fspath(path), run.registry(previous))  # writes a temp file and renames


def push(gateway: str, run: RunMetrics) -> None:
    from prometheus_client import pushadd_to_gateway

    grouping = {"operation": run.operation, "schedule": run.schedule or "none"}
    pushadd_to_gateway(gateway, job=JOB, registry=run.registry(), grouping_key=grouping, timeout=10)


def publish(run: RunMetrics, textfile: str | None, gateway: str | None) -> None:
    """Write/push the run's metrics; a metrics failure is logged, never fails the run."""
    if textfile:
        try:
            write_textfile(Path(textfile), run)
        except OSError as e:
            log.warning("cannot write metrics to %s: %s", textfile, e)
    if gateway:
        try:
            push(gateway, run)
        except OSError as e:
            log.warning("cannot push metrics to %s: %s", gateway, e)


@contextlib.contextmanager
def recorded(operation: str, schedule: str, textfile: str | None, gateway: str | None) -> Iterator[RunMetrics]:
    """Publish the run's metrics when the block ends; a block that raises is a failed run."""
    run = RunMetrics(operation, schedule)
    start = time.monotonic()
    try:
        yield run
    except BaseException:
        run.success, run.errors = False, max(run.errors, 1)
        raise
    finally:
        run.duration = run.duration or time.monotonic() - start
        run.finished = time.time()
        publish(run, textfile, gateway)
