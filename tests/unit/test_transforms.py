from __future__ import annotations

import pytest

from statusvault.transforms import (
    RESTORE_STATUS_ANNOTATION,
    contains,
    map_namespace,
    remap_owner_refs,
    restore_diff,
    sanitize,
    status_annotation,
    status_body,
    update_patch,
)
from tests.builders import cr


def live(**meta):
    obj = cr("x.example.com/v1", "Thing", "a", spec={"n": 1}, status={"s": 1}, labels={"l": "1"})
    obj["metadata"].update(
        uid="u1",
        resourceVersion="42",
        generation=7,
        creationTimestamp="2025-01-01T00:00:00Z",
        selfLink="/x",
        managedFields=[{"manager": "m"}],
        deletionTimestamp="2025-01-02T00:00:00Z",
        deletionGracePeriodSeconds=0,
        finalizers=["f"],
        annotations={"a": "b"},
        **meta,
    )
    return obj


def test_sanitize_strips_server_set_metadata_and_keeps_user_metadata():
    out = sanitize(live())
    assert out["metadata"] == {"name": "a", "labels": {"l": "1"}, "finalizers": ["f"], "annotations": {"a": "b"}}
    assert "status" not in out
    assert out["spec"] == {"n": 1}


def test_sanitize_keeps_status_when_asked_and_its_metadata_is_its_own():
    obj = live()
    out = sanitize(obj, keep_status=True)
    out["metadata"]["labels"]["l"] = "2"
    out["metadata"]["annotations"]["new"] = "x"
    out["metadata"]["namespace"] = "elsewhere"
    assert out["status"] == {"s": 1}
    assert obj["metadata"]["labels"] == {"l": "1"} and obj["metadata"]["annotations"] == {"a": "b"}
    assert obj["metadata"]["uid"] == "u1" and "namespace" not in obj["metadata"]
    assert out["spec"] is obj["spec"], "the rest is shared, not copied: callers change only metadata in place"


@pytest.mark.parametrize(("cluster_ip", "kept"), [("10.0.0.5", False), ("None", True), (None, False)])
def test_sanitize_resets_service_cluster_ip_unless_headless(cluster_ip, kept):
    svc = {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {"name": "s"},
        "spec": {"clusterIP": cluster_ip, "clusterIPs": [cluster_ip]},
    }
    if cluster_ip is None:
        del svc["spec"]["clusterIP"]
    out = sanitize(svc)
    assert ("clusterIP" in out["spec"]) is kept


@pytest.mark.parametrize(
    ("ns", "mapping", "expected"),
    [
        ("a", {"a": "b"}, "b"),
        ("c", {"a": "b"}, "c"),
        ("", {"a": "b"}, ""),
    ],
)
def test_map_namespace(ns, mapping, expected):
    assert map_namespace(ns, mapping) == expected


def test_remap_owner_refs_rewrites_known_and_drops_unknown():
    refs = [{"kind": "A", "name": "a", "uid": "old-a", "controller": True}, {"kind": "B", "name": "b", "uid": "old-b"}]
    kept, dropped = remap_owner_refs(refs, lambda ref: {"old-a": "new-a"}.get(ref["uid"]))
    assert kept == [{"kind": "A", "name": "a", "uid": "new-a", "controller": True}]
    assert dropped == [{"kind": "B", "name": "b", "uid": "old-b"}]


@pytest.mark.parametrize(
    ("value", "expected"), [("true", True), ("True", True), ("false", False), ("no", False), (None, None)]
)
def test_status_annotation(value, expected):
    obj = cr("v1", "X", "x", annotations={RESTORE_STATUS_ANNOTATION: value} if value is not None else None)
    assert status_annotation(obj) is expected


