"""The reference model of a restore (tests/refmodel.py), on hand-made cases: it must be right before the
pairwise suite may hold the real restore to it."""

from __future__ import annotations

import dataclasses

import pytest

from tests.refmodel import CRD, CROSSPLANE, Live, Marker, Options, Target, Type, move, restore, selector_matches

G = "m.example.com"
GIZMO, RELIC = Type(f"gizmos.{G}", "Gizmo", True), Type(f"relics.{G}", "Relic", True, subresource=False)
POOL = Type(f"pools.{G}", "Pool", False)
TYPES = [GIZMO, RELIC, POOL]
ALL = {t.qualified for t in TYPES}


def obj(kind: str, name: str, ns: str = "", *, status=None, labels=None, annotations=None, spec=None) -> dict:
    meta = {"name": name, "labels": labels or {}, "annotations": annotations or {}}
    if ns:
        meta["namespace"] = ns
    body = {"apiVersion": f"{G}/v1", "kind": kind, "metadata": meta, "spec": spec or {"n": name}}
    if status is not None:
        body["status"] = status
    return body


BACKUP = [
    obj("Gizmo", "g1", "a", status={"id": 1}, labels={"tier": "gold"}, spec={"forProvider": {}}),
    obj("Gizmo", "g2", "a", status={"id": 2}, annotations={"statusvault.io/restore-status": "false"}),
    obj("Gizmo", "g3", "b", status={"id": 3}, labels={"tier": "silver"}),
    obj("Relic", "r1", "b", status={"id": 4}, annotations={"statusvault.io/restore-status": "true"}),
    obj("Pool", "p1", status={"id": 5}, labels={"tier": "gold"}),
]


def empty() -> Target:
    return Target(set(ALL), {})


def live(o: dict, status="saved") -> Live:
    meta = o["metadata"]
    return Live(o["spec"], o.get("status") if status == "saved" else status, meta["labels"], meta["annotations"])


def test_a_default_restore_into_an_empty_cluster_creates_everything_with_its_status_but_the_opted_out_one():
    out = restore(BACKUP, TYPES, Options(), empty())
    assert out.code == 0 and set(out.results.values()) == {"created"} and not out.without_status
    assert out.target.objects[(GIZMO.qualified, "a", "g1")] == live(BACKUP[0])
    assert out.target.objects[(GIZMO.qualified, "a", "g2")].status is None, "restore-status: false"


def test_n_and_a_mapping_filter_by_the_namespace_backed_up_from_and_leave_cluster_scoped_out():
    out = restore(BACKUP, TYPES, Options(namespaces=("b",), mapping={"b": "b2"}), empty())
    assert set(out.results) == {(GIZMO.qualified, "b2", "g3"), (RELIC.qualified, "b2", "r1")}
    with_pools = restore(BACKUP, TYPES, Options(namespaces=("b",), cluster_resources=True), empty())
    assert (POOL.qualified, "", "p1") in with_pools.results


def test_a_selection_that_matches_nothing_is_refused_and_changes_nothing():
    before = empty()
    out = restore(BACKUP, TYPES, Options(namespaces=("a",), selector="tier=silver"), before)
    assert (out.code, out.results, out.target) == (2, {}, before)


def test_the_annotation_beats_no_status_and_a_status_include_list():
    out = restore(BACKUP, TYPES, Options(no_status=True), empty())
    assert out.target.objects[(RELIC.qualified, "b", "r1")].status == {"id": 4}
    assert out.target.objects[(GIZMO.qualified, "b", "g3")].status is None
    out = restore(BACKUP, TYPES, Options(status_include=(POOL.qualified,)), empty())
    assert out.target.objects[(RELIC.qualified, "b", "r1")].status == {"id": 4}
    assert out.target.objects[(POOL.qualified, "", "p1")].status == {"id": 5}
    assert out.target.objects[(GIZMO.qualified, "a", "g1")].status is None


def test_an_existing_object_is_left_under_none_and_made_the_backups_under_update():
    key = (GIZMO.qualified, "b", "g3")
    drifted = Live({"n": "other"}, {"id": 99}, {"tier": "bronze"}, {})
    before = Target(set(ALL), {key: drifted})
    kept = restore(BACKUP, TYPES, Options(), before)
    assert kept.results[key] == "skipped" and kept.target.objects[key] == drifted and not kept.without_status
    updated = restore(BACKUP, TYPES, Options(policy="update"), before)
    assert updated.results[key] == "updated" and updated.target.objects[key] == live(BACKUP[2])
    left_out = restore(BACKUP, TYPES, Options(policy="update", no_status=True), before)
    assert left_out.target.objects[key].status == {"id": 99}, "an update without status keeps the live one"


