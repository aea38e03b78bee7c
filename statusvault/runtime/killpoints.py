"""Named steps where a test can stop the process to kill it exactly there (docs/reliability.md, *Kill at every
step*): with STATUSVAULT_TEST_KILL_AT=STEP:FILE in its environment, the process that reaches STEP creates FILE
and blocks for good. Read once at import; otherwise a kill point costs one comparison."""

from __future__ import annotations

import os
import threading
from pathlib import Path

ENV = "STATUSVAULT_TEST_KILL_AT"
_STEP, _, _FILE = os.environ.get(ENV, "").partition(":")


def kill_point(step: str) -> None:
    """Block this thread for good when the environment names `step` (after creating the file it names)."""
    if step != _STEP:
        return
    Path(_FILE).write_text(f"{os.getpid()}\n")
    threading.Event().wait()
