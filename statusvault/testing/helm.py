"""helm v3, built from the Go module proxy once per machine (helm.sh/helm/v3/cmd/helm at VERSION, whose go.mod has
no replace directives, so `go install module@version` builds it as released), for the tests of the Helm chart
(charts/statusvault/, tests/integration/test_helm_chart.py). A helm on PATH is never used: its version is the
machine's.

python -m statusvault.testing.helm build   # build or find the binary, print its path
"""

from __future__ import annotations

import sys
from pathlib import Path

from statusvault.testing.cluster import cache_dir
from statusvault.testing.gobuild import build_main, go_install

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
    env = {"GOTOOLCHAIN": "local", "GOFLAGS": "-mod=readonly -buildvcs=false", "CGO_ENABLED": "0"}
    return go_install(f"{PACKAGE}@{VERSION}", binary, env, ("-trimpath", "-ldflags", _LDFLAGS))


def main(argv: list[str] | None = None) -> int:
    return build_main("statusvault.testing.helm", ensure_helm, argv)


if __name__ == "__main__":
    sys.exit(main())
