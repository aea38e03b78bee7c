"""What backup's and restore's worker processes share: how many CPUs there are to use, how a worker is
started (spawned, with Ctrl-C left to the parent), how it sets itself up, and how it hears from its parent."""

from __future__ import annotations

import os
import signal
from collections.abc import Callable
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any


def available_cpus() -> int:
    """The CPUs this process may use: its affinity mask, capped by a cgroup v2 (or v1) CPU quota."""
    cpus = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    quota = _cgroup_quota()
    return max(1, min(cpus, int(quota + 0.5)) if quota else cpus)


def _cgroup_quota() -> float | None:
    try:
        raw = Path("/sys/fs/cgroup/cpu.max").read_text().split()
        if raw and raw[0] != "max":
            return int(raw[0]) / int(raw[1])
    except (OSError, ValueError, IndexError):
        pass
    try:
        quota = int(Path("/sys/fs/cgroup/cpu/cpu.cfs_quota_us").read_text())
        period = int(Path("/sys/fs/cgroup/cpu/cpu.cfs_period_us").read_text())
        return quota / period if quota > 0 and period > 0 else None
    except (OSError, ValueError):
        return None


def spawn(ctx: Any, target: Callable[..., None], name: str, *args: Any) -> tuple[Any, Connection]:
    """Start `target(child_conn, *args, parent_pid)` in a spawned daemon process; returns the process and the
    parent's end of the pipe. SIGINT is blocked while it starts, so Ctrl-C stays the parent's to handle."""
    parent, child = ctx.Pipe()
    process = ctx.Process(target=target, args=(child, *args, os.getpid()), name=name, daemon=True)
    old = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})
    try:
        process.start()
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, old)
    child.close()
    return process, parent


def worker_init(log_format: str, debug: bool) -> None:
    """First thing in a worker: Ctrl-C is ignored (the parent stops it), and it logs as the parent does."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT})
    if log_format:
        from statusvault.logs import setup_logging

        setup_logging(log_format, debug)


def next_message(conn: Connection, parent: int) -> Any | None:
    """The parent's next message; None once the parent is gone (its pipe closed, or it was killed)."""
    while True:
        try:
            if conn.poll(1.0):
                return conn.recv()
        except (EOFError, OSError):
            return None
        if os.getppid() != parent:
            return None
