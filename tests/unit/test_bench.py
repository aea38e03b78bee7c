"""The benchmark's synthetic backup (planning at 100k and 1M objects without a cluster) is made by the real backup
engine from a stand-in lister: it must keep serving what the engine asks of a cluster."""

from __future__ import annotations

from statusvault.catalog import verify
from statusvault.storage.local import LocalStore
from statusvault.testing.bench import synthetic_backup


def test_the_synthetic_backup_is_a_complete_verified_backup(tmp_path):
    store = LocalStore(tmp_path)
    result = synthetic_backup(store, "plan-bench", 1203)
    assert result.objects == 1203
    assert result.manifest["server"]["host"] == "https://synthetic.invalid"
    assert verify(store, "plan-bench").ok
