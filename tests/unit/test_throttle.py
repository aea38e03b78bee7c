from __future__ import annotations

from statusvault.throttle import Backoff, TokenBucket


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
