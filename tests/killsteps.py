"""Kill a CLI process at one named step, deterministically (tests/integration/test_killsteps.py): at a request it
sends, before or just after the server sees it (a FaultProxy's `before` hook), or at a kill point it reaches
(statusvault/runtime/killpoints.py)."""

from __future__ import annotations

import dataclasses
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path

from statusvault.runtime.killpoints import ENV
from tests.faultproxy import FaultProxy


@dataclasses.dataclass(frozen=True)
class Request:
    """The nth request to one side's API server ("source" or "target") with this method, path fragment and body
    fragment, once `after` was seen. lands: the server still gets it (the client is dead before the answer)."""

    method: str
    path: str = ""
    body: bytes = b""
    nth: int = 1
    side: str = "source"
    after: Request | None = None
    lands: bool = False

    def matches(self, side: str, method: str, path: str, body: bytes | None) -> bool:
        return (side, method) == (self.side, self.method) and self.path in path and self.body in (body or b"")


@dataclasses.dataclass(frozen=True)
class Pause:
    """A kill point the process reaches (statusvault/runtime/killpoints.py)."""

    step: str


Where = Request | Pause


class _Trigger:
    """Walks a Request and its `after` chain, outermost first: says of each request whether it comes before the
    one the kill is for, is that one ("at"), or comes after it."""

    def __init__(self, where: Request):
        self.stages: list[Request] = []
        at: Request | None = where
        while at is not None:
            self.stages.insert(0, at)
            at = at.after
        self.stage = self.seen = 0
        self.lock = threading.Lock()

    def __call__(self, side: str, method: str, path: str, body: bytes | None) -> str:
        with self.lock:
            if self.stage == len(self.stages):
                return "after"
            if not self.stages[self.stage].matches(side, method, path, body):
                return "before"
            self.seen += 1
            if self.seen < self.stages[self.stage].nth:
                return "before"
            self.stage, self.seen = self.stage + 1, 0
            return "at" if self.stage == len(self.stages) else "before"


class Killed(ConnectionAbortedError):
    """Raised in the proxy so that a request whose sender was killed never reaches the server."""


def spawn(args: list[str], env: dict[str, str]) -> subprocess.Popen[bytes]:
    """`python -m statusvault ARGS` with env added, its stderr kept (stdout dropped)."""
    return subprocess.Popen(
        [sys.executable, "-m", "statusvault", *args],
        env={**os.environ, **env},
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )


def kill_at(
    where: Where,
    args: list[str],
    env: dict[str, str],
    proxies: dict[str, FaultProxy],
    tmp: Path,
    timeout: float = 180,
    meanwhile: Callable[[], None] = lambda: None,
) -> None:
    """Run the CLI with args and kill -9 it at `where`; fails if it ended any other way. meanwhile: called every
    half second until a kill point is reached (changes for a watcher to record)."""
    if isinstance(where, Pause):
        _kill_at_pause(where, args, env, tmp, timeout, meanwhile)
        return
    trigger = _Trigger(where)
    victim: list[subprocess.Popen[bytes]] = []

    def before(side: str, method: str, path: str, body: bytes | None) -> None:
        when = trigger(side, method, path, body)
        if when == "after":  # sent by the victim as it died: the server never sees it
            raise Killed(f"{method} {path} after the kill")
        if when == "at":
            os.kill(victim[0].pid, signal.SIGKILL)
            victim[0].wait()
            if not where.lands:
                raise Killed(f"killed at {method} {path}")

    for side, proxy in proxies.items():
        proxy.before = lambda method, path, body, side=side: before(side, method, path, body)
    try:
        victim.append(spawn(args, env))
        _, err = victim[0].communicate(timeout=timeout)
    finally:
        for proxy in proxies.values():
            proxy.before = lambda method, path, body: None
    assert victim[0].returncode == -signal.SIGKILL, f"never killed at {where}: {err.decode()[-3000:]}"


def _kill_at_pause(
    where: Pause, args: list[str], env: dict[str, str], tmp: Path, timeout: float, meanwhile: Callable[[], None]
) -> None:
    reached = tmp / f"reached-{where.step}"
    reached.unlink(missing_ok=True)
    proc = spawn(args, {**env, ENV: f"{where.step}:{reached}"})
    deadline = time.monotonic() + timeout
    next_call = time.monotonic()
    while not reached.exists():
        if proc.poll() is not None or time.monotonic() > deadline:
            proc.kill()
            _, err = proc.communicate()
            raise AssertionError(f"never reached {where.step} (exit {proc.returncode}): {err.decode()[-3000:]}")
        if time.monotonic() >= next_call:
            meanwhile()
            next_call = time.monotonic() + 0.5
        time.sleep(0.05)
    proc.kill()
    proc.communicate()
    assert proc.returncode == -signal.SIGKILL