def test_update_patch_is_guarded_and_covers_spec_and_labels_not_status():
    current = live()
    desired = sanitize(live())
    desired["spec"] = {"n": 2}
    desired["metadata"]["labels"] = {"l": "2"}
    patch = update_patch(current, desired)
    assert patch[0] == {"op": "test", "path": "/metadata/resourceVersion", "value": "42"}
    paths = {op["path"] for op in patch[1:]}
    assert paths == {"/spec/n", "/metadata/labels/l"}


def test_update_patch_empty_when_nothing_differs():
    assert update_patch(live(), sanitize(live())) == []


def test_status_body_carries_the_live_resource_version():
    body = status_body(live(), {"new": True})
    assert body["metadata"]["resourceVersion"] == "42" and body["status"] == {"new": True}


def test_restore_diff_names_each_changed_added_and_removed_field():
    from statusvault.transforms import restore_diff

    live = {
        "metadata": {"name": "x", "labels": {"env": "prod", "team": "a"}, "uid": "new", "resourceVersion": "9"},
        "spec": {"size": 5, "pools": [{"n": 1}, {"n": 2}], "extra": True},
        "status": {"phase": "Pending"},
    }
    backup = {
        "metadata": {"name": "x", "labels": {"env": "prod", "team": "b/c"}},
        "spec": {"size": 3, "pools": [{"n": 1}, {"n": 3}], "region": "eu"},
    }
    diff = restore_diff(live, backup, {"phase": "Ready", "url": "https://c1"})
    assert diff == [
        {"path": "/metadata/labels/team", "live": "a", "backup": "b/c"},
        {"path": "/spec/extra", "live": True},
        {"path": "/spec/pools/1/n", "live": 2, "backup": 3},
        {"path": "/spec/region", "backup": "eu"},
        {"path": "/spec/size", "live": 5, "backup": 3},
        {"path": "/status/phase", "live": "Pending", "backup": "Ready"},
        {"path": "/status/url", "backup": "https://c1"},
    ]
    assert restore_diff(live, live) == [], "server-owned metadata is not content"
    assert all(not d["path"].startswith("/status") for d in restore_diff(live, backup)), "status only when restored"


@pytest.mark.parametrize(
    ("actual", "saved", "held"),
    [
        ({"a": 1, "health": "unknown"}, {"a": 1}, True),  # a default the server added
        ({"a": {"b": 1, "c": 2}}, {"a": {"b": 1}}, True),
        ({"l": [{"x": 1, "d": 0}]}, {"l": [{"x": 1}]}, True),  # defaults inside list items
        ({}, {"a": 1}, False),  # pruned
        ({"a": 2}, {"a": 1}, False),  # changed
        ({"l": [1]}, {"l": [1, 2]}, False),  # a list shortened
        ({"l": [1, 2, 3]}, {"l": [1, 2]}, False),  # or lengthened
        ({"a": 1}, {"a": True}, False),  # JSON true is not 1
        ({"a": 1.0}, {"a": 1}, True),
        (None, {"a": 1}, False),
        ({"a": None}, {"a": None}, True),
    ],
)
def test_contains_allows_added_fields_only(actual, saved, held):
    assert contains(actual, saved) is held


def spec(**fields):
    return {"spec": fields}