def test_a_type_neither_served_nor_brought_fails_its_objects_and_keeps_whats_paused_paused():
    before = Target({POOL.qualified}, {})
    out = restore(BACKUP, TYPES, Options(exclude=(CRD,), pause_auto=True), before)
    assert out.code == 3 and out.target.served == {POOL.qualified}
    assert out.results[(GIZMO.qualified, "a", "g1")] == "failed"
    lacking = {(GIZMO.qualified, "a", "g1"), (GIZMO.qualified, "b", "g3"), (RELIC.qualified, "b", "r1")}
    assert out.without_status == lacking
    assert out.target.objects == {(POOL.qualified, "", "p1"): live(BACKUP[4])}


def test_the_crds_come_with_include_resources_only_for_the_types_named():
    out = restore(BACKUP, TYPES, Options(include=(POOL.qualified,)), Target(set(), {}))
    assert out.code == 0 and out.target.served == {POOL.qualified}


def test_pause_markers_are_taken_away_at_the_end_unless_kept_or_the_run_failed():
    hold = Marker("annotation", "example.com/hold", "true")
    opts = Options(pause_auto=True, marker=hold, pause_resources=(f"relics.{G}",), keep_paused=(f"relics.{G}",))
    out = restore(BACKUP, TYPES, opts, empty())
    assert out.target.objects[(RELIC.qualified, "b", "r1")].paused_with == hold
    assert out.target.objects[(GIZMO.qualified, "a", "g1")].paused_with is None, "unpaused: all statuses back"
    failed = restore(BACKUP, TYPES, Options(pause_auto=True), Target({GIZMO.qualified}, {}))
    assert failed.code == 0, "the CRDs come with the backup"
    failed = restore(BACKUP, TYPES, Options(pause_auto=True, exclude=(CRD,)), Target({GIZMO.qualified}, {}))
    assert failed.code == 3 and failed.target.objects[(GIZMO.qualified, "a", "g1")].paused_with == CROSSPLANE


def test_an_object_paused_in_the_backup_stays_so_and_is_not_paused_by_the_restore():
    paused = obj("Gizmo", "g9", "a", spec={"forProvider": {}}, annotations={"crossplane.io/paused": "true"})
    out = restore([paused], TYPES, Options(pause_auto=True, keep_paused=("*",)), empty())
    assert out.target.objects[(GIZMO.qualified, "a", "g9")] == live(paused, None)


def test_a_dry_run_changes_nothing_and_reports_what_it_would_do():
    before = Target(set(), {})
    out = restore(BACKUP, TYPES, Options(dry_run="client"), before)
    assert out.target == before and out.code == 0
    assert set(out.results.values()) == {"would-create"}


def test_modifiers_change_what_is_written_and_select_on_the_namespace_backed_up_from():
    def modify(o: dict, source_ns: str) -> dict:
        if source_ns == "a":
            o["spec"]["moved"] = True
            o["status"] = {**(o.get("status") or {}), "moved": True}
        return o

    out = restore(BACKUP, TYPES, Options(mapping={"a": "z"}, modify=modify), empty())
    g1 = out.target.objects[(GIZMO.qualified, "z", "g1")]
    assert g1.spec["moved"] and g1.status == {"id": 1, "moved": True}
    assert "moved" not in out.target.objects[(GIZMO.qualified, "b", "g3")].spec


@pytest.mark.parametrize(
    ("selector", "labels", "matches"),
    [
        ("tier=gold", {"tier": "gold"}, True),
        ("tier==gold", {"tier": "silver"}, False),
        ("tier!=gold", {}, True),
        ("tier!=gold", {"tier": "gold"}, False),
        ("tier", {"tier": ""}, True),
        ("!tier", {"tier": "gold"}, False),
        ("tier in (gold, silver)", {"tier": "silver"}, True),
        ("tier notin (gold,silver)", {}, True),
        ("tier notin (gold,silver),app=x", {"app": "x", "tier": "bronze"}, True),
        ("tier in (gold),app=x", {"tier": "gold"}, False),
    ],
)
def test_label_selectors(selector, labels, matches):
    assert selector_matches(selector, labels) is matches


def test_the_pauses_are_counted():
    hold = Marker("annotation", "example.com/hold", "true")
    opts = Options(marker=hold, pause_resources=("*",), keep_paused=(f"relics.{G}",))
    out = restore(BACKUP, TYPES, opts, empty())
    assert (out.unpaused, out.left_paused) == (4, 1)
    assert (restore(BACKUP, TYPES, Options(dry_run="client", pause_auto=True), empty()).unpaused) == 0


