"""The writer lease on a backup's name: a re-run replaces what a stopped run left, never what a live run is
writing, and a run whose lease was taken over lands nothing."""

from __future__ import annotations

import dataclasses
import datetime as dt
import logging
import subprocess
import threading
import time

import pytest

from statusvault.backup import BackupEngine, BackupRequest
from statusvault.errors import ArchiveError, BackupBusyError, BackupExistsError, LeaseLostError
from statusvault.kube.discovery import Discovery
from statusvault.storage import ObjectStore
from statusvault.storage.base import archive_key, manifest_key, writer_key
from statusvault.store import catalog
from statusvault.store.backups import BackupStore
from statusvault.store.retention import Candidate, RetentionPolicy, decide
from statusvault.store.writerlease import Process, WriterRecord, claim, stale_reason
from tests.golden import SELECTION, TYPES, GoldenKube

HERE = Process("node-a", 100, "boot-1", "pid:[4026531836]", 5000)
ELSEWHERE = Process("node-b", 4242)


def record(process: Process = ELSEWHERE, lease_seconds: float = 60.0) -> WriterRecord:
    return WriterRecord("other-writer", "b1", process, "2026-01-02T03:04:05Z", lease_seconds)


def ended(pid: int) -> int | None:
    return None


def running_since(start: int):
    return lambda pid: start


@pytest.mark.parametrize(
    ("lease", "age", "start_of", "why"),
    [
        (record(), 5.0, ended, None),  # another machine's: only its age tells
        (record(), 60.0, ended, "last renewed 60s ago"),
        (record(lease_seconds=600), 100.0, ended, None),  # the writer's own duration
        (record(lease_seconds=1e9), 3601.0, ended, "last renewed 3601s ago"),  # believed up to an hour
        (record(HERE), 5.0, running_since(5000), None),  # this machine's, still running
        (record(HERE), 5.0, ended, "has ended"),
        (record(HERE), 5.0, running_since(7777), "has ended"),  # its PID now another process's
        (record(dataclasses.replace(HERE, boot_id="boot-0")), 5.0, ended, None),  # an earlier boot: cannot tell
        (record(dataclasses.replace(HERE, pid_namespace="pid:[1]")), 5.0, ended, None),  # another container
        (record(dataclasses.replace(HERE, start=None)), 5.0, ended, None),  # no /proc where it ran
        (None, 5.0, ended, None),  # unreadable: kept for the default duration
        (None, 60.0, ended, "last renewed 60s ago"),
    ],
)
def test_a_lease_protects_its_writer_until_it_expires_or_its_process_is_known_to_have_ended(lease, age, start_of, why):
    reason = stale_reason(lease, age, HERE, start_of)
    assert (reason is None) == (why is None)
    if why is not None:
        assert why in reason


def test_a_record_round_trips_and_garbage_is_unreadable():
    rec = record(HERE)
    assert WriterRecord.parse(rec.to_json()) == rec
    for garbage in (b"", b"[]", b"{", b'{"kind": "something else"}', b'{"kind": "statusvault-writer", "pid": "x"}'):
        assert WriterRecord.parse(garbage) is None


def test_this_process_knows_itself():
    me = Process.this()
    assert me.pid > 1 and me.host and me.same_namespace(me)
    assert stale_reason(record(me), 1.0, me) is None, "alive"
    finished = subprocess.Popen(["true"])
    finished.wait()
    assert "has ended" in (stale_reason(record(dataclasses.replace(me, pid=finished.pid)), 1.0, me) or "")


# --- claiming a name in each kind of store ---


def plant(store: ObjectStore, lease: WriterRecord | None = None, archive: bool = True, manifest: bool = False) -> None:
    if archive:
        store.put(archive_key("b1"), b"archive of a stopped run")
    if manifest:
        store.put(manifest_key("b1"), b"{}")
    if lease is not None:
        store.put(writer_key("b1"), lease.to_json())


def keys(store: ObjectStore) -> list[str]:
    return sorted(o.key for o in store.list("backups/"))


def dead_process() -> Process:
    finished = subprocess.Popen(["true"])
    finished.wait()
    return dataclasses.replace(Process.this(), pid=finished.pid)


