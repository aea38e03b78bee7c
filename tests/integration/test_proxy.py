"""Every request, WATCH streams included, through a real CONNECT proxy: from the kubeconfig's proxy-url, or from
HTTPS_PROXY unless NO_PROXY names the server. The API server is reached as `kube.test`, a name only the proxy
resolves, so nothing can bypass the proxy unnoticed."""

from __future__ import annotations

import threading
from pathlib import Path
from urllib.parse import urlsplit

import pytest
import yaml

from statusvault.errors import ExitStatus, KubeConnectionError
from statusvault.kube.client import KubeClient
from statusvault.kube.discovery import discover
from statusvault.kube.transport import load_transport
from statusvault.testing.cluster import ADMIN_TOKEN, kubeconfig_yaml
from statusvault.testing.fixtures import create_with_status
from tests.builders import cr, kc_status
from tests.connectproxy import ConnectProxy

pytestmark = pytest.mark.version_neutral("the CONNECT proxy is the client's transport")

KC = "xyz.example.com/v1"


@pytest.fixture
def proxy(cluster):
    with ConnectProxy({"kube.test": "127.0.0.1"}).running() as p:
        yield p


def kubeconfig(cluster, tmp_path: Path, proxy_url: str = "") -> Path:
    port = urlsplit(cluster.server).port
    doc = yaml.safe_load(kubeconfig_yaml(f"https://kube.test:{port}", "admin", ADMIN_TOKEN))
    if proxy_url:
        doc["clusters"][0]["cluster"]["proxy-url"] = proxy_url
    path = tmp_path / "kubeconfig"
    path.write_text(yaml.safe_dump(doc))
    return path


def test_the_kubeconfig_proxy_url_carries_a_backup_and_a_restore(run, cluster, crds, make, namespace, proxy, tmp_path):
    make(cr(KC, "KubernetesCluster", "a", status=kc_status(1)), namespace)
    config = kubeconfig(cluster, tmp_path, proxy.url)
    assert run("backup", "b", "-n", namespace, kubeconfig=config).code == ExitStatus.SUCCESS
    result = run("restore", "b", "--dry-run", "server", kubeconfig=config)
    assert result.code == ExitStatus.SUCCESS, result.out + result.err
    assert proxy.targets and set(proxy.targets) == {f"kube.test:{urlsplit(cluster.server).port}"}


def test_https_proxy_from_the_environment_and_no_proxy(run, cluster, proxy, tmp_path, monkeypatch):
    config = kubeconfig(cluster, tmp_path)
    monkeypatch.setenv("HTTPS_PROXY", proxy.url)
    assert run("cluster-info", kubeconfig=config).code == ExitStatus.SUCCESS
    assert proxy.targets, "the request went through the proxy"

    proxy.targets.clear()
    monkeypatch.setenv("NO_PROXY", "example.com,.test")
    result = run("cluster-info", kubeconfig=config)
    assert result.code != ExitStatus.SUCCESS and proxy.targets == [], "NO_PROXY: straight to kube.test"
    assert "cannot reach the API server" in result.err and len(result.err.strip().splitlines()) == 1


def test_a_watch_stream_goes_through_the_proxy(cluster, crds, namespace, proxy, tmp_path):
    client = KubeClient(load_transport(str(kubeconfig(cluster, tmp_path, proxy.url))))
    kc = discover(client).resolve("kc")
    events = []

    def watch() -> None:
        for ev in client.watch(kc, namespace, "", "", timeout=5):
            events.append(ev)
            if ev.type == "ADDED":
                return

    thread = threading.Thread(target=watch)
    thread.start()
    create_with_status(client, discover(client), cr(KC, "KubernetesCluster", "w", status=kc_status(2)), namespace)
    thread.join(timeout=30)
    assert [e.object["metadata"]["name"] for e in events if e.type == "ADDED"] == ["w"]
    assert all(t.startswith("kube.test:") for t in proxy.targets) and len(proxy.targets) >= 2


def test_a_proxy_that_demands_credentials(cluster, tmp_path):
    with ConnectProxy({"kube.test": "127.0.0.1"}, credentials="u:p@ss").running() as p:
        refused = KubeClient(load_transport(str(kubeconfig(cluster, tmp_path, p.url))))
        with pytest.raises(KubeConnectionError, match="refused a tunnel .* 407"):
            refused.server_version()
        url = p.url.replace("http://", "http://u:p%40ss@")
        granted = KubeClient(load_transport(str(kubeconfig(cluster, tmp_path, url))))
        assert granted.server_version()["gitVersion"]
