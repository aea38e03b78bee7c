"""What the test servers' and operators' builds share: a release installed from the Go module proxy into the cache,
and the `python -m statusvault.testing.MODULE build` command each builder answers."""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import tempfile
from collections.abc import Callable
from pathlib import Path


def go_install(package: str, binary: Path, env: dict[str, str], flags: tuple[str, ...] = ()) -> Path:
    """`go install package@version` (with `flags`, in `env` over this process's) into `binary`, unless it is there
    already; `binary`."""
    if binary.exists():
        return binary
    go = shutil.which("go")
    if go is None:
        raise RuntimeError(f"building {binary.name} needs Go on PATH")
    binary.parent.mkdir(parents=True, exist_ok=True)
    name = package.rpartition("@")[0].rsplit("/", 1)[-1]
    with tempfile.TemporaryDirectory(prefix=f"statusvault-{name}-") as tmp:
        build = [go, "install", *flags, package]
        subprocess.run(build, check=True, env={**os.environ, **env, "GOBIN": tmp}, cwd=tmp, stdout=subprocess.DEVNULL)
        shutil.move(Path(tmp) / name, binary)
    return binary


def build_main(module: str, ensure: Callable[[], Path], argv: list[str] | None) -> int:
    """`python -m MODULE build`: build or find what `ensure` makes, and print its path."""
    parser = argparse.ArgumentParser(prog=f"python -m {module}")
    parser.add_argument("command", choices=["build"])
    parser.parse_args(argv)
    print(ensure())
    return 0
