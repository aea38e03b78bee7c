"""The 1.36 test control plane's Go module (statusvault/testing/kube136/) agrees with the launcher that runs it."""

from __future__ import annotations

import re
from pathlib import Path

from statusvault.testing.cluster import RELEASES

GO_MOD = Path(__file__).resolve().parents[2] / "statusvault" / "testing" / "kube136" / "go.mod"


def test_the_launcher_expects_the_kubernetes_release_go_mod_builds():
    required = re.search(r"^(?:require |\t)k8s\.io/kubernetes (v\S+)", GO_MOD.read_text(), re.M)
    assert required is not None, "kube136/go.mod requires k8s.io/kubernetes"
    assert RELEASES["1.36"].git_version == required.group(1)


def test_every_staging_module_is_pinned_to_the_matching_release():
    """v1.36.N of k8s.io/kubernetes goes with v0.36.N of each staging module (the replace block)."""
    kubernetes = RELEASES["1.36"].git_version
    pins = re.findall(r"^\t(k8s\.io/[\w-]+) => (k8s\.io/[\w-]+) (v\S+)$", GO_MOD.read_text(), re.M)
    assert len(pins) > 30
    assert {(old == new, version) for old, new, version in pins} == {(True, "v0." + kubernetes.removeprefix("v1."))}
