from __future__ import annotations

import base64
import json
import os
import stat

import pytest
import yaml

from statusvault.errors import ConfigError
from statusvault.kube import kubeconfig
from statusvault.kube.credentials import ExecPlugin, Static, TokenFile
from statusvault.kube.kubeconfig import load
from tests.credentials import Plugin, tokens


def write(path, clusters=(), users=(), contexts=(), current=""):
    path.write_text(
        yaml.safe_dump(
            {
                "apiVersion": "v1",
                "kind": "Config",
                "current-context": current,
                "clusters": [{"name": n, "cluster": c} for n, c in clusters],
                "users": [{"name": n, "user": u} for n, u in users],
                "contexts": [{"name": n, "context": {"cluster": c, "user": u}} for n, c, u in contexts],
            }
        )
    )
    return path


def test_token_and_ca_data(tmp_path):
    ca = base64.b64encode(b"-----CA-----").decode()
    path = write(
        tmp_path / "kc",
        [("c", {"server": "https://k:6443/", "certificate-authority-data": ca})],
        [("u", {"token": "abc"})],
        [("ctx", "c", "u")],
        "ctx",
    )
    cfg = load(str(path))
    assert (cfg.host, cfg.verify, cfg.token()) == ("https://k:6443", True, "abc")
    with open(cfg.ca_file, "rb") as f:
        assert f.read() == b"-----CA-----"


def test_context_flag_relative_files_and_insecure(tmp_path):
    (tmp_path / "certs").mkdir()
    (tmp_path / "certs" / "token").write_text("from-file\n")
    path = write(
        tmp_path / "kc",
        [("a", {"server": "https://a"}), ("b", {"server": "https://b", "insecure-skip-tls-verify": True})],
        [
            ("ua", {"token": "ta"}),
            ("ub", {"tokenFile": "certs/token", "client-certificate": "certs/c.crt", "client-key": "certs/c.key"}),
        ],
        [("one", "a", "ua"), ("two", "b", "ub")],
        "one",
    )
    cfg = load(str(path), context="two")
    assert (cfg.host, cfg.verify, cfg.token()) == ("https://b", False, "from-file")
    assert cfg.cert_file == str(tmp_path / "certs" / "c.crt")
    with pytest.raises(ConfigError, match="context 'three' not found"):
        load(str(path), context="three")


def test_kubeconfig_list_merges_first_wins(tmp_path, monkeypatch):
    first = write(tmp_path / "1", [("c", {"server": "https://first"})], [], [], "ctx")
    second = write(
        tmp_path / "2", [("c", {"server": "https://second"})], [("u", {"token": "t"})], [("ctx", "c", "u")], "other"
    )
    monkeypatch.setenv("KUBECONFIG", f"{first}{os.pathsep}{second}")
    cfg = load()
    assert (cfg.host, cfg.token()) == ("https://first", "t")


def test_exec_plugin_token_is_cached(tmp_path):
    counter = tmp_path / "calls"
    script = tmp_path / "plugin.sh"
    script.write_text(
        "#!/bin/sh\necho x >> {}\necho '{}'\n".format(
            counter,
            json.dumps(
                {
                    "apiVersion": "client.authentication.k8s.io/v1",
                    "kind": "ExecCredential",
                    "status": {"token": "exec-token", "expirationTimestamp": "2999-01-01T00:00:00Z"},
                }
            ),
        )
    )
    script.chmod(script.stat().st_mode | stat.S_IEXEC)
    path = write(
        tmp_path / "kc",
        [("c", {"server": "https://k"})],
        [("u", {"exec": {"apiVersion": "client.authentication.k8s.io/v1", "command": str(script)}})],
        [("ctx", "c", "u")],
        "ctx",
    )
    cfg = load(str(path))
    assert cfg.token() == "exec-token" and cfg.token() == "exec-token"
    assert counter.read_text().count("x") == 1


