"""What current Kubernetes adds, against statusvault: ValidatingAdmissionPolicy on 1.36 alone; API
Priority and Fairness (flowcontrol v1 on 1.36, v1beta1 on 1.20), managedFields and watch bookmarks on both, each
version's answer asserted where they differ (docs/reference/kubernetes-versions.md)."""

from __future__ import annotations

import json
import queue
import re
import time
from collections.abc import Callable
from typing import Any

import pytest

from statusvault.errors import ExitStatus, KubeApiError
from statusvault.kube.client import KubeClient
from statusvault.kube.discovery import discover
from statusvault.kube.transport import Request
from statusvault.model import ResourceType
from statusvault.testing.fixtures import ensure_namespace, install_crds
from statusvault.vocabulary.kinds import NAMESPACES
from statusvault.watch.streams import Change, Item, Position, Stream, StreamSet
from tests.builders import cr, crd, unique, unique_kind
from tests.integration.crs.servers import delete_namespace

pytestmark = pytest.mark.version_sensitive(
    "what current Kubernetes adds (flowcontrol v1, managedFields, bookmarks), each version's answer asserted"
)

ADMISSION = "admissionregistration.k8s.io/v1"


def own_kind(kube: KubeClient) -> ResourceType:
    """A namespaced CRD with a /status subresource of its own group: a policy on that group touches no other test."""
    kind = unique_kind("Vault")
    group = f"{kind.lower()}.example.com"
    return install_crds(kube, [crd(group, kind)]).resolve(f"{kind.lower()}s.{group}")


def backed_up(run, kube: KubeClient, rt: ResourceType, namespace: str, names: list[str], **labels: str) -> None:
    """Objects of `rt` with a spec and a status (the names in `labels` carry the label `blocked=true`), backed up as
    "b", then the namespace deleted."""
    for name in names:
        marks = {"blocked": "true"} if name in labels.values() else None
        kube.create(rt, namespace, cr(rt.api_version, rt.kind, name, spec={"size": len(name)}, labels=marks))
        obj = kube.get(rt, namespace, name)
        obj["status"] = {"phase": "Ready", "seen": name}
        kube.replace(rt, namespace, name, obj, sub="status")
    assert run("backup", "b", "-n", namespace, "--include-resources", rt.qualified, "--no-include-crds").code == 0
    delete_namespace(kube, namespace)


