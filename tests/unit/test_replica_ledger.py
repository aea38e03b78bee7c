"""Where a fenced workload's replica count is kept (restore/quiet/scaledown.py ReplicaLedger): the restore's journal and
the store, never the workload; a count survives --restart and the loss of the local state; a store that cannot be
written leaves the journal keeping it; a count a store writer made up beyond belief is not taken."""

from __future__ import annotations

from pathlib import Path

import orjson
import pytest

from statusvault.errors import StorageError
from statusvault.model import ResourceType
from statusvault.restore.core.journal import Journal
from statusvault.restore.quiet.scaledown import MAX_KEPT, ReplicaLedger, Workload
from statusvault.restore.running.state import _carried, _earlier
from statusvault.storage.base import fence_key
from statusvault.storage.local import LocalStore

DEPLOYMENTS = ResourceType("apps", "v1", "deployments", "Deployment", True)
OP = Workload(DEPLOYMENTS, "ops", "op")
KEY = "b-0123456789abcdef"


class ReadOnly(LocalStore):
    def put(self, key: str, data: bytes) -> None:
        raise StorageError(f"cannot write {key}: access denied (injected)")


def test_a_count_is_kept_in_the_journal_and_the_store_and_forgotten_once_back(tmp_path):
    store, journal = LocalStore(tmp_path / "store"), Journal.create(tmp_path / "j.sqlite")
    ledger = ReplicaLedger(journal, store, KEY)
    ledger.record(OP, 3)

    assert journal.scale_count(OP.spec) == 3 and journal.scaled() == [OP.spec]
    assert orjson.loads(store.get(fence_key(KEY))) == {"restore": KEY, "workloads": {OP.spec: 3}}
    assert ReplicaLedger(None, store, KEY).count(OP) == 3, "a run whose local state is gone finds it in the store"
    assert ReplicaLedger(journal, None, KEY).count(OP) == 3
    ledger.record(OP, 0)
    assert ReplicaLedger(journal, None, KEY).count(OP) == 3, "never fenced twice: a second count of 0 is not kept"

    ledger.forget(OP)
    assert journal.scaled() == [] and not store.exists(fence_key(KEY)) and ledger.count(OP) is None


def test_a_store_that_cannot_be_written_leaves_the_journal_keeping_it(tmp_path, caplog):
    journal = Journal.create(tmp_path / "j.sqlite")
    ledger = ReplicaLedger(journal, ReadOnly(tmp_path / "store"), KEY)
    ledger.record(OP, 2)
    assert ledger.count(OP) == 2 and journal.scale_count(OP.spec) == 2
    assert "only this machine's journal keeps them" in caplog.text


@pytest.mark.parametrize("count", [MAX_KEPT + 1, -1, "3", None])
def test_a_count_in_the_store_beyond_belief_is_not_taken(tmp_path, count):
    store = LocalStore(tmp_path / "store")
    store.put(fence_key(KEY), orjson.dumps({"restore": KEY, "workloads": {OP.spec: count}}))
    assert ReplicaLedger(None, store, KEY).count(OP) is None


def test_restart_carries_the_counts_of_what_the_earlier_run_left_at_zero(tmp_path):
    path = Path(tmp_path / "j.sqlite")
    earlier = Journal.create(path, "statusvault-restore-1")
    earlier.mark_scaled(OP.spec, 4)
    earlier.close()
    manager, counts = _earlier(path)
    assert (manager, counts) == ("statusvault-restore-1", {OP.spec: 4})
    fresh = _carried(Journal.create(path, manager), counts)
    assert fresh.scale_count(OP.spec) == 4
