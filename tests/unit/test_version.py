"""`statusvault version`: the client part from the constants the writers and readers use, without a cluster; the
root --version flag as before; an unreachable server still shows the client part, then one line naming it."""

from __future__ import annotations

import json
import platform

import pytest
import yaml

from statusvault import VERSION, installed_version
from statusvault.archive.format import ENVELOPE_FORMAT_VERSION, FORMAT_VERSION, SUPPORTED_MAJOR
from statusvault.cli.main import main
from statusvault.errors import ExitStatus
from statusvault.runtime.throttle import Backoff
from statusvault.testing.cluster import kubeconfig_yaml
from statusvault.testing.controlplane import free_ports
from statusvault.velero import backups as velero

CLIENT = {
    "version": VERSION,
    "archiveFormat": {
        "writes": FORMAT_VERSION,
        "writesEncrypted": ENVELOPE_FORMAT_VERSION,
        "reads": f"{SUPPORTED_MAJOR}.x",
    },
    "veleroFormat": {"reads": f"{velero.SUPPORTED_MAJOR}.x"},
    "python": platform.python_version(),
}
CLIENT_TEXT = (
    f"Client Version: {VERSION}\n"
    f"Archive Format: writes {FORMAT_VERSION} (encrypted: {ENVELOPE_FORMAT_VERSION}), reads {SUPPORTED_MAJOR}.x\n"
    f"Velero Format:  reads {velero.SUPPORTED_MAJOR}.x\n"
    f"Python Version: {platform.python_version()}\n"
)


@pytest.fixture
def run(capsys, monkeypatch, tmp_path):
    monkeypatch.setenv("KUBECONFIG", str(tmp_path / "missing-kubeconfig"))

    def _run(*args: str) -> tuple[int, str, str]:
        capsys.readouterr()
        code = main(list(args))
        out, err = capsys.readouterr()
        return int(code), out, err

    return _run


def test_client_version_in_text_asks_no_server(run):
    assert run("version", "--client") == (ExitStatus.SUCCESS, CLIENT_TEXT, "")


@pytest.mark.parametrize("fmt, load", [("json", json.loads), ("yaml", yaml.safe_load)])
def test_client_version_for_machines(run, fmt, load):
    code, out, err = run("version", "--client", "-o", fmt)
    assert (code, err) == (ExitStatus.SUCCESS, "")
    assert load(out) == {"clientVersion": CLIENT}


def test_the_root_version_flag_still_prints_the_installed_version(run):
    assert run("--version") == (ExitStatus.SUCCESS, f"statusvault, version {installed_version()}\n", "")


@pytest.fixture
def closed_port_kubeconfig(tmp_path, monkeypatch):
    """A kubeconfig naming a loopback port nothing listens on; the client's retries without their waits."""
    monkeypatch.setattr(Backoff, "delay", lambda self, attempt, rng=None: 0.0)
    server = f"https://127.0.0.1:{free_ports(1)[0]}"
    path = tmp_path / "closed.yaml"
    path.write_text(kubeconfig_yaml(server, "u", "t"))
    return path, server


def test_an_unreachable_server_shows_the_client_part_then_one_line_naming_it(run, closed_port_kubeconfig):
    kubeconfig, server = closed_port_kubeconfig
    code, out, err = run("--kubeconfig", str(kubeconfig), "version")
    assert (code, out) == (ExitStatus.ERROR, CLIENT_TEXT)
    assert err.startswith(f"error: cannot reach the API server at {server}: ") and len(err.splitlines()) == 1


def test_an_unreachable_server_leaves_json_with_the_client_part(run, closed_port_kubeconfig):
    kubeconfig, server = closed_port_kubeconfig
    code, out, err = run("--kubeconfig", str(kubeconfig), "version", "-o", "json")
    assert (code, json.loads(out)) == (ExitStatus.ERROR, {"clientVersion": CLIENT})
    assert server in err and len(err.splitlines()) == 1
