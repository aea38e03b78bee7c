from __future__ import annotations

import multiprocessing
import time
from typing import Any

from statusvault.runtime.throttle import Backoff, SharedTokenBucket, TokenBucket


class FakeClock:
    def __init__(self):
        self.now = 0.0
        self.slept: list[float] = []

    def __call__(self):
        return self.now

    def sleep(self, seconds):
        self.slept.append(seconds)
        self.now += seconds


def test_token_bucket_allows_a_burst_then_paces_at_qps():
    clock = FakeClock()
    bucket = TokenBucket(qps=10, burst=3, clock=clock, sleep=clock.sleep)
    waits = [bucket.acquire() for _ in range(5)]
    assert waits[:3] == [0.0, 0.0, 0.0]
    assert [round(w, 3) for w in waits[3:]] == [0.1, 0.1]
    assert round(clock.now, 3) == 0.2


def test_token_bucket_disabled_never_waits():
    clock = FakeClock()
    bucket = TokenBucket(qps=0, burst=1, clock=clock, sleep=clock.sleep)
    assert all(bucket.acquire() == 0.0 for _ in range(100))
    assert clock.slept == []


def test_backoff_is_capped_exponential_with_full_jitter():
    b = Backoff(base=0.5, cap=4.0, max_retries=5)
    assert [b.delay(i, rng=lambda: 1.0) for i in range(5)] == [0.5, 1.0, 2.0, 4.0, 4.0]
    assert b.delay(3, rng=lambda: 0.25) == 1.0


def _take(bucket: SharedTokenBucket, n: int, start: Any, times: Any, slot: int) -> None:
    start.wait(30)  # both processes take their tokens at the same time
    times[2 * slot] = time.monotonic()
    for _ in range(n):
        bucket.acquire()
    times[2 * slot + 1] = time.monotonic()


def test_a_shared_bucket_is_one_budget_for_several_processes():
    """Two processes taking 25 tokens each, at once, from one 50/s bucket (burst 1) need at least 49/50 s
    together; buckets of their own would let both finish in under half that."""
    ctx = multiprocessing.get_context("spawn")
    bucket = SharedTokenBucket(50.0, 1, ctx)
    start, times = ctx.Barrier(2), ctx.Array("d", 4)
    procs = [ctx.Process(target=_take, args=(bucket, 25, start, times, i)) for i in range(2)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(60)
    assert all(p.exitcode == 0 for p in procs)
    span = max(times[1], times[3]) - min(times[0], times[2])
    assert span >= 49 / 50 * 0.99, span


def test_a_shared_bucket_without_a_rate_never_waits():
    assert SharedTokenBucket(0.0, 1).acquire() == 0.0