def test_a_new_name_is_taken_with_a_lease_naming_this_run_and_released_without_a_trace(store):
    lease = claim(store, "b1")
    stored = WriterRecord.parse(store.get(writer_key("b1")))
    assert stored is not None and stored.writer == lease.record.writer and stored.process.pid == Process.this().pid
    lease.release()
    assert keys(store) == []


@pytest.mark.parametrize("leftover_lease", [False, True])
def test_a_complete_backup_is_never_replaced(store, leftover_lease):
    plant(store, record(dead_process()) if leftover_lease else None, manifest=True)
    before = keys(store)
    with pytest.raises(BackupExistsError, match="backup 'b1' already exists"):
        claim(store, "b1")
    assert keys(store) == before


@pytest.mark.parametrize(
    ("leftover", "reason"),
    [
        ("no lease", "it has no writer lease"),
        ("an expired lease", "last renewed"),
        ("the lease of a process that has ended", "has ended"),
        ("only an expired lease", "last renewed"),
    ],
)
def test_what_a_stopped_run_left_is_replaced(store, caplog, leftover, reason):
    lease = {
        "no lease": None,
        "an expired lease": record(lease_seconds=0.001),
        "the lease of a process that has ended": record(dead_process()),
        "only an expired lease": record(lease_seconds=0.001),
    }[leftover]
    plant(store, lease, archive=leftover != "only an expired lease")
    time.sleep(0.01)
    with caplog.at_level(logging.INFO):
        mine = claim(store, "b1")
    assert keys(store) == [writer_key("b1")]
    stored = WriterRecord.parse(store.get(writer_key("b1")))
    assert stored is not None and stored.writer == mine.record.writer
    assert "replacing the incomplete backup a stopped run left" in caplog.text and reason in caplog.text
    mine.release()


@pytest.mark.parametrize("writer", ["another machine's", "this process's"])
def test_a_live_writer_keeps_its_name(store, writer):
    theirs = record() if writer == "another machine's" else record(Process.this())
    plant(store, theirs)
    before = {k: store.get(k) for k in keys(store)}
    with pytest.raises(BackupBusyError) as refused:
        claim(store, "b1")
    message = str(refused.value)
    assert "\n" not in message
    assert "backup 'b1' is being written by another run" in message
    assert f"{theirs.process.host} (pid {theirs.process.pid}) since 2026-01-02T03:04:05Z" in message
    assert "wait for it to finish" in message
    assert {k: store.get(k) for k in keys(store)} == before, "nothing of the live run was touched"


