"""`move` against two in-memory API servers (tests/fake/): a kill at each step, then the same command again (it
resumes) or --abort (it gives the move up); a restore that fails part-way.

A kill is an exception no code catches (`Killed`), raised from a hook at the step; cleanup code still runs, so
where a kill -9 would leave something behind (a backup's archive without its manifest), the store plays dead
and keeps it."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from statusvault.errors import StatusVaultError
from statusvault.kube.discovery import Discovery
from statusvault.model import Selection
from statusvault.move import AbortReport, MoveReport, MoveRequest, Side, abort_move, request_name, run_move
from statusvault.restore.core.pausemarkers import RECORD
from statusvault.restore.options import RestoreOptions
from statusvault.storage.base import WRITER_FILE, backup_prefix, manifest_key
from statusvault.storage.local import LocalStore
from statusvault.vocabulary.kinds import CRDS, NAMESPACES
from tests.builders import cr, crd, resource_type
from tests.fake import FakeKube

DB = resource_type("db.example.com", "Instance")
NS = "team-a"
PAUSED = "crossplane.io/paused"  # --pause auto's marker for crossplane-shaped objects (spec.forProvider)
NAMES = [f"db-{i}" for i in range(4)]


class Killed(BaseException):
    """The process dies here: nothing catches it."""


class Store(LocalStore):
    """A directory store that, once `dead`, deletes nothing (a killed process cleans nothing up), and can kill
    the move as it writes `kill_at`."""

    dead = False
    kill_at = ""

    def put(self, key: str, data: bytes) -> None:
        if key == self.kill_at:
            self.kill_at, self.dead = "", True
            raise Killed(key)
        super().put(key, data)

    def delete(self, key: str) -> None:
        if not self.dead:
            super().delete(key)


class Move:
    """A source with four paused-by-convention databases, an empty target, a store; kill points and runs."""

    def __init__(self, tmp_path, delete_source: bool = False):
        self.source, self.target = FakeKube(), FakeKube()
        self.source.server, self.target.server = "https://source.invalid", "https://target.invalid"
        self.source.put(CRDS, crd("db.example.com", "Instance"))
        for ns_host in (self.source, self.target):
            ns_host.put(NAMESPACES, {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NS}})
        for i, name in enumerate(NAMES):
            body = cr("db.example.com/v1", "Instance", name, spec={"forProvider": {"size": i}})
            self.source.put(DB, {**body, "metadata": {**body["metadata"], "namespace": NS}})
            live = self.source.get(DB, NS, name)
            self.source.replace(DB, NS, name, {**live, "status": {"id": f"ext-{i}"}}, sub="status")
        self.store = Store(tmp_path / "store")
        self.refreshes: list[Callable[[], None]] = []  # kills at the target's next rediscoveries, in turn
        self.request = MoveRequest(
            source=Side(self.source, lambda refresh: self.source.discovery(NAMESPACES)),
            target=Side(self.target, self._target_discovery),
            store=self.store,
            selection=Selection(namespaces=(NS,)),
            options=RestoreOptions(),
            state_dir=tmp_path / "state",
            parallel=2,
            delete_source=delete_source,
        )

    def _target_discovery(self, refresh: bool) -> Discovery:
        if refresh and self.refreshes:
            self.refreshes.pop(0)()
        return self.target.discovery(NAMESPACES)

    def run(self) -> MoveReport:
        return run_move(self.request)

    def abort(self) -> AbortReport:
        return abort_move(self.request)

    def killed_at(self, step: str) -> None:
        """Run the move and kill it at `step`; the store comes back to life afterwards."""
        arm = getattr(self, "_kill_" + step.replace("-", "_"))
        arm()
        with pytest.raises(Killed):
            self.run()
        for host in (self.source, self.target):
            for verb in ("create", "update", "patch", "delete"):
                host.before(verb, None)
        self.refreshes.clear()
        self.store.dead = False
        for stored in self.store.list("backups/"):  # the killed run's writer lease: its process has ended, which
            if stored.key.endswith("/" + WRITER_FILE):  # a re-run on the same machine sees at once (here, the
                self.store.delete(stored.key)  # process lives on: the lease goes as its expiry would take it)

    def _kill_pause(self) -> None:
        """As the third source object is being paused (two are)."""
        self.source.before("patch", lambda name: _die() if name == "db-2" else None)

    def _kill_backup(self) -> None:
        """After the backup's archive landed, before its manifest (the record) was written."""
        self.store.kill_at = manifest_key(request_name(self.request))

    def _kill_crds(self) -> None:
        """In the target's restore, once the CRD is Established, before any database is created."""
        self.refreshes.append(_die)

    def _kill_verify(self) -> None:
        """After the restore (databases unpaused in the target), as the move starts verifying."""
        self.refreshes.extend([lambda: None, _die])

    def _kill_delete_source(self) -> None:
        """As the third source database is being deleted (two are)."""
        self.source.before("delete", lambda name: _die() if name == "db-2" else None)

    # --- what the clusters hold ---

    def annotations(self, host: FakeKube) -> dict[str, dict[str, str]]:
        found = {n: host.get(DB, NS, n) for n in NAMES}
        return {n: (o["metadata"].get("annotations") or {}) for n, o in found.items() if o is not None}

    def paused(self, host: FakeKube) -> list[str]:
        return sorted(n for n, a in self.annotations(host).items() if a.get(PAUSED) == "true")

    def statuses(self, host: FakeKube) -> dict[str, object]:
        return {n: host.get(DB, NS, n).get("status") for n in self.annotations(host)}

    def record_kept(self) -> bool:
        return self.store.exists(manifest_key(request_name(self.request)))


