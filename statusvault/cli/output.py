"""Rendering: plain tables for people, JSON/YAML for machines; logging setup; progress on a terminal."""

from __future__ import annotations

import enum
import json
import logging
import sys
import time
from collections.abc import Callable, Iterable, Sequence
from typing import Any

import click
import orjson
import yaml


class OutputFormat(enum.StrEnum):
    """-o: what a command prints."""

    TEXT = "text"  # tables and lines for a person
    JSON = "json"
    YAML = "yaml"


def table(headers: Sequence[str], rows: Sequence[Sequence[Any]]) -> str:
    cells = [[str(h) for h in headers]] + [[str(c) for c in r] for r in rows]
    widths = [max(len(row[i]) for row in cells) for i in range(len(headers))]
    return "\n".join("  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)).rstrip() for row in cells)


class _Dumper(yaml.SafeDumper):
    """The safe YAML dumper, writing an enum member (a StrEnum's: outcomes, modes) as its value."""


_Dumper.add_multi_representer(enum.Enum, lambda dumper, member: dumper.represent_data(member.value))


def emit(data: Any, fmt: OutputFormat, text: str) -> None:
    """Print `data` as JSON/YAML, or the prepared `text`."""
    if fmt == OutputFormat.JSON:
        click.echo(json.dumps(data, indent=2, sort_keys=False, default=str))
    elif fmt == OutputFormat.YAML:
        click.echo(yaml.dump(data, Dumper=_Dumper, sort_keys=False, default_flow_style=False).rstrip())
    else:
        click.echo(text)


def emit_items(head: dict[str, Any], items: Iterable[bytes], fmt: OutputFormat, text: Callable[[], str]) -> None:
    """Like emit, for a document whose "items" may be too many to hold, each given as compact JSON: JSON is
    streamed item by item as given (parsing and encoding a restore's 10,000 results again cost about 40 ms of CPU);
    only a stdout that cannot take UTF-8 gets them re-encoded with non-ASCII characters escaped."""
    if fmt == OutputFormat.JSON:
        opening = json.dumps(head, indent=2)
        out = sys.stdout
        out.write(opening[:-2] + ',\n  "items": [')
        as_is = (out.encoding or "").lower().replace("-", "").replace("_", "") == "utf8"
        for n, item in enumerate(items):
            line = item.decode() if as_is else json.dumps(orjson.loads(item))
            out.write(("," if n else "") + "\n    " + line)
        out.write("\n  ]\n}\n")
    elif fmt == OutputFormat.YAML:
        emit({**head, "items": [orjson.loads(item) for item in items]}, fmt, "")
    else:
        click.echo(text())


def emit_manifests(manifests: list[dict[str, Any]]) -> None:
    """Rendered Kubernetes objects as one multi-document YAML stream."""
    click.echo(yaml.dump_all(manifests, Dumper=_Dumper, sort_keys=False), nl=False)


def human_size(n: int | None) -> str:
    if n is None:
        return "-"
    size = float(n)
    for unit in ("B", "KiB", "MiB", "GiB"):
        if size < 1024 or unit == "GiB":
            return f"{size:.0f} {unit}" if unit == "B" else f"{size:.1f} {unit}"
        size /= 1024
    return f"{n} B"


class LogProgress:
    """Progress as log lines (no terminal): one line per finished step and at most one every 10 s."""

    def __init__(self, interval: float = 10.0):
        self.log = logging.getLogger("statusvault.progress")
        self.interval = interval
        self.label = ""
        self.done = 0
        self.started = self.last = time.monotonic()

    def start(self, label: str, total: int | None = None) -> None:
        self.label, self.done = label, 0
        self.started = self.last = time.monotonic()

    def advance(self, n: int = 1) -> None:
        self.done += n
        now = time.monotonic()
        if now - self.last >= self.interval:
            self.last = now
            self.log.info("%s: %d objects (%.0f/s)", self.label, self.done, self.done / max(now - self.started, 1e-9))

    def finish(self) -> None:
        pass


class RichProgress:
    """A live bar on a terminal: items per step and objects/s."""

    def __init__(self) -> None:
        from rich.console import Console
        from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

        self.bar = Progress(
            TextColumn("{task.description}"),
            BarColumn(),
            MofNCompleteColumn(),
            TextColumn("{task.fields[rate]}"),
            TimeElapsedColumn(),
            console=Console(stderr=True),
            transient=False,
        )
        self.task: Any = None
        self.done = 0
        self.started = 0.0
        self.bar.start()

    def start(self, label: str, total: int | None = None) -> None:
        self.task = self.bar.add_task(label, total=total, rate="")
        self.done = 0
        self.started = time.monotonic()

    def advance(self, n: int = 1) -> None:
        self.done += n
        rate = self.done / max(time.monotonic() - self.started, 1e-9)
        self.bar.update(self.task, advance=n, rate=f"{rate:.0f} obj/s")

    def finish(self) -> None:
        if self.task is not None:
            self.bar.update(self.task, total=self.done)

    def close(self) -> None:
        self.bar.stop()
