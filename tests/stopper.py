"""The CLI in a process that stops itself at a chosen store write, for crash and race tests:

    python -m tests.stopper SUFFIX ACTION MARK statusvault-arguments...

Just before its first `put` of a key ending in SUFFIX (any store), the process creates the file MARK, then either
kills itself (ACTION `kill`: SIGKILL, as the OOM killer or a lost node would) or sleeps ACTION seconds, so that
another run meets it there. Nothing in statusvault knows: the stores' `put` is wrapped here."""

from __future__ import annotations

import os
import signal
import sys
import time
from pathlib import Path
from typing import Any


def stopping(put: Any, suffix: str, action: str, mark: Path) -> Any:
    def wrapped(self: Any, key: str, data: bytes) -> None:
        if key.endswith(suffix) and not mark.exists():
            mark.touch()
            if action == "kill":
                os.kill(os.getpid(), signal.SIGKILL)
            time.sleep(float(action))
        put(self, key, data)

    return wrapped


def main() -> int:
    suffix, action, mark, *args = sys.argv[1:]
    from statusvault.cli.main import main as cli
    from statusvault.storage.local import LocalStore
    from statusvault.storage.s3 import S3Store

    for store in (LocalStore, S3Store):
        store.put = stopping(store.put, suffix, action, Path(mark))  # type: ignore[method-assign]
    return int(cli(args))


if __name__ == "__main__":
    sys.exit(main())
