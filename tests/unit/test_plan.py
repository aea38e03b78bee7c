"""The plan (read-only once sealed) and the journal: ordering by owner depth, reading back wave by wave,
what is left to do, clean-up."""

from __future__ import annotations

import sqlite3

import pytest

from statusvault.errors import StatusVaultError
from statusvault.restore.core.journal import Journal
from statusvault.restore.core.plan import MAX_OWNER_DEPTH, Action, Category, PlanItem, RestorePlan, StatusMode
from tests.builders import resource_type

KC = resource_type("xyz.example.com", "KubernetesCluster")


def item(name, uid="", category=Category.NAMESPACED):
    return PlanItem(KC, "team-a", "team-a", name, uid, category, Action.CREATE, StatusMode.SUBRESOURCE)


@pytest.fixture
def plan():
    with RestorePlan("b", {}) as p:
        yield p


def names(plan):
    return [[i.name for i in plan.items(w)] for w in plan.waves()]


def test_owners_come_before_dependents_at_any_depth(plan):
    plan.add(item("grandchild", "u3"), ["u2"])
    plan.add(item("child", "u2"), ["u1"])
    plan.add(item("root", "u1"))
    plan.add(item("orphan", "u4"), ["not-in-plan"])
    plan.seal()
    assert names(plan) == [["root", "orphan"], ["child"], ["grandchild"]]
    assert [w.depth for w in plan.waves()] == [0, 1, 2]
    assert not plan.warnings


def test_a_dependent_waits_for_its_deepest_owner(plan):
    plan.add(item("a", "ua"))
    plan.add(item("b", "ub"), ["ua"])
    plan.add(item("c", "uc"), ["ua", "ub"])
    plan.seal()
    assert names(plan) == [["a"], ["b"], ["c"]]


def grouped(name, group, uid="", category=Category.NAMESPACED):
    it = item(name, uid, category)
    it.group = group
    return it


def test_order_groups_lead_the_wave_order_and_dependents_follow_their_owners_group(plan):
    plan.add(grouped("ns", 0, category=Category.NAMESPACE))
    plan.add(grouped("late-owner", 2, "u1", Category.CLUSTER))
    plan.add(grouped("its-dependent", 1, "u2"), ["u1"])  # follows its owner into group 2
    plan.add(grouped("early", 1, "u3"))
    plan.add(grouped("plain", 0, "u4"))
    plan.seal()
    assert [(w.group, w.category, w.depth) for w in plan.waves()] == [
        (0, Category.NAMESPACE, 0), (0, Category.NAMESPACED, 0), (1, Category.NAMESPACED, 0),
        (2, Category.CLUSTER, 0), (2, Category.NAMESPACED, 1),
    ]  # fmt: skip
    assert names(plan) == [["ns"], ["plain"], ["early"], ["late-owner"], ["its-dependent"]]
    assert plan.group_counts() == {0: 2, 1: 1, 2: 2}


def test_only_owners_keep_their_old_uid(plan):
    plan.add(item("owner", "u1"))
    plan.add(item("dependent", "u2"), ["u1"])
    plan.seal()
    assert {i.name: i.old_uid for i in plan.items()} == {"owner": "u1", "dependent": ""}


def test_an_ownership_cycle_ends_with_a_warning(plan):
    plan.add(item("x", "ux"), ["uy"])
    plan.add(item("y", "uy"), ["ux"])
    plan.add(item("z", "uz"))
    plan.seal()
    assert len(plan) == 3
    assert sorted(n for w in names(plan) for n in w) == ["x", "y", "z"]
    assert max(w.depth for w in plan.waves()) <= 2 * MAX_OWNER_DEPTH, "the relaxation stops"
    assert any("cycle" in w for w in plan.warnings)


def test_categories_order_waves_and_added_namespaces_lead_their_wave(plan):
    plan.add(item("cr"))
    plan.add(item("team-a", category=Category.NAMESPACE))
    added = item("team-b", category=Category.NAMESPACE)
    added.in_archive = False
    plan.add(added)
    plan.seal()
    assert names(plan) == [["team-b", "team-a"], ["cr"]]
    assert plan.names(Category.NAMESPACE) == {"team-a", "team-b"}
    assert plan.resources(exclude=Category.NAMESPACE) == {KC.qualified}
    assert next(i.path for i in plan.items(plan.waves()[0])) == "", "an added namespace is not in the archive"


def test_a_scratch_plan_is_removed_on_close():
    p = RestorePlan("b", {})
    p.add(item("x"))
    p.seal()
    assert p.path.exists()
    p.close()
    assert not p.path.exists()


def test_a_sealed_plan_is_read_only_and_reopens(tmp_path):
    path = tmp_path / "p.sqlite"
    with RestorePlan("b", {"name": "b"}, path) as p:
        p.add(item("owner", "u1"))
        p.add(item("dependent", "u2"), ["u1"])
        p.seal()
    with RestorePlan.open(path) as again:
        assert (again.backup, again.manifest, len(again)) == ("b", {"name": "b"}, 2)
        assert again.types == {KC.qualified: KC}
        with pytest.raises(sqlite3.OperationalError, match="readonly"):
            again._db.execute("DELETE FROM items")


