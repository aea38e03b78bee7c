"""docs/tutorial.md as a user types it: every shell block, in order, in bash, with kubectl 1.36 and the statusvault
of this checkout, against a control plane of its own. The first block (start the local cluster) and the last (stop
it) are the fixture's to do: the test checks they say what it does. A `text` block after a shell block is what that
block must print."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from statusvault.kube.client import KubeClient
from statusvault.kube.discovery import discover
from statusvault.kube.transport import load_transport
from statusvault.testing.cluster import LocalCluster
from statusvault.testing.kubectl import ensure_kubectl

pytestmark = pytest.mark.current_only("the tutorial is typed against the Kubernetes users run now, with its kubectl")

TUTORIAL = Path(__file__).parents[2] / "docs" / "tutorial.md"
SETUP = """make install cluster-up
export KUBECONFIG=$HOME/.cache/statusvault/cluster/kubeconfig
export PATH=$PWD/.venv/bin:$PATH"""
TEARDOWN = "make cluster-down"


def blocks(text: str) -> list[tuple[str, str]]:
    """The fenced blocks of a Markdown page: (language, body), in order."""
    return [(lang, body.strip("\n")) for lang, body in re.findall(r"^```(\w*)\n(.*?)^```$", text, re.M | re.S)]


def steps(text: str) -> list[tuple[str, str | None]]:
    """Each shell block with the text block right after it (what it prints), or None."""
    found = blocks(text)
    out: list[tuple[str, str | None]] = []
    for k, (lang, body) in enumerate(found):
        if lang == "sh":
            after = found[k + 1] if k + 1 < len(found) else ("", "")
            out.append((body, after[1] if after[0] == "text" else None))
    return out


def test_the_tutorial_blocks_are_read_as_written():
    page = "```sh\nmake a\n```\n\n```text\nA\n```\n\ntext\n\n```sh\nb\n```\n```yaml\nc: 1\n```\n"
    assert steps(page) == [("make a", "A"), ("b", None)]


def test_the_tutorial_runs_as_written(tmp_path):
    kubectl = ensure_kubectl()
    tools = tmp_path / "bin"
    tools.mkdir()
    (tools / "kubectl").symlink_to(kubectl)
    home = tmp_path / "home"
    home.mkdir()
    typed = steps(TUTORIAL.read_text())
    assert typed[0] == (SETUP, None), "the first block starts the cluster this test starts: keep them the same"
    assert typed[-1] == (TEARDOWN, None), "the last block stops it"
    with LocalCluster.start(version="1.36") as plane:
        env = {
            "HOME": str(home),  # the default store and state directories, and kubectl's cache, are the user's
            "PATH": os.pathsep.join([str(tools), str(Path(sys.executable).parent), "/usr/bin", "/bin"]),
            "KUBECONFIG": str(plane.kubeconfig),
            "LANG": "C.UTF-8",
        }
        for command, expected in typed[1:-1]:
            done = subprocess.run(
                ["bash", "-euo", "pipefail", "-c", command],
                cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300,
            )  # fmt: skip
            assert done.returncode == 0, f"$ {command}\n{done.stdout}\n{done.stderr}"
            if expected is not None:
                assert done.stdout.strip() == expected.strip(), f"$ {command}"
        kube = KubeClient(load_transport(str(plane.kubeconfig)))
        rt = discover(kube).by_qualified("kubernetesclusters.xyz.example.com")
        assert rt is not None
        restored = kube.get(rt, "team-a", "prod-eu")
        assert restored is not None
        assert restored["status"] == {"apiServerURL": "https://prod-eu.k8s.example.net:6443", "clusterID": "kc-7f3a9c"}
        assert (home / ".local" / "share" / "statusvault").is_dir(), "the backup went to the default store"