def test_a_move_pauses_what_it_moves_in_the_source_and_leaves_the_rest():
    out = move(BACKUP, TYPES, Options(namespaces=("a",), names=("g*",)), Target(set(), {}))
    assert out.code == 0 and set(out.results) == {(GIZMO.qualified, "a", "g1"), (GIZMO.qualified, "a", "g2")}
    assert out.source.objects[(GIZMO.qualified, "a", "g1")].paused_with == CROSSPLANE, "forProvider: crossplane"
    assert out.source.objects[(GIZMO.qualified, "a", "g2")].paused_with is None, "no marker known"
    assert out.source.objects[(GIZMO.qualified, "b", "g3")] == live(BACKUP[2]), "not moved: untouched"
    assert out.target.objects[(GIZMO.qualified, "a", "g1")] == live(BACKUP[0]), "unpaused in the target"
    assert out.source_paused == 1 and out.target.served == {GIZMO.qualified, RELIC.qualified}, "-n: no Pool CRD"


def test_a_move_with_delete_source_deletes_exactly_what_it_moved():
    out = move(BACKUP, TYPES, Options(include=(POOL.qualified,)), Target(set(), {}), delete_source=True)
    assert set(out.source.objects) == {(t, ns, n) for t, ns, n in out.source.objects if t != POOL.qualified}
    assert len(out.source.objects) == 4 and list(out.target.objects) == [(POOL.qualified, "", "p1")]


def test_a_cluster_scoped_type_named_with_n_is_taken_unless_the_flag_says_no():
    named = Options(namespaces=("b",), include=(GIZMO.qualified, POOL.qualified))
    assert (POOL.qualified, "", "p1") in restore(BACKUP, TYPES, named, empty()).results
    flagged = dataclasses.replace(named, cluster_resources=False)
    assert (POOL.qualified, "", "p1") not in restore(BACKUP, TYPES, flagged, empty()).results


def test_a_status_the_target_rejects_is_counted_and_keeps_what_was_paused_paused():
    before = Target(set(ALL), {}, phases={GIZMO.qualified: frozenset({"ok"})})
    out = restore(BACKUP, TYPES, Options(pause_auto=True), before)
    assert out.code == 3 and out.results[(GIZMO.qualified, "a", "g1")] == "created"
    assert out.without_status == {(GIZMO.qualified, "a", "g1"), (GIZMO.qualified, "b", "g3")}, "g2 opted out"
    assert out.target.objects[(GIZMO.qualified, "a", "g1")] == dataclasses.replace(
        live(BACKUP[0], None), paused_with=CROSSPLANE
    )
    assert restore(BACKUP, TYPES, Options(dry_run="client"), before).code == 0, "a client dry run cannot know"
    assert restore(BACKUP, TYPES, Options(dry_run="server"), before).code == 0, "nor can a server one: no /status"


def test_policy_update_makes_an_existing_crd_the_backups_when_allowed_so_its_stricter_rule_goes():
    before = Target(set(ALL), {}, phases={GIZMO.qualified: frozenset({"ok"})})
    assert restore(BACKUP, TYPES, Options(policy="update", replace_crds=True), before).code == 0
    assert restore(BACKUP, TYPES, Options(policy="update"), before).code == 3, "a live CRD is replaced only if allowed"
    left_out = Options(policy="update", exclude=(CRD,), replace_crds=True)
    assert restore(BACKUP, TYPES, left_out, before).code == 3, "or when the CRDs are left out"


def test_a_gated_group_with_a_rejected_status_stops_the_run_before_the_next_group():
    """--order: the server refuses a gizmo's status (the target's schema), so the gate after the gizmos does not
    pass; onTimeout fail stops the run (exit 1) and the relics of the next group are never written."""
    before = dataclasses.replace(empty(), phases={GIZMO.qualified: ("Ready",)})
    ready = obj("Gizmo", "g1", "a", status={"phase": "Ready"})
    backup = [ready, obj("Gizmo", "g9", "a", status={"phase": "Pending"}), BACKUP[3]]
    out = restore(backup, TYPES, Options(gated=(GIZMO.qualified,), later=(RELIC.qualified,)), before)
    assert out.code == 1
    assert set(out.results) == {(GIZMO.qualified, "a", "g1"), (GIZMO.qualified, "a", "g9")}
    assert (RELIC.qualified, "b", "r1") not in out.target.objects
    assert out.without_status == {(GIZMO.qualified, "a", "g9"), (RELIC.qualified, "b", "r1")}, "and unreached"
    passed = restore(
        backup[:1] + backup[2:], TYPES, Options(gated=(GIZMO.qualified,), later=(RELIC.qualified,)), before
    )
    assert passed.code == 0 and (RELIC.qualified, "b", "r1") in passed.target.objects