def _die() -> None:
    raise Killed()


@pytest.fixture
def move(tmp_path) -> Move:
    return Move(tmp_path)


def test_a_move_pauses_the_source_restores_paused_verifies_and_unpauses_the_target(move):
    report = move.run()
    assert report.succeeded and report.source_paused == 4 and report.verify_problems == []
    assert move.statuses(move.target) == {n: {"id": f"ext-{i}"} for i, n in enumerate(NAMES)}
    assert move.paused(move.target) == [], "unpaused in the target"
    assert not any(RECORD in a for a in move.annotations(move.target).values())
    assert move.paused(move.source) == NAMES, "the source stays paused"
    assert move.run().succeeded, "a re-run of a finished move finds it done"


STEPS = ["pause", "backup", "crds", "verify", "delete-source"]
RERUN = {  # (created, resumed from the journal, skipped as existing) of the CRD and four databases
    "pause": (5, 0, 0),  # no record yet: a fresh move
    "backup": (5, 0, 0),
    "crds": (4, 1, 0),  # the CRD was done
    "verify": (0, 0, 5),  # the restore had finished: planned again, everything exists
    "delete-source": (0, 0, 5),
}


@pytest.mark.parametrize("step", STEPS)
def test_a_move_killed_at_any_step_is_finished_by_the_same_command(tmp_path, step):
    move = Move(tmp_path, delete_source=step == "delete-source")
    move.killed_at(step)
    report = move.run()
    assert report.succeeded, (report.verify_problems, report.restore and report.restore.report.to_dict())
    results = report.restore.report.counts()["results"]
    created_resumed_skipped = (results.get("created", 0), report.restore.report.resumed, results.get("skipped", 0))
    assert created_resumed_skipped == RERUN[step], "the CRD and four databases: what the re-run does of them"
    assert report.source_paused == (2 if step == "pause" else 0), "the re-run pauses only what is not paused yet"
    assert report.source_deleted == (2 if step == "delete-source" else 0), "and deletes what is left"
    assert move.statuses(move.target) == {n: {"id": f"ext-{i}"} for i, n in enumerate(NAMES)}
    assert move.paused(move.target) == [], "unpaused in the target"
    if step == "delete-source":
        assert move.annotations(move.source) == {}, "every moved object deleted from the source"
    else:
        assert move.paused(move.source) == NAMES, "the source stays paused"
    assert move.record_kept()