def test_the_journal_records_progress_and_the_plan_yields_only_what_is_left(tmp_path):
    path, journal_path = tmp_path / "p.sqlite", tmp_path / "j.sqlite"
    with RestorePlan("b", {}, path) as p:
        p.add(item("owner", "u1"))
        p.add(item("dependent", "u2"), ["u1"])
        p.add(item("other"))
        p.seal()
        journal = Journal.create(journal_path, "statusvault-restore-test")
        owner = next(p.items())
        journal.mark_done(owner)
        journal.learn_uid("u1", "new-u1")
        journal.close()

    again, progress = RestorePlan.open(path), Journal.open(journal_path)
    assert (progress.manager, progress.resumed) == ("statusvault-restore-test", 1)
    assert again.pending(journal_path) == 2 and len(again) == 3
    assert again.pending(journal_path, wanted_status=True) == 2
    assert [i.name for i in again.items(journal=journal_path)] == ["other", "dependent"]
    assert progress.learned_uids() == {"u1": "new-u1"}
    again.remove()
    progress.remove()
    assert list(tmp_path.iterdir()) == [], "a finished restore leaves nothing"


def test_a_plan_that_failed_to_build_leaves_nothing(tmp_path):
    path = tmp_path / "p.sqlite"
    p = RestorePlan("b", {}, path)
    p.add(item("x"))
    assert not path.exists(), "built beside its path, renamed into place when sealed"
    p.close()
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("opener", [RestorePlan.open, Journal.open])
def test_damaged_state_is_a_clear_error(tmp_path, opener):
    path = tmp_path / "x.sqlite"
    path.write_bytes(b"\0" * 100)
    with pytest.raises(StatusVaultError, match="is unreadable .*--restart"):
        opener(path)


def test_leftovers_of_killed_runs_do_not_block_or_leak_into_new_state(tmp_path):
    path = tmp_path / "p.sqlite"
    (tmp_path / "p.sqlite.building").write_bytes(b"half a plan")  # killed while planning
    (tmp_path / "j.sqlite-wal").write_bytes(b"an old run's write-ahead log")  # killed while restoring
    with RestorePlan("b", {}, path) as p:
        p.add(item("x"))
        p.seal()
    assert not (tmp_path / "p.sqlite.building").exists()
    journal = Journal.create(tmp_path / "j.sqlite")
    with RestorePlan.open(path) as again:
        assert again.pending(journal.path) == 1 and [i.name for i in again.items()] == ["x"]
    journal.close()


def test_an_unavailable_item_is_created_once_its_type_is_served():
    from statusvault.kube.discovery import Discovery
    from statusvault.restore.core.servedtypes import ServedTypes

    missing = item("later")
    missing.action = Action.UNAVAILABLE
    served = ServedTypes(Discovery([], []), lambda: Discovery([KC], [KC]))
    assert served.target(missing).action == Action.UNAVAILABLE
    served.rediscover()  # e.g. on resume, after the user installed the CRD
    assert served.target(missing).action == Action.CREATE


def test_a_journal_remembers_what_it_created(tmp_path):
    journal = Journal.create(tmp_path / "j.sqlite")
    x, y = item("x"), item("y")
    x.seq, y.seq = 1, 2
    journal.mark_created(x)
    journal.close()
    again = Journal.open(tmp_path / "j.sqlite")
    assert again.was_created(x) and not again.was_created(y)
    assert again.manager == journal.manager and again.manager.startswith("statusvault-restore-")
    again.close()


def test_a_lineage_resumes_its_backup_and_restarts_another_with_the_same_identity(tmp_path):
    """restore WATCH --at latest: the re-run of a killed run may name a later moment (another backup)."""
    from statusvault.restore.running.state import restore_state

    planned = []

    def planner(backup):
        def plan(manager, path):
            planned.append(backup)
            p = RestorePlan(backup, {}, path)
            p.seal()
            return p

        return plan

    with restore_state(tmp_path, "w-at-1", "w-at-latest-k", planner("w-at-1")) as killed:
        manager = killed.journal.manager  # never finished: its state stays
    with restore_state(tmp_path, "w-at-1", "w-at-latest-k", planner("w-at-1")) as again:
        assert (again.plan.backup, again.journal.manager, planned) == ("w-at-1", manager, ["w-at-1"]), "resumed"
    with restore_state(tmp_path, "w-at-2", "w-at-latest-k", planner("w-at-2")) as later:
        assert (later.plan.backup, later.journal.manager, planned) == ("w-at-2", manager, ["w-at-1", "w-at-2"])


def test_a_plan_made_before_order_groups_is_refused_with_the_way_out(tmp_path):
    path = tmp_path / "old.plan.sqlite"
    with RestorePlan("b", {}, path) as p:
        p.add(item("x"))
        p.seal()
    db = sqlite3.connect(path)
    db.execute("DROP INDEX items_order")
    db.execute("ALTER TABLE items DROP COLUMN grp")
    db.commit()
    db.close()
    with pytest.raises(StatusVaultError, match="earlier statusvault.*start over with --restart"):
        RestorePlan.open(path)


def test_writer_threads_never_wait_for_a_journal_commit_and_a_flush_misses_no_mark(tmp_path):
    """A mark that makes a batch due while another thread commits goes on at once (that commit, or the next, takes
    it); a created mark is seen by was_created throughout; flush() returns with every earlier mark committed."""
    import threading

    from statusvault.restore.core import journal as journal_module

    journal = Journal.create(tmp_path / "j.sqlite")
    items = [item(f"o-{n}") for n in range(journal_module.DONE_BATCH * 3)]
    for n, it in enumerate(items, 1):
        it.seq = n
    journal._db_lock.acquire()  # a commit under way in another thread
    marked = threading.Event()

    def writer() -> None:
        for it in items:
            journal.mark_created(it)
            journal.mark_done(it)
        marked.set()

    threading.Thread(target=writer).start()
    assert marked.wait(10), "a writer thread queued behind the commit"
    assert all(journal.was_created(it) for it in items[:3]), "pending marks count as created"
    journal._db_lock.release()
    journal.flush()
    journal.close()
    again = Journal.open(tmp_path / "j.sqlite")
    assert again.resumed == len(items) and all(again.was_created(it) for it in items)
    again.close()
