"""The CLI's factory gives each caller the client it asks for, whatever was asked before (no request is sent)."""

from __future__ import annotations

from statusvault.cli.app import App
from statusvault.testing.cluster import kubeconfig_yaml


def test_a_client_asked_for_with_settings_has_them_whatever_was_asked_before(tmp_path):
    path = tmp_path / "kubeconfig"
    path.write_text(kubeconfig_yaml("https://127.0.0.1:1", "admin", "token"))
    app = App(kubeconfig=str(path))
    first = app.client()  # discovery's, say, before the restore asks for its own
    assert app.client() is first, "asked without settings: the one made so far"
    restore = app.client(pool_size=20, qps=5.0, burst=7)
    assert restore is not first
    assert restore.transport._pool_size == 20
    assert (restore.transport.bucket.qps, restore.transport.bucket.burst) == (5.0, 7)
    assert app.client(pool_size=20, qps=5.0, burst=7) is restore and app.client() is restore
    app.close()