def test_missing_kubeconfig_and_in_cluster(tmp_path, monkeypatch):
    monkeypatch.delenv("KUBECONFIG", raising=False)
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    with pytest.raises(ConfigError, match="no kubeconfig found"):
        load()
    sa = tmp_path / "sa"
    sa.mkdir()
    (sa / "token").write_text("sa-token")
    (sa / "ca.crt").write_text("ca")
    monkeypatch.setattr(kubeconfig, "SA_DIR", sa)
    monkeypatch.setenv("KUBERNETES_SERVICE_HOST", "10.0.0.1")
    monkeypatch.setenv("KUBERNETES_SERVICE_PORT", "443")
    cfg = load()
    assert (cfg.host, cfg.token(), cfg.ca_file) == ("https://10.0.0.1:443", "sa-token", str(sa / "ca.crt"))
    (sa / "token").write_text("rotated")  # the kubelet rewrote the bound token
    assert cfg.credentials.refresh(cfg.credentials.current()).token == "rotated"
    assert cfg.credentials.description == f"token file {sa / 'token'}"


def test_each_user_entry_gets_its_credential_source(tmp_path):
    (tmp_path / "token").write_text("t")
    plugin = Plugin(tmp_path / "plugin", *tokens("e"))
    users = {"static": {"token": "s"}, "file": {"tokenFile": "token"}, "exec": {"exec": plugin.spec()}, "none": {}}
    path = write(
        tmp_path / "kc",
        [("c", {"server": "https://k"})],
        list(users.items()),
        [(name, "c", name) for name in users],
        "static",
    )
    sources = {name: load(str(path), context=name).credentials for name in users}
    assert [type(s) for s in sources.values()] == [Static, TokenFile, ExecPlugin, Static]
    assert [s.description for s in sources.values()] == [
        "kubeconfig user 'static'",
        f"token file {tmp_path / 'token'}",
        f"exec plugin {plugin.spec()['command']!r}",
        "kubeconfig user 'none'",
    ]
    assert plugin.runs == 0, "a plugin runs when a request needs it, not at load"


def test_malformed_kubeconfig(tmp_path):
    path = tmp_path / "kc"
    path.write_text("- just\n- a list\n")
    with pytest.raises(ConfigError, match="is not a mapping"):
        load(str(path))


def test_legacy_auth_provider_goes_through_the_kubernetes_client(tmp_path):
    provider = {"name": "gcp", "config": {"access-token": "gcp-token", "expiry": "2999-01-01T00:00:00Z"}}
    path = write(
        tmp_path / "kc",
        [("c", {"server": "https://k/"})],
        [("u", {"auth-provider": provider})],
        [("ctx", "c", "u")],
        "ctx",
    )
    cfg = load(str(path))
    assert (cfg.host, cfg.token()) == ("https://k", "gcp-token")
    assert cfg.credentials.description == "the auth-provider of kubeconfig context 'ctx'"
    first = cfg.credentials.current()
    again = cfg.credentials.refresh(first)
    assert again.token == "gcp-token" and again.serial > first.serial, "the kubeconfig was loaded again"


def test_worker_processes_get_the_context_in_use_by_name(tmp_path, monkeypatch):
    """Workers load the kubeconfig again: the context this process uses is pinned by name, so switching the
    file's current-context during a run does not point them at another cluster."""
    clusters = [("a", {"server": "https://a"}), ("b", {"server": "https://b"})]
    contexts = [("ctx-a", "a", "u"), ("ctx-b", "b", "u")]
    path = write(tmp_path / "config", clusters, [("u", {"token": "t"})], contexts, "ctx-a")
    pinned = kubeconfig.current_context(str(path))
    assert pinned == "ctx-a"
    write(path, clusters, [("u", {"token": "t"})], contexts, "ctx-b")  # `kubectl config use-context ctx-b`
    assert load(str(path), pinned).host == "https://a"
    monkeypatch.delenv("KUBECONFIG", raising=False)
    assert kubeconfig.current_context(str(tmp_path / "none")) is None, "no kubeconfig: in a pod, nothing to pin"