def wait_until(check: Callable[[], bool], what: str, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline, f"not within {timeout:.0f} s: {what}"
        time.sleep(0.2)


def served(kube: KubeClient, qualified: str) -> ResourceType:
    return discover(kube).resolve(qualified)


# --- ValidatingAdmissionPolicy (admissionregistration.k8s.io/v1, GA in 1.30) ---


def deny_blocked(
    kube: KubeClient, rt: ResourceType, cleanup: Callable[[ResourceType, str], None]
) -> tuple[str, str, Callable[[], bool]]:
    """A policy and its binding that deny creates of `rt` labelled blocked=true; returns the policy's message once
    the server enforces it (it loads policies asynchronously: until a dry-run create of a blocked probe is denied),
    the name of both, and that probe."""
    name, message = unique("sv-deny"), "objects labelled blocked=true may not be created"
    policy = {
        "apiVersion": ADMISSION,
        "kind": "ValidatingAdmissionPolicy",
        "metadata": {"name": name},
        "spec": {
            "failurePolicy": "Fail",
            "matchConstraints": {
                "resourceRules": [
                    {"apiGroups": [rt.group], "apiVersions": ["*"], "operations": ["CREATE"], "resources": ["*"]}
                ]
            },
            "validations": [
                {
                    "expression": "!has(object.metadata.labels) || !('blocked' in object.metadata.labels)",
                    "message": message,
                }
            ],
        },
    }
    binding = {
        "apiVersion": ADMISSION,
        "kind": "ValidatingAdmissionPolicyBinding",
        "metadata": {"name": name},
        "spec": {"policyName": name, "validationActions": ["Deny"]},
    }
    for qualified, body in (("validatingadmissionpolicies", policy), ("validatingadmissionpolicybindings", binding)):
        kind = served(kube, f"{qualified}.admissionregistration.k8s.io")
        kube.create(kind, None, body)
        cleanup(kind, name)
    probe = cr(rt.api_version, rt.kind, unique("probe"), labels={"blocked": "true"})

    def denied() -> bool:
        try:
            kube.create(rt, "default", probe, dry_run=True)
        except KubeApiError as e:
            return message in str(e)
        return False

    wait_until(denied, f"ValidatingAdmissionPolicy {name} denies a blocked create")
    return message, name, denied


@pytest.mark.current_only("ValidatingAdmissionPolicy is served (admissionregistration.k8s.io/v1) from 1.30")
def test_objects_a_validating_admission_policy_denies_fail_alone_with_its_message(run, kube, namespace, cleanup):
    rt = own_kind(kube)
    backed_up(run, kube, rt, namespace, ["a", "b", "x", "y"], first="x", second="y")
    message, policy, denied = deny_blocked(kube, rt, cleanup)

    result = run("restore", "b", "-o", "json")
    assert result.code == ExitStatus.PARTIAL_FAILURE, result.err
    items = {i["name"]: i for i in json.loads(result.out)["items"] if i["resource"] == rt.qualified}
    assert {n: (i["result"], i["status"]) for n, i in items.items()} == {
        "a": ("created", "written"),
        "b": ("created", "written"),
        "x": ("failed", "not-written"),
        "y": ("failed", "not-written"),
    }
    for name in ("x", "y"):
        assert message in items[name]["message"] and "ValidatingAdmissionPolicy" in items[name]["message"]
        assert kube.get(rt, namespace, name) is None
    for name in ("a", "b"):
        assert kube.get(rt, namespace, name)["status"] == {"phase": "Ready", "seen": name}
    warned = [line for line in result.err.splitlines() if line.startswith("WARNING")]
    assert sorted(line.split(": failed (")[0] for line in warned) == [
        f"WARNING {rt.qualified} {namespace}/{n}" for n in "xy"
    ]
    assert all(message in line for line in warned), warned
    last = result.err.strip().splitlines()[-1]
    assert last.startswith("error: restore of b: 2 object(s) failed (") and f"{namespace}/x" in last, last
    failed = set(last.split("failed (")[1].split(")")[0].split(", "))
    lacking = set(last.split("lack their saved status (")[1].split(")")[0].split(", "))
    assert lacking == failed and last.endswith("): run the same command again to retry only those"), last

    kube.delete(served(kube, "validatingadmissionpolicybindings.admissionregistration.k8s.io"), None, policy)
    wait_until(lambda: not denied(), "the server lets blocked creates through once the binding is gone")
    again = run("restore", "b", "-o", "json")
    assert again.code == ExitStatus.SUCCESS, again.err
    for name in ("x", "y"):
        assert kube.get(rt, namespace, name)["status"] == {"phase": "Ready", "seen": name}


# --- API Priority and Fairness (flowcontrol.apiserver.k8s.io/v1, GA in 1.29; v1beta1 on 1.20) ---


SEATS = (
    1200  # the launcher's --max-requests-inflight + --max-mutating-requests-inflight (statusvault/testing/cluster.py)
)


def throttle(kube: KubeClient, user: str, cleanup: Callable[[ResourceType, str], None]) -> str:
    """A priority level of one seat that rejects (no queues) whatever does not fit, for `user`'s requests alone,
    and an unused level of as many shares as the server has seats, so that one share is worth less than a seat (the
    built-in levels keep most of theirs; the admin is exempt anyway); returns the level's name once the server has
    taken the FlowSchema in (its Dangling condition is False). In the version the server prefers: v1 (1.36), whose
    levels lend and borrow seats unless told not to, or v1beta1 (1.20), whose shares are "assured"."""
    level, wide = unique("sv-one-seat"), unique("sv-wide")
    levels = served(kube, "prioritylevelconfigurations.flowcontrol.apiserver.k8s.io")

    def limited(name: str, shares: int) -> dict[str, Any]:
        spec: dict[str, Any] = {"assuredConcurrencyShares": shares}
        if levels.version == "v1":
            spec = {"nominalConcurrencyShares": shares, "lendablePercent": 0, "borrowingLimitPercent": 0}
        return {
            "apiVersion": levels.api_version,
            "kind": "PriorityLevelConfiguration",
            "metadata": {"name": name},
            "spec": {"type": "Limited", "limited": {**spec, "limitResponse": {"type": "Reject"}}},
        }

    for name, shares in ((level, 1), (wide, SEATS)):
        kube.create(levels, None, limited(name, shares))
        cleanup(levels, name)
    schemas = served(kube, "flowschemas.flowcontrol.apiserver.k8s.io")
    rule = {"verbs": ["*"], "apiGroups": ["*"], "resources": ["*"], "namespaces": ["*"], "clusterScope": True}
    flow = {
        "apiVersion": schemas.api_version,
        "kind": "FlowSchema",
        "metadata": {"name": level},
        "spec": {
            "priorityLevelConfiguration": {"name": level},
            "matchingPrecedence": 100,
            "distinguisherMethod": {"type": "ByUser"},
            "rules": [
                {
                    "subjects": [{"kind": "User", "user": {"name": user}}],
                    "resourceRules": [rule],
                    "nonResourceRules": [{"verbs": ["*"], "nonResourceURLs": ["*"]}],
                }
            ],
        },
    }
    kube.create(schemas, None, flow)
    cleanup(schemas, level)

    def digested() -> bool:
        conditions = (kube.get(schemas, None, level) or {}).get("status", {}).get("conditions") or []
        return any(c.get("type") == "Dangling" and c.get("status") == "False" for c in conditions)

    wait_until(digested, f"the server takes FlowSchema {level} in")
    return level


def rejected(kube: KubeClient, level: str) -> int:
    """How many requests the server has rejected at that priority level (its /metrics)."""
    text = kube.transport.send(Request("GET", "/metrics", accept="text/plain")).decode()
    pattern = rf'^apiserver_flowcontrol_rejected_requests_total{{[^}}]*priority_level="{level}"[^}}]*}} (\S+)$'
    return sum(int(float(m)) for m in re.findall(pattern, text, re.M))


def test_a_parallel_restore_throttled_by_priority_and_fairness_loses_nothing(
    run, kube, namespace, cleanup, grant, cluster
):
    """The server itself answers 429 (APF: one seat, no queue) to a restore with 8 workers; each is retried after
    its Retry-After, and every object ends with its status."""
    rt = own_kind(kube)
    names = [f"o{i:02d}" for i in range(40)]
    backed_up(run, kube, rt, namespace, names)
    user = "sv-user-4"
    ensure_namespace(kube, namespace)
    grant(
        namespace,
        user,
        [
            {"apiGroups": [rt.group], "resources": [rt.resource], "verbs": ["get", "list", "create"]},
            {"apiGroups": [rt.group], "resources": [f"{rt.resource}/status"], "verbs": ["update"]},
        ],
    )
    level = throttle(kube, user, cleanup)
    before = rejected(kube, level)

    result = run("restore", "b", "--parallel", "8", "-o", "json", kubeconfig=cluster.kubeconfig_for(user))
    assert result.code == ExitStatus.SUCCESS, result.err
    assert {(i["name"], i["status"]) for i in json.loads(result.out)["items"]} == {(n, "written") for n in names}
    for name in names:
        assert kube.get(rt, namespace, name)["status"] == {"phase": "Ready", "seen": name}
    assert rejected(kube, level) > before, "the server rejected none of the restore's requests (no 429 to honour)"


# --- managedFields: the restore's field manager after the create and after the /status write ---


def ours(obj: dict[str, Any]) -> list[dict[str, Any]]:
    """The managedFields entries of a restore's field manager (statusvault-restore-<id>)."""
    entries = obj["metadata"].get("managedFields") or []
    return [e for e in entries if e["manager"].startswith("statusvault-restore-")]


def test_the_restores_field_manager_owns_the_spec_after_the_create_and_the_status_after_its_write(
    run, kube, namespace, proxied, kube_version
):
    """docs/development/architecture.md, *Identity*: the restore's manager is in managedFields from the create on
    (owning the spec) and owns the status after the /status PUT: on 1.36 as a second entry with `subresource: status`;
    on 1.20 (no `subresource` key before 1.22) in the create's entry, as both writes are the manager's Updates. After an
    operator rewrites every status field, the manager is still named: it owns the spec (and the `status` map itself,
    `f:status: {}`), not a status field."""
    rt = own_kind(kube)
    backed_up(run, kube, rt, namespace, ["m"])
    at_status_write: list[dict[str, Any]] = []

    def snapshot(method: str, path: str, body: bytes | None) -> None:
        if method == "PUT" and path.split("?")[0].endswith("/m/status") and not at_status_write:
            at_status_write.append(kube.get(rt, namespace, "m"))

    _, kubeconfig = proxied(0.0, before=snapshot)
    assert run("restore", "b", kubeconfig=kubeconfig).code == 0

    (created,) = ours(at_status_write[0])
    assert created["operation"] == "Update" and "subresource" not in created
    assert "f:spec" in created["fieldsV1"] and "f:status" not in created["fieldsV1"]
    after = ours(kube.get(rt, namespace, "m"))
    assert {e["manager"] for e in after} == {created["manager"]}
    if kube_version == "1.20":
        (entry,) = after
        assert "subresource" not in entry
        assert {"f:spec", "f:status"} <= set(entry["fieldsV1"])
    else:
        by_sub = {e.get("subresource", ""): e for e in after}
        assert set(by_sub) == {"", "status"}
        assert "f:spec" in by_sub[""]["fieldsV1"] and "f:status" not in by_sub[""]["fieldsV1"]
        assert set(by_sub["status"]["fieldsV1"]) == {"f:status"}

    operated = kube.get(rt, namespace, "m")  # an operator then rewrites every status field under its own manager
    operated["status"] = {"phase": "Degraded", "seen": "operator"}
    kube.replace(rt, namespace, "m", operated, sub="status", manager="operator")
    kept = ours(kube.get(rt, namespace, "m"))
    assert {e["manager"] for e in kept} == {created["manager"]}, "ours stays while it owns a field"
    assert any("f:size" in e["fieldsV1"].get("f:spec", {}) for e in kept)
    assert [e["fieldsV1"].get("f:status") for e in kept if "f:status" in e["fieldsV1"]] == [{}], "leaves moved"


# --- watch: bookmarks ---


def watching(kube: KubeClient, rt: ResourceType, namespace: str) -> tuple[StreamSet, int, queue.Queue[Item]]:
    """A started watch stream of `rt` in `namespace` whose WATCHes end after 4 s (the server sends a bookmark
    about 2 s before it ends one); returns it, its start position, and its queue."""
    out: queue.Queue[Item] = queue.Queue()
    streams = StreamSet(kube, [Stream(rt, namespace, "")], out, timeout=4)
    start = streams.start({})
    return streams, int(start[f"{rt.qualified}/{namespace}"]), out


def items_within(out: queue.Queue[Item], seconds: float) -> list[Item]:
    deadline, seen = time.monotonic() + seconds, []
    while (left := deadline - time.monotonic()) > 0:
        try:
            seen.append(out.get(timeout=left))
        except queue.Empty:
            break
    return seen


def first_position(out: queue.Queue[Item], seconds: float) -> Position | None:
    deadline = time.monotonic() + seconds
    while (left := deadline - time.monotonic()) > 0:
        try:
            item = out.get(timeout=left)
        except queue.Empty:
            return None
        assert not isinstance(item, Change), f"the stream saw a change not in its collection: {item}"
        if isinstance(item, Position):
            return item
    return None


def test_a_bookmark_moves_the_position_past_changes_the_stream_does_not_see(kube):
    """statusvault's WATCH asks for bookmarks (allowWatchBookmarks=true): after changes of the same resource in
    another namespace, which the namespaced stream never sees, a bookmark moves its Position past them (what the
    watch command records as the stream's position). A change every 3 s until one comes: 1.20 sends bookmarks only
    from a watch cache that has dispatched an event, and the cache of a CRD this new may be replaced once."""
    rt = own_kind(kube)
    quiet, busy = unique("quiet"), unique("busy")
    for ns in (quiet, busy):
        ensure_namespace(kube, ns)
    streams, start, out = watching(kube, rt, quiet)
    try:
        made = [kube.create(rt, busy, cr(rt.api_version, rt.kind, "elsewhere-0"))]
        first = int(made[0]["metadata"]["resourceVersion"])
        assert first > start
        while (position := first_position(out, 3)) is None or int(position.rv) < first:
            assert len(made) < 10, "no bookmark past the first change within 30 s"
            made.append(kube.create(rt, busy, cr(rt.api_version, rt.kind, f"elsewhere-{len(made)}")))
    finally:
        streams.stop.set()
        for ns in (quiet, busy):
            kube.delete(NAMESPACES, None, ns)


def test_bookmarks_of_a_collection_nothing_of_its_resource_changed_in(kube, namespace, kube_version):
    """Only other resources change (ConfigMaps). 1.36 still sends bookmarks, at the server's current
    resourceVersion (its watch cache asks etcd for progress notifications): the position advances past them.
    1.20 sends none until the resource itself changes: the position stays where the stream started."""
    rt = own_kind(kube)
    streams, start, out = watching(kube, rt, namespace)
    try:
        configmaps = served(kube, "configmaps")
        made = [kube.create(configmaps, namespace, {"metadata": {"name": f"c{i}"}}) for i in range(3)]
        rv = int(made[-1]["metadata"]["resourceVersion"])
        assert rv > start
        if kube_version == "1.20":
            assert [i for i in items_within(out, 9) if isinstance(i, Position | Change)] == []
        else:
            # a bookmark comes about 2 s before each 4 s WATCH ends, at the watch cache's position, which moves on
            # once etcd answers its progress requests: on a loaded machine (the full suite, 4 workers, 2 cores) that
            # took longer than 15 s once, so the test waits for several WATCHes
            position = first_position(out, 60)
            assert position is not None, "no bookmark within 60 s"
            assert int(position.rv) >= rv
    finally:
        streams.stop.set()
