"""Kill points: a process named by STATUSVAULT_TEST_KILL_AT stops there and says so; others pass."""

from __future__ import annotations

import os
import subprocess
import sys
import time

CODE = (
    "from statusvault.runtime.killpoints import kill_point; kill_point('a.other'); kill_point('a.step'); print('past')"
)


def test_the_named_step_blocks_after_creating_its_file(tmp_path):
    reached = tmp_path / "reached"
    env = {**os.environ, "STATUSVAULT_TEST_KILL_AT": f"a.step:{reached}"}
    proc = subprocess.Popen([sys.executable, "-c", CODE], env=env, stdout=subprocess.PIPE)
    try:
        deadline = time.monotonic() + 30
        while not reached.exists():
            assert proc.poll() is None and time.monotonic() < deadline
            time.sleep(0.05)
        assert reached.read_text() == f"{proc.pid}\n"
        time.sleep(0.2)
        assert proc.poll() is None, "it stays there"
    finally:
        proc.kill()
    assert proc.communicate()[0] == b""


def test_without_the_variable_every_step_passes():
    env = {k: v for k, v in os.environ.items() if k != "STATUSVAULT_TEST_KILL_AT"}
    done = subprocess.run([sys.executable, "-c", CODE], env=env, capture_output=True, timeout=30)
    assert done.stdout == b"past\n"
