"""The default restore's rule for worker processes (restore/running/waves.py ScaleUp): a wave starts in this
process's threads and moves to worker processes only once this process is CPU-bound over PROBE objects."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import pytest

from statusvault.restore.running import waves


class Clock:
    """process_time and monotonic as the test sets them: `busy` seconds of CPU per second of wall time."""

    def __init__(self, busy: float):
        self.busy, self.wall = busy, 0.0

    def tick(self) -> None:
        self.wall += 0.01

    def cpu(self) -> float:
        return self.wall * self.busy


class Waves:
    def __init__(self) -> None:
        self.to_processes: list[int] = []

    @contextlib.contextmanager
    def in_processes(self, pool: object) -> Iterator[object]:
        yield lambda item, data: self.to_processes.append(item)


@pytest.mark.parametrize(("busy", "moved_at"), [(0.3, None), (0.95, waves.PROBE)], ids=["server-bound", "cpu-bound"])
def test_a_wave_moves_to_processes_only_when_this_process_is_cpu_bound(monkeypatch, busy, moved_at):
    clock, stub, started = Clock(busy), Waves(), []
    monkeypatch.setattr(waves.time, "process_time", clock.cpu)
    monkeypatch.setattr(waves.time, "monotonic", lambda: clock.wall)
    in_threads: list[int] = []
    with contextlib.ExitStack() as stack:
        scale = waves.ScaleUp(stub, lambda: started.append("pool") or "pool", stack,  # type: ignore[arg-type]
                              lambda item, data: in_threads.append(item))  # fmt: skip
        for item in range(3 * waves.PROBE):
            clock.tick()
            scale.handle(item, None)  # type: ignore[arg-type]

    if moved_at is None:
        assert (len(in_threads), stub.to_processes, started) == (3 * waves.PROBE, [], []), "never started"
    else:
        assert in_threads == list(range(moved_at)) and stub.to_processes == list(range(moved_at, 3 * waves.PROBE))
        assert started == ["pool"], "started once, for the rest of the wave"
