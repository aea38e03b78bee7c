"""helm v3, built from the Go module proxy once per machine (helm.sh/helm/v3/cmd/helm at VERSION, whose go.mod has
no replace directives, so `go install module@version` builds it as released), for the tests of the Helm chart
(charts/statusvault/, tests/integration/test_helm_chart.py). A helm on PATH is never used: its version is the
machine's.

python -m statusvault.testing.helm build   # build or find the binary, print its path
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from statusvault.testing.cluster import cache_dir

VERSION = "v3.22.0"
PACKAGE = "helm.sh/helm/v3/cmd/helm"
# What helm's own Makefile stamps in: its version, and the Kubernetes version its client-go (v0.37) speaks, which
# `helm template` reports as .Capabilities.KubeVersion and `helm lint` checks deprecated APIs against.
_LDFLAGS = " ".join(
    [
        "-s -w",
        f"-X helm.sh/helm/v3/internal/version.version={VERSION}",
        "-X helm.sh/helm/v3/internal/version.gitTreeState=clean",
        "-X helm.sh/helm/v3/pkg/lint/rules.k8sVersionMajor=1",
        "-X helm.sh/helm/v3/pkg/lint/rules.k8sVersionMinor=37",
        "-X helm.sh/helm/v3/pkg/chartutil.k8sVersionMajor=1",
        "-X helm.sh/helm/v3/pkg/chartutil.k8sVersionMinor=37",
    ]
)


def ensure_helm() -> Path:
    """The helm binary, built the first time (the version is in its name, so a new VERSION builds again)."""
    binary = cache_dir() / "bin" / f"helm-{VERSION}"
    if binary.exists():
        return binary
    go = shutil.which("go")
    if go is None:
        raise RuntimeError("building helm needs Go on PATH")
    binary.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="statusvault-helm-") as tmp:
        env = {
            **os.environ,
            "GOTOOLCHAIN": "local",
            "GOFLAGS": "-mod=readonly -buildvcs=false",
            "CGO_ENABLED": "0",
            "GOBIN": tmp,
        }
        build = [go, "install", "-trimpath", "-ldflags", _LDFLAGS, f"{PACKAGE}@{VERSION}"]
        subprocess.run(build, check=True, env=env, cwd=tmp, stdout=subprocess.DEVNULL)
        shutil.move(Path(tmp) / "helm", binary)
    return binary


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m statusvault.testing.helm")
    parser.add_argument("command", choices=["build"])
    parser.parse_args(argv)
    print(ensure_helm())
    return 0


if __name__ == "__main__":
    sys.exit(main())
