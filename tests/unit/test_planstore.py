"""The plan's rows live in a SQLite file: ordering by owner depth, reading back wave by wave, clean-up."""

from __future__ import annotations

import pytest

from statusvault.errors import StatusVaultError
from statusvault.restore.planstore import MAX_OWNER_DEPTH, Action, Category, PlanItem, RestorePlan, StatusMode
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


def test_a_journal_records_progress_and_reopens_with_only_what_is_left(tmp_path):
    journal = tmp_path / "j.sqlite"
    with RestorePlan("b", {"name": "b"}, journal) as p:
        p.add(item("owner", "u1"))
        p.add(item("dependent", "u2"), ["u1"])
        p.add(item("other"))
        p.seal()
        owner = next(p.items())
        p.mark_done(owner)
        p.learn_uid("u1", "new-u1")
    assert journal.exists(), "an unfinished journal is kept"

    with RestorePlan.reopen(journal) as again:
        assert (again.backup, again.manifest, again.started) == ("b", {"name": "b"}, p.started)
        assert again.resumed == 1 and again.pending() == 2 and len(again) == 3
        assert [i.name for i in again.items(pending=True)] == ["other", "dependent"]
        assert again.types == {KC.qualified: KC}
        assert again.learned_uids() == {"u1": "new-u1"}
        again.finished = True
    assert list(tmp_path.iterdir()) == [], "a finished journal is removed"


def test_a_plan_that_failed_to_build_leaves_no_journal(tmp_path):
    journal = tmp_path / "j.sqlite"
    p = RestorePlan("b", {}, journal)
    p.add(item("x"))
    assert not journal.exists(), "built beside the journal, renamed into place when sealed"
    p.close()
    assert list(tmp_path.iterdir()) == []


def test_a_damaged_journal_is_a_clear_error(tmp_path):
    journal = tmp_path / "j.sqlite"
    journal.write_bytes(b"\0" * 100)
    with pytest.raises(StatusVaultError, match="is unreadable .*--restart"):
        RestorePlan.reopen(journal)


def test_leftovers_of_killed_runs_do_not_block_or_leak_into_a_new_journal(tmp_path):
    journal = tmp_path / "j.sqlite"
    (tmp_path / "j.sqlite.building").write_bytes(b"half a plan")  # killed while planning
    (tmp_path / "j.sqlite-wal").write_bytes(b"an old run's write-ahead log")  # killed while restoring, then --restart
    with RestorePlan("b", {}, journal) as p:
        p.add(item("x"))
        p.seal()
        assert p.pending() == 1
    assert not (tmp_path / "j.sqlite.building").exists()
    with RestorePlan.reopen(journal) as again:
        assert again.pending() == 1 and [i.name for i in again.items()] == ["x"]


def test_an_unavailable_item_is_created_once_its_type_is_served(tmp_path):
    from statusvault.kube.discovery import Discovery

    with RestorePlan("b", {}) as p:
        missing = item("later")
        missing.action = Action.UNAVAILABLE
        p.add(missing)
        p.seal()
        assert next(p.items()).action == Action.UNAVAILABLE
        p.retarget(Discovery([KC], [KC]))  # e.g. on resume, after the user installed the CRD
        assert next(p.items()).action == Action.CREATE


def test_a_journal_remembers_what_it_created(tmp_path):
    with RestorePlan("b", {}, tmp_path / "j.sqlite") as p:
        p.add(item("x"))
        p.add(item("y"))
        p.seal()
        x, y = list(p.items())
        p.mark_created(x)
    with RestorePlan.reopen(tmp_path / "j.sqlite") as again:
        x, y = list(again.items())
        assert again.was_created(x) and not again.was_created(y)
