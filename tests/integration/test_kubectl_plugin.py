"""statusvault as a kubectl plugin, with kubectl 1.36: the installed kubectl-statusvault and
kubectl_complete-statusvault (pyproject's console scripts) on PATH, as a user who pip-installed it has them."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from statusvault import VERSION
from statusvault.storage import LocalStore, archive_key, manifest_key
from statusvault.testing.cluster import RELEASES
from statusvault.testing.kubectl import ensure_kubectl

pytestmark = pytest.mark.version_neutral("kubectl finds, runs and completes a plugin alike whatever the server")

SCRIPTS = ("kubectl-statusvault", "kubectl_complete-statusvault")


@pytest.fixture
def kubectl(tmp_path, cluster):
    """kubectl 1.36 with a PATH of itself, the two plugin executables and the system's tools (no other plugin)."""
    tools = tmp_path / "bin"
    tools.mkdir()
    (tools / "kubectl").symlink_to(ensure_kubectl())
    for name in SCRIPTS:
        installed = Path(sys.executable).parent / name
        assert installed.exists(), f"{name} is not installed: `make install` (pyproject's [project.scripts])"
        (tools / name).symlink_to(installed)
    env = {
        "PATH": os.pathsep.join([str(tools), "/usr/bin", "/bin"]),
        "HOME": str(tmp_path),
        "KUBECONFIG": str(cluster.kubeconfig),
        "STATUSVAULT_STORAGE": str(tmp_path / "store"),
    }

    def _kubectl(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(["kubectl", *args], env=env, capture_output=True, text=True, timeout=60)

    _kubectl.tools = tools  # type: ignore[attr-defined]
    _kubectl.store = LocalStore(tmp_path / "store")  # type: ignore[attr-defined]
    return _kubectl


def test_kubectl_runs_the_plugin(kubectl):
    done = kubectl("statusvault", "version", "--client")
    assert (done.returncode, done.stderr) == (0, "")
    assert done.stdout.splitlines()[0] == f"Client Version: {VERSION}"


def test_the_plugin_reads_kubectls_cluster(kubectl, kube_version):
    done = kubectl("statusvault", "version")
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines()[-1] == f"Server Version: {RELEASES[kube_version].git_version}"


def test_the_plugins_help_names_it_as_typed(kubectl):
    done = kubectl("statusvault", "restore", "--help")
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("Usage: kubectl statusvault restore [OPTIONS] BACKUP\n")


def test_kubectl_plugin_list_finds_it(kubectl):
    done = kubectl("plugin", "list")
    assert done.returncode == 0, done.stderr
    assert str(kubectl.tools / "kubectl-statusvault") in done.stdout.splitlines()


def test_kubectl_completes_the_plugins_commands(kubectl):
    done = kubectl("__complete", "statusvault", "res")
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert [line.split("\t")[0] for line in lines] == ["restore", ":4"], "cobra's NoFileComp directive"


def test_kubectl_completes_backup_names_from_the_storage(kubectl):
    for name in ("before-upgrade", "nightly"):
        kubectl.store.put(archive_key(name), b"archive")
        kubectl.store.put(manifest_key(name), b"{}")
    done = kubectl("__complete", "statusvault", "restore", "")
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == ["before-upgrade", "nightly", ":4"]