@pytest.mark.parametrize(
    ("sent", "answer", "changes"),
    [
        pytest.param(spec(n=1, l=[{"x": 1}]), spec(n=1, l=[{"x": 1}]), [], id="identical"),
        pytest.param(spec(n=1), spec(n=1, mode="fast"), [], id="a defaulted field is not a change"),
        pytest.param(spec(l=[{"x": 1}]), spec(l=[{"x": 1, "d": 0}]), [], id="defaults inside list items"),
        pytest.param({}, spec(n=1), [], id="a defaulted section"),
        pytest.param(spec(n=None), spec(), [], id="a null left out"),
        pytest.param(spec(n=None), spec(n=3), [], id="a null defaulted"),
        pytest.param(spec(a=1.0), spec(a=1), [], id="1.0 is 1"),
        pytest.param(spec(zone="eu", n=1), spec(n=1), ["spec.zone pruned"], id="pruned"),
        pytest.param(spec(a={"b": {"c": 1, "d": 2}}), spec(a={"b": {"c": 1}}), ["spec.a.b.d pruned"], id="nested"),
        pytest.param(spec(a={"b": {"c": 1}}, n=1), spec(n=1), ["spec.a pruned"], id="a whole section, once"),
        pytest.param(spec(n=1), {}, ["spec pruned"], id="all of spec"),
        pytest.param(spec(n=1, m=2), spec(n=5, m=2), ["spec.n changed"], id="changed"),
        pytest.param(spec(a=True), spec(a=1), ["spec.a changed"], id="JSON true is not 1"),
        pytest.param(spec(a={"b": 1}), spec(a="b=1"), ["spec.a changed"], id="another type"),
        pytest.param(spec(l=[1, 2]), spec(l=[1]), ["spec.l changed"], id="a list shortened"),
        pytest.param(spec(l=[1, 2]), spec(l=[1, 2, 3]), ["spec.l changed"], id="a list lengthened"),
        pytest.param(spec(l=[1, 2]), spec(l=[1, 3]), ["spec.l[1] changed"], id="a list item changed"),
        pytest.param(
            spec(l=[{"x": 1, "y": 2}, {"x": 2, "y": 3}]),
            spec(l=[{"x": 1, "y": 2}, {"x": 2}]),
            ["spec.l[1].y pruned"],
            id="a field of a list item pruned",
        ),
        pytest.param(
            {"metadata": {"labels": {"app.kubernetes.io/name": "a", "tier": "x"}}},
            {"metadata": {"labels": {"tier": "y"}}},
            ["metadata.labels[app.kubernetes.io/name] pruned", "metadata.labels.tier changed"],
            id="keys that are not names in brackets",
        ),
        pytest.param(
            {"spec": {"a": 1, "b": 2}, "status": {"c": 3}},
            {"spec": {"a": 2}, "status": {"c": 3, "d": 4}},
            ["spec.a changed", "spec.b pruned"],
            id="each change, in the sent order",
        ),
    ],
)
def test_server_changes_name_what_the_server_dropped_or_changed_of_what_was_sent(sent, answer, changes):
    from statusvault.transforms import server_changes

    assert [str(c) for c in server_changes(sent, answer)] == changes


def test_object_changes_cover_user_content_and_a_status_sent_in_the_body_never_server_metadata():
    from statusvault.transforms import object_changes

    body = cr("x.example.com/v1", "Thing", "a", spec={"n": 1, "zone": "eu"}, labels={"l": "1"})
    answer = live()  # uid, resourceVersion, managedFields...: set by the server, never sent
    answer["metadata"]["labels"] = {"l": "1"}
    answer["spec"] = {"n": 1}
    answer["status"] = {"s": 1}
    assert [str(c) for c in object_changes(body, answer)] == ["spec.zone pruned"]
    assert [str(c) for c in object_changes({**body, "status": {"s": 2}}, answer)] == [
        "spec.zone pruned",
        "status.s changed",
    ]
    patched = object_changes({**body, "status": {"s": 2}}, answer, with_status=False)  # a patch never sends it
    assert [str(c) for c in patched] == ["spec.zone pruned"]
    assert [str(c) for c in object_changes({**body, "status": {"s": 2}}, {**answer, "status": None})] == [
        "spec.zone pruned",
        "status changed",
    ]


@pytest.mark.parametrize(
    ("saved", "answer", "changes"),
    [
        ({"id": "a", "n": 1}, {"status": {"id": "a", "n": 1, "phase": "x"}}, []),
        ({"id": "a", "n": 1}, {"status": {"id": "a"}}, ["status.n pruned"]),
        ({"id": "a"}, {"spec": {}}, ["status pruned"]),
    ],
)
def test_status_changes(saved, answer, changes):
    from statusvault.transforms import status_changes

    assert [str(c) for c in status_changes(saved, answer)] == changes