def test_of_two_runs_claiming_one_name_at_once_exactly_one_wins(conditional_store):
    """Without conditional writes (the bare protocol) a simultaneous claim is narrowed, not excluded."""
    store = conditional_store
    plant(store, record(lease_seconds=0.001))  # both find a stopped run's leftovers
    time.sleep(0.01)
    start, won, refused, other = threading.Barrier(6), [], [], []

    def contend() -> None:
        start.wait()
        try:
            won.append(claim(store, "b1"))
        except BackupBusyError as e:
            refused.append(e)
        except Exception as e:  # named in the assertion below
            other.append(e)

    threads = [threading.Thread(target=contend) for _ in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert (len(won), len(refused), other) == (1, 5, [])
    stored = WriterRecord.parse(store.get(writer_key("b1")))
    assert stored is not None and stored.writer == won[0].record.writer


def test_a_lease_taken_over_or_removed_is_lost_and_left_to_its_new_owner(store):
    lease = claim(store, "b1")
    lease.renew()
    store.put(writer_key("b1"), record().to_json())  # a run that judged this one stopped took the name
    with pytest.raises(LeaseLostError, match="another run took over its name"):
        lease.renew()
    assert lease.lost.is_set()
    lease.release()
    assert WriterRecord.parse(store.get(writer_key("b1"))) == record(), "the new owner's lease stays"

    again = claim(store, "b2")
    store.delete(writer_key("b2"))  # deleted under the run (`delete`, or a takeover that has ended)
    with pytest.raises(LeaseLostError):
        again.renew()


def test_the_heartbeat_renews_and_notices_a_takeover(store):
    with claim(store, "b1", renew_seconds=0.05) as lease:
        deadline = time.monotonic() + 5
        while lease.record.renewals < 2 and time.monotonic() < deadline:
            time.sleep(0.02)
        assert lease.record.renewals >= 2
        stored = WriterRecord.parse(store.get(writer_key("b1")))
        assert stored is not None and stored.renewals >= 1
        store.put(writer_key("b1"), record().to_json())
        assert lease.lost.wait(5)
    assert WriterRecord.parse(store.get(writer_key("b1"))) == record()


# --- the backup engine ---


class TakeOver(GoldenKube):
    """A cluster whose first LIST page arrives after another run took the backup's name over."""

    def __init__(self, store: ObjectStore):
        super().__init__()
        self.store = store

    def list_pages(self, *args, **kwargs):
        if self.store is not None:
            self.store.put(writer_key("b1"), record().to_json())
            self.store = None
        yield from super().list_pages(*args, **kwargs)


def backup(store: ObjectStore, kube: GoldenKube | None = None):
    request = BackupRequest(store=store, name="b1", selection=SELECTION)
    return BackupEngine(kube or GoldenKube(), Discovery(TYPES, TYPES), request).run()  # type: ignore[arg-type]


def test_a_rerun_replaces_what_a_killed_backup_left_and_lands_a_complete_backup(store):
    plant(store, record(dead_process()))  # killed after its archive landed, before its manifest
    result = backup(store)
    assert keys(store) == [archive_key("b1"), manifest_key("b1")], "its lease went once the manifest landed"
    assert [(b.name, b.phase) for b in catalog.list_backups(store)] == [("b1", "Completed")]
    assert catalog.verify(store, "b1").ok and result.objects > 0
    with pytest.raises(BackupExistsError):
        backup(store)


def test_a_backup_being_written_is_not_replaced(store):
    plant(store, record())
    before = {k: store.get(k) for k in keys(store)}
    with pytest.raises(BackupBusyError):
        backup(store)
    assert {k: store.get(k) for k in keys(store)} == before


def test_a_backup_that_lost_its_lease_mid_write_lands_nothing(store):
    with pytest.raises(LeaseLostError):
        backup(store, TakeOver(store))
    assert keys(store) == [writer_key("b1")], "no archive, no manifest"
    assert WriterRecord.parse(store.get(writer_key("b1"))) == record()


# --- the catalog: Completed, Writing, Incomplete ---


def test_list_tells_a_backup_being_written_from_one_a_stopped_run_left(store):
    for name, lease in (("live", record()), ("stopped", record(dead_process())), ("old", None)):
        store.put(archive_key(name), b"x")
        if lease is not None:
            store.put(writer_key(name), dataclasses.replace(lease, backup=name).to_json())
    backup(store)
    store.put(writer_key("b1"), record(dead_process()).to_json())  # a lease left beside a landed manifest
    infos = {b.name: b for b in catalog.list_backups(store)}
    assert {n: b.phase for n, b in infos.items()} == {
        "b1": "Completed",
        "live": "Writing",
        "stopped": "Incomplete",
        "old": "Incomplete",
    }
    assert infos["live"].to_dict()["writer"] == "node-b (pid 4242) since 2026-01-02T03:04:05Z"
    assert infos["live"].size == 1, "the lease is not the backup's"


def test_a_backup_being_written_cannot_be_described_restored_or_deleted(store):
    plant(store, record())
    with pytest.raises(ArchiveError, match="backup 'b1' is being written by another run"):
        catalog.describe(store, "b1")
    with pytest.raises(BackupBusyError, match="being written"):
        BackupStore(store).delete("b1")
    store.put(writer_key("b1"), record(lease_seconds=0.001).to_json())
    time.sleep(0.01)
    with pytest.raises(ArchiveError, match="incomplete"):
        catalog.describe(store, "b1")
    assert BackupStore(store).delete("b1")
    assert keys(store) == []


def test_prune_never_deletes_a_backup_being_written():
    now = dt.datetime(2026, 1, 2, tzinfo=dt.UTC)
    old = now - dt.timedelta(days=2)
    found = [Candidate("running", old, False, writing=True), Candidate("stopped", old, False)]
    decisions = {d.name: d for d in decide(found, RetentionPolicy(keep_last=1), now)}
    assert not decisions["running"].delete and decisions["running"].reason == "being written"
    assert decisions["stopped"].delete
