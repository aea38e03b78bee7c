"""Credential sources: token files re-read, exec plugins re-run on expiry and on refresh, one refresh per 401 burst."""

from __future__ import annotations

import datetime as dt
import math
import threading
import time
from pathlib import Path

import pytest

from statusvault.errors import ConfigError
from statusvault.kube.credentials import AuthProvider, ExecPlugin, Static, TokenFile, refresh_time
from tests.credentials import Plugin, tokens

NOW = dt.datetime(2030, 1, 1, tzinfo=dt.UTC).timestamp()


@pytest.mark.parametrize(
    ("expiry", "expected"),
    [
        (None, math.inf),
        ("2030-01-01T01:00:00Z", NOW + 3600 - 30),  # 30 s early
        ("2030-01-01T00:00:20+00:00", NOW + 10),  # short-lived: halfway
        ("2029-12-31T23:59:00Z", NOW - 60),  # already expired: at once
    ],
)
def test_refresh_time(expiry, expected):
    assert refresh_time(expiry, NOW) == pytest.approx(expected)


def test_refresh_time_refuses_garbage():
    with pytest.raises(ConfigError, match="unreadable expirationTimestamp 'soon'"):
        refresh_time("soon", NOW)


def test_token_file_is_re_read_on_refresh_not_before(tmp_path):
    path = tmp_path / "token"
    path.write_text("one\n")
    source = TokenFile(path)
    first = source.current()
    path.write_text("two")
    assert source.current() == first, "within the minute: the cached token"
    second = source.refresh(first)
    assert (second.token, source.current().token) == ("two", "two")
    assert source.refresh(first) == second, "a refresh for an older load returns the newer one, unread"
    assert second.serial > first.serial


def test_token_file_is_re_read_when_its_period_passes(tmp_path):
    path = tmp_path / "token"
    path.write_text("one")
    source = TokenFile(path, every=0.05)
    assert source.current().token == "one"
    path.write_text("two")
    time.sleep(0.1)
    assert source.current().token == "two"


def test_unreadable_token_file_names_it(tmp_path):
    with pytest.raises(ConfigError, match=f"cannot read token file {tmp_path / 'missing'}: No such file"):
        TokenFile(tmp_path / "missing").current()


def test_exec_plugin_runs_again_when_its_credential_expires(tmp_path):
    plugin = Plugin(tmp_path, *tokens("a", "b"), lifetime=1.0)  # re-run after half its life
    source = ExecPlugin(plugin.spec())
    assert source.current().token == "a" and source.current().token == "a"
    assert plugin.runs == 1
    time.sleep(0.8)
    assert source.current().token == "b"
    assert plugin.runs == 2


def test_many_refreshes_of_one_rejected_credential_run_the_plugin_once(tmp_path):
    plugin = Plugin(tmp_path, *tokens("bad", "good"))
    source = ExecPlugin(plugin.spec())
    rejected = source.current()
    results = []
    threads = [threading.Thread(target=lambda: results.append(source.refresh(rejected))) for _ in range(16)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert {r.token for r in results} == {"good"}
    assert plugin.runs == 2, "one start, one refresh"
    assert source.refresh(results[0]) == results[0], "just refreshed: not again within the cooldown"
    assert plugin.runs == 2


def test_exec_plugin_certificates_rotate_and_old_files_go(tmp_path):
    statuses = [{"clientCertificateData": f"CERT {i}", "clientKeyData": f"KEY {i}"} for i in range(4)]
    source = ExecPlugin(Plugin(tmp_path, *statuses).spec())
    source.cooldown = 0.0
    loads = [source.current()]
    for _ in range(3):
        loads.append(source.refresh(loads[-1]))
    assert [Path(c.cert_file).read_text() for c in loads[-2:]] == ["CERT 2", "CERT 3"]
    assert Path(loads[-1].key_file).read_text() == "KEY 3"
    from statusvault.kube import credentials

    kept = set(credentials._memory_files) | credentials._temp_files  # a closed memfd's number is reused: read them
    contents = {Path(p).read_bytes() for p in kept}
    assert {b"CERT 2", b"KEY 2", b"CERT 3", b"KEY 3"} <= contents, "two pairs are kept"
    assert not contents & {b"CERT 0", b"KEY 0", b"CERT 1", b"KEY 1"}, "the older ones are gone"
    assert loads[-1].token is None


@pytest.mark.parametrize(
    ("script", "message"),
    [
        ("echo 'login expired' >&2; exit 3", r"exec plugin '.*' failed \(exit 3\): login expired"),
        ("echo not-json", "exec plugin '.*' printed no ExecCredential JSON"),
        ("""echo '{"status": "x"}'""", "exec plugin '.*' printed an ExecCredential whose status is no mapping"),
    ],
)
def test_exec_plugin_failures_name_the_plugin(tmp_path, script, message):
    path = tmp_path / "plugin.sh"
    path.write_text(f"#!/bin/sh\n{script}\n")
    path.chmod(0o755)
    with pytest.raises(ConfigError, match=message):
        ExecPlugin({"command": str(path)}).current()


def test_exec_plugin_needs_a_command():
    with pytest.raises(ConfigError, match="exec plugin has no command"):
        ExecPlugin({"args": ["x"]})


def test_static_credentials_cannot_refresh():
    source = Static("kubeconfig user 'u'", "tok")
    assert source.current().token == "tok"
    assert source.refresh(source.current()) is None


def test_auth_provider_reads_through_its_hook_and_reloads_on_refresh():
    hook = {"token": "t1"}
    reloads = []

    def reload():
        reloads.append(1)
        return lambda: "reloaded"

    source = AuthProvider("the auth-provider of kubeconfig context 'c'", lambda: hook["token"], reload)
    first = source.current()
    assert source.current() == first, "the same token keeps its serial"
    hook["token"] = "t2"  # the hook renewed an expired token
    assert source.current().token == "t2"
    assert source.refresh(first).token == "t2" and reloads == [], "an older load: no reload"
    assert source.refresh(source.current()).token == "reloaded" and reloads == [1]


def test_a_kubeconfigs_embedded_key_is_kept_in_memory_not_left_on_disk(tmp_path, monkeypatch):
    """A client key from a kubeconfig's client-key-data never lands in $TMPDIR, where a SIGKILL would leave it: it
    lives in a memfd that the TLS layer reads through /proc/self/fd, and is gone with the process."""
    import tempfile

    from statusvault.kube import credentials
    from statusvault.kube.credentials import data_file, discard_files

    monkeypatch.setenv("TMPDIR", str(tmp_path))
    monkeypatch.setattr(tempfile, "tempdir", None)
    path = data_file(b"-----BEGIN PRIVATE KEY-----\nsecret\n", ".key")
    assert path.startswith("/proc/self/fd/") and list(tmp_path.iterdir()) == []
    with open(path, "rb") as f:
        assert f.read() == b"-----BEGIN PRIVATE KEY-----\nsecret\n", "read again from the start, as ssl reads it"
    discard_files([path])
    assert path not in credentials._memory_files and list(tmp_path.iterdir()) == []
