"""Long runs keep their credentials, against the real API server: on a 401 a token file is re-read and an exec
plugin re-run once, then the error names the source; an expiring plugin credential is renewed before it lapses."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from statusvault.errors import KubeApiError
from statusvault.kube.client import KubeClient
from statusvault.kube.transport import load_transport
from statusvault.testing.cluster import ROTATING_TOKENS, LocalCluster, issue_cert
from tests.credentials import Plugin, kubeconfig, tokens

pytestmark = pytest.mark.version_neutral("credential renewal is the client's: the server only answers 401")

NAMESPACES = "/api/v1/namespaces"
EXPIRED = "sv-expired-token"  # in no tokens.csv line: the server answers 401


def client(path: Path) -> KubeClient:
    return KubeClient(load_transport(str(path)))


def test_a_rewritten_token_file_is_read_on_the_next_401(cluster: LocalCluster, tmp_path):
    token = tmp_path / "token"
    token.write_text(EXPIRED)
    kube = client(kubeconfig(tmp_path / "kc", cluster.server, {"tokenFile": str(token)}))
    with pytest.raises(KubeApiError) as err:
        kube.get_path(NAMESPACES)
    assert str(err.value) == (
        f"the API server rejected the credentials from token file {token} (401 Unauthorized) even after re-reading it"
    )
    token.write_text(ROTATING_TOKENS[0] + "\n")  # rotated; the once-a-minute re-read is not due
    before = kube.transport.stats.retries
    assert kube.get_path(NAMESPACES)["kind"] == "NamespaceList"
    assert kube.transport.stats.retries == before + 1, "one 401, one resend"
    kube.transport.close()


def test_a_burst_of_401s_from_many_threads_reruns_the_plugin_once(cluster: LocalCluster, tmp_path):
    plugin = Plugin(tmp_path / "plugin", *tokens(EXPIRED, ROTATING_TOKENS[1]))
    kube = client(kubeconfig(tmp_path / "kc", cluster.server, {"exec": plugin.spec()}))
    with ThreadPoolExecutor(16) as pool:
        kinds = set(pool.map(lambda _: kube.get_path(NAMESPACES)["kind"], range(48)))
    assert kinds == {"NamespaceList"}
    assert plugin.runs == 2, "the first run, then one for all the threads' 401s"
    kube.transport.close()


def test_an_expiring_plugin_credential_is_renewed_before_the_next_request(cluster: LocalCluster, tmp_path):
    plugin = Plugin(tmp_path / "plugin", *tokens(*ROTATING_TOKENS), lifetime=4)  # renewed after half its life
    kube = client(kubeconfig(tmp_path / "kc", cluster.server, {"exec": plugin.spec()}))
    kube.get_path(NAMESPACES)
    kube.get_path(NAMESPACES)
    assert plugin.runs == 1
    plugin.wait_until_half_life()
    kube.get_path(NAMESPACES)
    assert plugin.runs == 2
    assert kube.transport.stats.retries == 0, "renewed before it lapsed, not after a 401"
    kube.transport.close()


@pytest.mark.parametrize("source", ["exec", "tokenFile"])
def test_credentials_still_rejected_end_the_cli_with_one_line(cluster: LocalCluster, run, tmp_path, source):
    plugin = Plugin(tmp_path / "plugin", *tokens(EXPIRED))
    token = tmp_path / "token"
    token.write_text(EXPIRED)
    user = {"exec": plugin.spec()} if source == "exec" else {"tokenFile": str(token)}
    result = run("backup", "b1", kubeconfig=kubeconfig(tmp_path / "kc", cluster.server, user))
    named = f"exec plugin {str(plugin.script)!r}" if source == "exec" else f"token file {token}"
    again = "re-running it" if source == "exec" else "re-reading it"
    assert (result.code, result.out) == (1, "")
    assert result.err == (
        f"error: the API server rejected the credentials from {named} (401 Unauthorized) even after {again}\n"
    )
    assert plugin.runs == (2 if source == "exec" else 0)


def certificate(tmp_path: Path, name: str, subject: str, ca: tuple[Path, Path] | None) -> dict[str, str]:
    cert, key = issue_cert(subject, tmp_path / f"{name}.crt", tmp_path / f"{name}.key", ca)
    return {"clientCertificateData": cert.read_text(), "clientKeyData": key.read_text()}


def test_a_plugin_certificate_rejected_is_replaced_on_new_connections(cluster: LocalCluster, tmp_path):
    rogue = certificate(tmp_path, "rogue", "/CN=sv-cert/O=system:masters", None)  # signed by no CA the server knows
    good = certificate(tmp_path, "good", "/CN=sv-cert/O=system:masters", cluster.client_ca)
    plugin = Plugin(tmp_path / "plugin", rogue, good)
    kube = client(kubeconfig(tmp_path / "kc", cluster.server, {"exec": plugin.spec()}))
    assert kube.get_path(NAMESPACES)["kind"] == "NamespaceList"
    assert plugin.runs == 2
    kube.transport.close()


def test_an_expiring_plugin_certificate_is_used_once_renewed(cluster: LocalCluster, tmp_path):
    first = certificate(tmp_path, "first", "/CN=sv-cert/O=system:masters", cluster.client_ca)
    second = certificate(tmp_path, "second", "/CN=sv-cert-unbound", cluster.client_ca)  # may do nothing
    plugin = Plugin(tmp_path / "plugin", first, second, lifetime=4)
    kube = client(kubeconfig(tmp_path / "kc", cluster.server, {"exec": plugin.spec()}))
    assert kube.get_path(NAMESPACES)["kind"] == "NamespaceList"
    plugin.wait_until_half_life()
    with pytest.raises(KubeApiError) as err:
        kube.get_path(NAMESPACES)
    assert err.value.code == 403 and 'User "sv-cert-unbound"' in str(err.value), "the server saw the new certificate"
    kube.transport.close()