@pytest.mark.parametrize(
    ("step", "record_dropped"),
    [("pause", False), ("backup", True), ("crds", True)],
)
def test_a_move_killed_before_its_objects_are_live_in_the_target_is_given_up_by_abort(tmp_path, step, record_dropped):
    move = Move(tmp_path)
    move.killed_at(step)
    report = move.abort()
    assert report.record_dropped == record_dropped
    assert list(move.store.list(backup_prefix(request_name(move.request)))) == [], "nothing of the move is stored"
    assert move.paused(move.source) == [], "the source is unpaused"
    assert not any(RECORD in a for a in move.annotations(move.source).values())
    assert move.annotations(move.target) == {}, "no copy left in the target"
    assert move.run().succeeded, "and the same command then starts a fresh move"


@pytest.mark.parametrize("step", ["verify", "delete-source"])
def test_abort_is_refused_once_the_objects_are_live_in_the_target(tmp_path, step):
    move = Move(tmp_path, delete_source=step == "delete-source")
    move.killed_at(step)
    with pytest.raises(StatusVaultError, match=r"4 object\(s\) are live \(not paused\) in the target"):
        move.abort()
    assert move.record_kept(), "nothing changed"
    assert move.paused(move.source) == (NAMES if step == "verify" else NAMES[2:])


def test_a_restore_that_fails_part_way_leaves_its_copies_paused_and_abort_deletes_exactly_those(move):
    move.target.fail("create", DB, 403, name="db-3")
    report = move.run()
    assert not report.succeeded and [f.name for f in report.restore.report.failures] == ["db-3"]
    assert move.paused(move.target) == NAMES[:3], "left paused: the restore did not finish"
    assert move.paused(move.source) == NAMES
    aborted = move.abort()
    assert (aborted.target_deleted, aborted.record_dropped, aborted.source_unpaused) == (3, True, 4)
    assert move.annotations(move.target) == {} and move.paused(move.source) == []


def test_a_restore_that_fails_part_way_is_finished_by_the_same_command(move):
    move.target.fail("create", DB, 403, name="db-3")
    assert not move.run().succeeded
    report = move.run()
    assert report.succeeded and report.restore.report.resumed == 3 + 1, "the three databases and the CRD were done"
    assert move.statuses(move.target) == {n: {"id": f"ext-{i}"} for i, n in enumerate(NAMES)}
    assert move.paused(move.target) == []


def test_strict_is_judged_before_delete_source_deletes_anything(tmp_path):
    """`move --strict --delete-source`: a write the target's server answered with a Warning makes the move partial
    under --strict, so the source is kept (paused) and the verdict says why; without --strict the same move deletes."""
    import dataclasses

    from statusvault.restore.results.verdict import RunOutcome, Shortfall

    for strict in (True, False):
        move = Move(tmp_path / str(strict), delete_source=True)
        move.request = dataclasses.replace(move.request, strict=strict)
        move.target.warn["db-1"] = "example.com/v1 Instance is deprecated"
        report = move.run()
        if strict:
            assert report.verdict.outcome is RunOutcome.PARTIAL
            assert report.verdict.shortfalls == (Shortfall.SERVER_WARNED,)
            assert report.source_deleted == 0 and move.paused(move.source) == NAMES, "nothing deleted in the source"
        else:
            assert report.verdict.outcome is RunOutcome.DONE and report.source_deleted == 4


def test_a_read_back_that_finds_the_target_short_is_a_shortfall_of_the_verdict(move):
    from statusvault.restore.results.verdict import RunOutcome, Shortfall

    report = move.run()
    assert report.succeeded
    report.verify_problems = ["db.example.com team-a/db-1 lacks its saved status in the target"]
    judged = report.verdict
    assert judged.outcome is RunOutcome.PARTIAL and judged.shortfalls == (Shortfall.MOVE_NOT_VERIFIED,)
    assert "db-1 lacks its saved status" in judged.message("move m") and judged.exit_status == 3