def test_a_secrets_values_are_masked_in_a_diff_as_kubectl_masks_them():
    live = {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "s"}, "data": {"password": "aHVudGVyMg=="}}
    backup = {**live, "data": {"password": "c2VjcmV0", "token": "dG9r"}, "type": "Opaque"}
    diff = {d["path"]: d for d in restore_diff(live, backup)}
    assert diff["/data/password"] == {"path": "/data/password", "live": "*** (live)", "backup": "*** (backup)"}
    assert diff["/data/token"] == {"path": "/data/token", "backup": "*** (backup)"}
    assert diff["/type"] == {"path": "/type", "backup": "Opaque"}, "what is not a value is shown"
    assert "aHVudGVyMg" not in str(diff) and "c2VjcmV0" not in str(diff)


def test_an_update_keeps_what_the_server_assigned_a_service():
    """`--existing-resource-policy update` of a Service: the backup's body had its cluster IPs dropped (they belong
    to the old cluster) and may lack node ports; the update keeps the live ones (unsetting the primary cluster IP is
    a 422) and changes only what the backup says."""
    from statusvault.transforms import sanitize, update_patch

    backup = {"apiVersion": "v1", "kind": "Service", "metadata": {"name": "s", "resourceVersion": "1"},
              "spec": {"type": "NodePort", "clusterIP": "10.1.0.5", "clusterIPs": ["10.1.0.5"],
                       "ports": [{"port": 80, "protocol": "TCP"}], "selector": {"app": "new"}}}  # fmt: skip
    live = {"apiVersion": "v1", "kind": "Service", "metadata": {"name": "s", "resourceVersion": "7"},
            "spec": {"type": "NodePort", "clusterIP": "10.0.0.9", "clusterIPs": ["10.0.0.9"], "ipFamilies": ["IPv4"],
                     "ipFamilyPolicy": "SingleStack", "ports": [{"port": 80, "protocol": "TCP", "nodePort": 30080}],
                     "selector": {"app": "old"}}}  # fmt: skip
    ops = update_patch(live, sanitize(backup))
    assert [op for op in ops if op["op"] != "test"] == [
        {"op": "replace", "path": "/spec/selector/app", "value": "new"}
    ], ops


def test_veleros_restore_status_annotation_is_honoured_as_statusvaults_own():
    from statusvault.transforms import status_annotation

    def annotated(**a: str) -> dict:
        return {"metadata": {"annotations": a}}

    assert status_annotation(annotated(**{"velero.io/restore-status": "true"})) is True
    assert status_annotation(annotated(**{"velero.io/restore-status": "false"})) is False
    both = {"statusvault.io/restore-status": "false", "velero.io/restore-status": "true"}
    assert status_annotation(annotated(**both)) is False, "statusvault's own says last"
    assert status_annotation(annotated()) is None


def test_a_change_is_still_there_until_the_object_holds_what_was_sent():
    from statusvault.transforms import server_changes, still_changed

    sent = {"spec": {"size": 1, "color": "red", "items": [1, {"a": 2}], "labels": {"app.kubernetes.io/name": "x"}},
            "status": {"conditions": [{"reason": "Ok"}], "flag": True}}  # fmt: skip
    got = {"spec": {"size": 2, "items": [1, {"a": 3}], "labels": {}}, "status": {"conditions": [{"reason": "No"}],
           "flag": 1}}  # fmt: skip
    changes = server_changes(sent, got)
    assert [str(c) for c in changes] == ["spec.size changed", "spec.color pruned", "spec.items[1].a changed",
                                         "spec.labels[app.kubernetes.io/name] pruned",
                                         "status.conditions[0].reason changed", "status.flag changed"]  # fmt: skip
    assert all(still_changed(got, c) for c in changes), "as the server left it"
    assert not any(still_changed(sent, c) for c in changes), "holding what was sent: kept"
    assert still_changed({"spec": []}, changes[0]), "a path the object no longer has is still changed"
