"""kubectl of Kubernetes 1.36, built from the Go module proxy once per machine (the module kubectl136/: k8s.io/kubectl
at the release's version, with the main function of k8s.io/kubernetes/cmd/kubectl), for the tests that run what a
user types: the tutorial's (docs/tutorial.md). A kubectl on PATH is never used: its version is the machine's.

python -m statusvault.testing.kubectl build   # build or find the binary, print its path
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from statusvault.testing.cluster import RELEASES, cache_dir
from statusvault.testing.gobuild import build_main

MODULE = Path(__file__).with_name("kubectl136")


def _sources() -> str:
    return hashlib.sha256(b"".join((MODULE / f).read_bytes() for f in ("go.mod", "go.sum", "main.go"))).hexdigest()


def ensure_kubectl() -> Path:
    """The kubectl binary, built the first time (and again when kubectl136/ changes)."""
    binary = cache_dir() / "bin" / "kubectl-1.36"
    stamp = binary.with_name(".kubectl-1.36.sum")
    if binary.exists() and stamp.exists() and stamp.read_text() == _sources():
        return binary
    go = shutil.which("go")
    if go is None:
        raise RuntimeError("building kubectl needs Go on PATH")
    binary.parent.mkdir(parents=True, exist_ok=True)
    version = RELEASES["1.36"].git_version
    v = "k8s.io/component-base/version"
    ldflags = f"-s -w -X {v}.gitVersion={version} -X {v}.gitMajor=1 -X {v}.gitMinor=36 -X {v}.gitTreeState=clean"
    with tempfile.TemporaryDirectory(prefix="statusvault-kubectl-") as tmp:
        env = {**os.environ, "GOTOOLCHAIN": "local", "GOFLAGS": "-mod=readonly -buildvcs=false", "CGO_ENABLED": "0"}
        out = Path(tmp) / "kubectl"
        build = [go, "build", "-trimpath", "-ldflags", ldflags, "-o", str(out), "."]
        subprocess.run(build, check=True, env=env, cwd=MODULE, stdout=subprocess.DEVNULL)
        shutil.move(out, binary)
    stamp.write_text(_sources())
    return binary


def main(argv: list[str] | None = None) -> int:
    return build_main("statusvault.testing.kubectl", ensure_kubectl, argv)


if __name__ == "__main__":
    sys.exit(main())
