"""`statusvault version` against a real API server: the server's own gitVersion, read through the project's client."""

from __future__ import annotations

import json

import pytest

from statusvault import VERSION
from statusvault.errors import ExitStatus
from statusvault.testing.cluster import RELEASES

pytestmark = pytest.mark.version_neutral("GET /version answers alike on every server; the value is the release's own")


def test_version_reads_the_servers_git_version(run, cluster, kube_version):
    result = run("version", "-o", "json")
    assert (result.code, result.err) == (ExitStatus.SUCCESS, "")
    data = json.loads(result.out)
    assert data["clientVersion"]["version"] == VERSION
    assert data["serverVersion"]["server"] == cluster.server
    assert data["serverVersion"]["gitVersion"] == RELEASES[kube_version].git_version


def test_version_text_ends_with_the_server(run, cluster, kube_version):
    result = run("version")
    assert result.code == ExitStatus.SUCCESS
    assert result.out.splitlines()[-2:] == [
        f"Server:         {cluster.server}",
        f"Server Version: {RELEASES[kube_version].git_version}",
    ]
