"""Client-side rate limiting (token bucket) and retry backoff (exponential with full jitter)."""

from __future__ import annotations

import dataclasses
import multiprocessing
import os
import random
import threading
import time
from collections.abc import Callable
from typing import Any, Protocol

MAX_RETRY_AFTER = 30.0  # seconds; a larger Retry-After is capped
SERVER_WAIT_SECONDS = 60.0  # an unavailable API server (restarting, failing over) is waited out this long
SERVER_WAIT_ENV = "STATUSVAULT_SERVER_WAIT_SECONDS"  # --server-wait-seconds: this process and its workers
POLL_UNAVAILABLE = 1.0  # seconds between tries once the retries are spent and the server is waited out


def server_wait() -> float:
    """SERVER_WAIT_SECONDS, or the environment's STATUSVAULT_SERVER_WAIT_SECONDS (a malformed one: the default)."""
    try:
        return max(0.0, float(os.environ.get(SERVER_WAIT_ENV, "") or SERVER_WAIT_SECONDS))
    except ValueError:
        return SERVER_WAIT_SECONDS


class RateLimiter(Protocol):
    def acquire(self) -> float:
        """Take one token, sleeping until one is available; returns the seconds waited."""
        ...


class TokenBucket:
    """A thread-safe token bucket: `qps` tokens per second, at most `burst` saved up.

    `qps <= 0` disables limiting.
    """

    def __init__(
        self,
        qps: float,
        burst: int,
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], None] = time.sleep,
    ):
        self.qps = qps
        self.burst = max(1, burst)
        self._tokens = float(self.burst)
        self._clock = clock
        self._sleep = sleep
        self._last = clock()
        self._lock = threading.Lock()

    def acquire(self) -> float:
        """Take one token, sleeping until one is available; returns the seconds waited."""
        if self.qps <= 0:
            return 0.0
        with self._lock:
            now = self._clock()
            self._tokens = min(self.burst, self._tokens + (now - self._last) * self.qps)
            self._last = now
            self._tokens -= 1.0
            wait = -self._tokens / self.qps if self._tokens < 0 else 0.0
        if wait > 0:
            self._sleep(wait)
        return wait


class SharedTokenBucket:
    """A token bucket shared by processes (one QPS/burst budget for a restore's worker processes).

    Its state lives in shared memory under a process-shared lock; CLOCK_MONOTONIC is the same in every process
    of the machine. Made in the parent and handed to each worker when it is started (it pickles only then)."""

    def __init__(self, qps: float, burst: int, ctx: Any = None):
        self.qps = qps
        self.burst = max(1, burst)
        ctx = ctx or multiprocessing.get_context()
        self._state = ctx.RawArray("d", [float(self.burst), time.monotonic()])  # tokens, last refill
        self._lock = ctx.Lock()

    def acquire(self) -> float:
        if self.qps <= 0:
            return 0.0
        with self._lock:
            now = time.monotonic()
            tokens = min(self.burst, self._state[0] + (now - self._state[1]) * self.qps) - 1.0
            self._state[0], self._state[1] = tokens, now
        wait = -tokens / self.qps if tokens < 0 else 0.0
        if wait > 0:
            time.sleep(wait)
        return wait


@dataclasses.dataclass(frozen=True)
class Backoff:
    """Exponential backoff with full jitter, capped, for a bounded number of retries."""

    base: float = 0.2
    cap: float = 10.0
    max_retries: int = 6
    # an unreachable server (connection refused or reset, 502/503/504) is tried again, past max_retries, until this
    # many seconds after the first failure: API servers restart in upgrades and failovers, when restores run
    unavailable_for: float = dataclasses.field(default_factory=server_wait)

    def delay(self, attempt: int, rng: Callable[[], float] = random.random) -> float:
        """Seconds to wait before retry number `attempt` (0-based)."""
        return float(rng() * min(self.cap, self.base * (2**attempt)))


def spread(retry_after: float) -> float:
    """At least the server's Retry-After (capped at MAX_RETRY_AFTER), and up to a quarter more: the clients it
    turned away at once (APF rejects a burst) come back spread out, not again all at once."""
    return min(retry_after * (1 + random.random() / 4), MAX_RETRY_AFTER)
