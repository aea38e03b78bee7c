"""Never lose a status silently: the real API server behind a fault-injecting proxy, and a server that changes
what it is sent (a schema default added after the backup). Every object is checked, not just the exit code."""

from __future__ import annotations

import json
import os
import signal
import subprocess
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import orjson
import pytest

from statusvault.errors import ExitStatus
from statusvault.kube.discovery import Discovery, discover
from statusvault.model import ResourceType
from statusvault.testing.fixtures import create_with_status, ensure_namespace, install_crds
from statusvault.vocabulary.kinds import CRDS, NAMESPACES
from tests.builders import cr, crd, kc_status, owner_ref, unique
from tests.integration.crs.servers import (
    delete_namespace,
    make_namespace,
    namespace_absent,
    serves_namespaces,
    wait_gone,
)

pytestmark = pytest.mark.version_sensitive(
    "a server that fails or changes what it is sent: its error bodies, defaulting and pruning differ by version"
)

KC = "xyz.example.com/v1"
BARE = ("g0", "g1", "g2", "g3", "g4")
FAULT_RESOURCES = ("kc", "databases.db.example.com", "legacyapps.legacy.example.com", "widgets.example.com")


def gadget_crd(group: str, *, defaults: bool) -> dict[str, Any]:
    """A CRD with a status subresource; with defaults, the server fills spec.tier and status.health itself."""
    tier: dict[str, Any] = {"type": "string", **({"default": "gold"} if defaults else {})}
    health: dict[str, Any] = {"type": "string", **({"default": "unknown"} if defaults else {})}
    schema = {
        "type": "object",
        "properties": {
            "spec": {
                "type": "object",
                "properties": {"size": {"type": "integer"}, "tier": tier},
            },
            "status": {
                "type": "object",
                "x-kubernetes-preserve-unknown-fields": True,
                "properties": {"health": health},
            },
        },
    }
    return crd(group, "Gadget", schema=schema)


def set_crd(kube, body: dict[str, Any]) -> None:
    live = kube.get(CRDS, None, body["metadata"]["name"])
    body = {**body, "metadata": {**body["metadata"], "resourceVersion": live["metadata"]["resourceVersion"]}}
    kube.replace(CRDS, None, body["metadata"]["name"], body)


@pytest.mark.parametrize("defaults, lost", [(True, 0.0), (False, 0.4), (True, 0.4)], ids=["default", "lost", "both"])
def test_objects_created_by_the_run_are_its_own_whatever_the_server_changed(
    run, kube, namespace, proxied, defaults, lost
):
    """The issue's story: answers to creates lost after the server acted, and a schema default added since
    the backup. Every object is recognised as the run's own (by field manager) and gets its status."""
    group = f"{unique('g')}.example.com"
    d = install_crds(kube, [gadget_crd(group, defaults=False)])
    rt = d.by_qualified(f"gadgets.{group}")
    saved = {f"g{i}": {"externalID": f"ext-{i}", "phase": "Ready"} for i in range(30)}
    for name, status in saved.items():
        body = cr(f"{group}/v1", "Gadget", name, spec={"size": 1}, status=status)
        if name in BARE:  # nothing but a name: its create leaves no field manager behind
            del body["spec"]
        create_with_status(kube, d, body, namespace)
    assert run("backup", "b", "-n", namespace, "--include-resources", f"gadgets.{group}").code == 0
    delete_namespace(kube, namespace)
    if defaults:
        set_crd(kube, gadget_crd(group, defaults=True))

    proxy, kubeconfig = proxied(lost, faults=("lost",), applies=lambda method, path: method == "POST")
    result = run("restore", "b", "-o", "json", kubeconfig=kubeconfig)

    assert result.code == ExitStatus.SUCCESS, result.err
    report = json.loads(result.out)
    created = len(saved) + serves_namespaces(kube)
    assert report["summary"]["results"].get("created") == created, "the namespace (if served) and every object"
    assert "failed" not in report["summary"]["results"]
    assert report["withoutSavedStatus"] == 0
    if lost:
        assert proxy.counts["lost"] > 0, "the fault must have happened for the test to mean anything"
    for name, status in saved.items():
        live = kube.get(rt, namespace, name)
        want = {**status, "health": "unknown"} if defaults else status
        assert live["status"] == want, name
        if name in BARE:
            assert "spec" not in live
        else:
            assert live["spec"] == ({"size": 1, "tier": "gold"} if defaults else {"size": 1})


def test_an_object_someone_else_creates_during_the_restore_is_counted_without_status(
    run, kube, crds, namespace, proxied
):
    """Policy none leaves it alone, but it did not exist before the run: its missing status is reported, exit 3."""
    for i in range(3):
        create_with_status(kube, crds, cr(KC, "KubernetesCluster", f"k{i}", status=kc_status(i)), namespace)
    assert run("backup", "b", "-n", namespace).code == 0
    delete_namespace(kube, namespace)
    rt = crds.resolve("kc")

    def gitops_sync(method: str, path: str, body: bytes | None) -> None:
        """Argo CD recreates k1 from git (spec only) just before statusvault's create reaches the server."""
        if method == "POST" and body and b'"name":"k1"' in body and kube.get(rt, namespace, "k1") is None:
            kube.create(rt, namespace, cr(KC, "KubernetesCluster", "k1", spec={"from": "git"}), manager="argocd")

    _, kubeconfig = proxied(0.0, before=gitops_sync)
    result = run("restore", "b", kubeconfig=kubeconfig)

    assert result.code == ExitStatus.PARTIAL_FAILURE, result.out
    assert "1 without their saved status" in result.out
    assert "created by another writer during the restore" in result.out
    assert "status" not in kube.get(rt, namespace, "k1")
    assert kube.get(rt, namespace, "k0")["status"] == kc_status(0)


def test_objects_that_existed_before_are_kept_and_said_so(run, kube, crds, namespace):
    """Policy none on objects that were there before the run: exit 0, and the report says their status was
    not written; an object without a status in the backup never counts as lacking one."""
    create_with_status(kube, crds, cr(KC, "KubernetesCluster", "there", status=kc_status(1)), namespace)
    create_with_status(kube, crds, cr(KC, "KubernetesCluster", "bare"), namespace)
    assert run("backup", "b", "-n", namespace).code == 0
    kube.delete(crds.resolve("kc"), namespace, "bare")

    result = run("restore", "b")

    assert result.code == ExitStatus.SUCCESS, result.err
    assert "1 object(s) existed before the restore and were left as they are (policy none)" in result.out
    assert "0 without their saved status" in result.out


def test_a_selection_that_matches_nothing_says_so_and_changes_nothing(run, kube, crds, namespace):
    create_with_status(kube, crds, cr(KC, "KubernetesCluster", "a", status=kc_status(1)), namespace)
    assert run("backup", "b", "-n", namespace).code == 0
    delete_namespace(kube, namespace)

    for args in (["-n", "no-such-namespace"], ["-l", "app=nothing"], ["--include-resources", "legacyapps"]):
        result = run("restore", "b", *args)
        assert result.code == ExitStatus.USAGE, (args, result.out)
        assert "nothing in backup b matches" in result.err and "Traceback" not in result.err
    assert namespace_absent(kube, namespace), "nothing was written"


# --- the harness: >= 1,000 objects through faults of every kind ---


def populate(kube, crds: Discovery, ns: str, n: int) -> None:
    """n objects: KubernetesClusters owning Databases, LegacyApps (no /status), Widgets; all with status."""
    owners = [
        create_with_status(kube, crds, cr(KC, "KubernetesCluster", f"kc-{i}", status=kc_status(i)), ns)
        for i in range(n // 10)
    ]

    def one(i: int) -> None:
        kind = i % 3
        if kind == 0:
            obj = cr(
                "db.example.com/v1",
                "Database",
                f"db-{i}",
                spec={"engine": "postgres", "size": i},
                status={"externalID": f"db-{i:05d}", "endpoint": f"db{i}.example.net"},
                owners=[owner_ref(owners[i % len(owners)])],
            )
        elif kind == 1:
            obj = cr("legacy.example.com/v1", "LegacyApp", f"app-{i}", spec={"n": i}, status={"ref": f"r-{i}"})
        else:
            obj = cr(
                "example.com/v1",
                "Widget",
                f"w-{i}",
                spec={"color": "blue"},
                status={"state": "On", "count": i},
                labels={"tier": str(i % 4)},
            )
        create_with_status(kube, crds, obj, ns)

    with ThreadPoolExecutor(8) as pool:
        list(pool.map(one, range(n - len(owners))))


def snapshot(kube, types: list[ResourceType], ns: str) -> dict[str, dict[str, Any]]:
    """What must come back: per object, spec, status, labels, annotations, finalizers and owners by name."""
    listed = [o for rt in types for page in kube.list_pages(rt, ns) for o in page]
    names = {o["metadata"]["uid"]: o["metadata"]["name"] for o in listed}
    out: dict[str, dict[str, Any]] = {}
    for o in listed:
        meta = o["metadata"]
        out[f"{o['kind']}/{meta['name']}"] = {
            "spec": o.get("spec"),
            "status": o.get("status"),
            "labels": meta.get("labels"),
            "annotations": meta.get("annotations"),
            "finalizers": meta.get("finalizers"),
            "owners": [
                (r["kind"], r["name"], names.get(r["uid"], "dangling")) for r in meta.get("ownerReferences", [])
            ],
        }
    return out


def assert_exact(before: dict[str, Any], after: dict[str, Any]) -> None:
    assert after.keys() == before.keys(), (
        f"missing {sorted(before.keys() - after.keys())[:5]}, extra {sorted(after.keys() - before.keys())[:5]}"
    )
    wrong = [k for k in before if before[k] != after[k]]
    assert not wrong, f"{len(wrong)} objects differ, e.g. {wrong[0]}: {before[wrong[0]]} != {after[wrong[0]]}"


@pytest.fixture(scope="module")
def big_namespace(kube, crds) -> Iterator[tuple[str, dict[str, Any]]]:
    ns = unique("big")
    make_namespace(kube, ns)
    populate(kube, crds, ns, 1000)
    yield ns, snapshot(kube, [crds.resolve(r) for r in FAULT_RESOURCES], ns)
    delete_namespace(kube, ns)


@pytest.mark.parametrize("rate", [0.1, 0.3])
def test_a_thousand_objects_through_every_fault(run, kube, crds, proxied, big_namespace, rate):
    """Backup and restore (with a namespace mapping) of 1,000 objects while requests meet 429s, 5xx, resets
    and answers lost after the server acted. At 10 % the result is exact with exit 0; at 30 % it is exact
    or exit 3, and the plain re-run of the same command ends exact."""
    source, before = big_namespace
    target = unique("restored")
    proxy, kubeconfig = proxied(rate, seed=int(rate * 100), retry_after="0.2")

    backed_up = run("backup", "big", "-n", source, kubeconfig=kubeconfig)
    assert backed_up.code == 0, backed_up.err
    restore = ("restore", "big", "--namespace-mapping", f"{source}:{target}", "-o", "json")
    result = run(*restore, kubeconfig=kubeconfig)
    faults = dict(proxy.counts)
    try:
        report = json.loads(result.out)
        if rate <= 0.1:
            assert result.code == ExitStatus.SUCCESS, result.err
        else:
            assert result.code in (ExitStatus.SUCCESS, ExitStatus.PARTIAL_FAILURE), result.err
            lacking = report["withoutSavedStatus"]
            if result.code == ExitStatus.PARTIAL_FAILURE:
                proxy.rate = 0.0  # the plain re-run resumes the same restore (same journal)
                result = run(*restore, kubeconfig=kubeconfig)
                assert result.code == ExitStatus.SUCCESS, result.err
            else:
                assert lacking == 0
        assert_exact(before, snapshot(kube, [crds.resolve(r) for r in FAULT_RESOURCES], target))
        for kind in ("429", "500", "503", "reset", "lost"):
            assert faults.get(kind, 0) > 0, f"no {kind} was injected: {faults}"
        record_figures(rate, faults, len(before), result.code)
    finally:
        delete_namespace(kube, target)


def record_figures(rate: float, faults: dict[str, int], objects: int, code: int) -> None:
    """Figures for docs/reliability.md, printed with -s and kept in .pytest_cache."""
    line = {"rate": rate, "objects": objects, "exit": int(code), **faults}
    print("fault-harness", orjson.dumps(line).decode())


# --- kill -9 at every phase; the plain re-run ends exact and the operator is back at its replicas ---

PHASES = {
    "planning": lambda method, path, body: method == "GET" and "limit=1000" in path,
    "crd-wave": lambda method, path, body: (
        method == "POST" and path.split("?")[0].endswith("/customresourcedefinitions")
    ),
    "mid-wave": lambda method, path, body: (
        method == "POST" and "/gadgets?" in path and b'"name":"g-15"' in (body or b"")
    ),
    "between-create-and-status": lambda method, path, body: method == "PUT" and path.split("?")[0].endswith("/status"),
    "scale-back": lambda method, path, body: (
        method == "PATCH" and "/scale?" in path and b'"replicas":0' not in (body or b"")
    ),
}


def _gadgets(kube, ns: str) -> tuple[str, ResourceType]:
    """A CRD of its own (so the restore has a CRD wave), 10 owners and 30 dependents, all with status."""
    group = f"{unique('k')}.example.com"
    rt = install_crds(kube, [gadget_crd(group, defaults=False)]).by_qualified(f"gadgets.{group}")
    d = discover(kube)
    owners = [
        create_with_status(kube, d, cr(f"{group}/v1", "Gadget", f"owner-{i}", status={"id": f"o{i}"}), ns)
        for i in range(10)
    ]
    for i in range(30):
        body = cr(
            f"{group}/v1",
            "Gadget",
            f"g-{i}",
            spec={"size": i},
            status={"id": f"g{i}"},
            owners=[owner_ref(owners[i % 10])],
        )
        create_with_status(kube, d, body, ns)
    return group, rt


@pytest.mark.core_api("the operator it scales down and back is a Deployment")
@pytest.mark.parametrize("phase", list(PHASES))
def test_kill_9_at_any_phase_then_the_plain_rerun_ends_exact(run, kube, cluster, namespace, proxied, phase):
    group, rt = _gadgets(kube, namespace)
    ops = unique("ops")
    ensure_namespace(kube, ops)
    deployments = discover(kube).resolve("deployments.apps")
    labels = {"app": "op"}
    template = {"metadata": {"labels": labels}, "spec": {"containers": [{"name": "c", "image": "op:1"}]}}
    kube.create(
        deployments,
        ops,
        {
            "apiVersion": "apps/v1",
            "kind": "Deployment",
            "metadata": {"name": "op"},
            "spec": {"replicas": 2, "selector": {"matchLabels": labels}, "template": template},
        },
    )
    assert run("backup", "b", "-n", namespace, "--include-resources", f"gadgets.{group}").code == 0
    before = snapshot(kube, [rt], namespace)
    kube.delete(CRDS, None, f"gadgets.{group}")
    wait_gone(kube, CRDS, None, f"gadgets.{group}")
    target = unique("dst")
    args = ["restore", "b", "--namespace-mapping", f"{namespace}:{target}", "--scale-down", f"{ops}/deployment/op"]

    victim: dict[str, subprocess.Popen[bytes]] = {}

    def kill_at_phase(method: str, path: str, body: bytes | None) -> None:
        proc = victim.get("proc")
        if proc is not None and proc.poll() is None and PHASES[phase](method, path, body):
            os.kill(proc.pid, signal.SIGKILL)
            proc.wait()

    proxy, kubeconfig = proxied(0.0, before=kill_at_phase)
    victim["proc"] = run.spawn(*args, kubeconfig=kubeconfig)
    _, err = victim["proc"].communicate(timeout=300)
    assert victim["proc"].returncode == -signal.SIGKILL, f"the run was never killed at {phase}: {err.decode()}"
    proxy.before = lambda method, path, body: None

    again = run(*args, kubeconfig=kubeconfig)

    assert again.code == ExitStatus.SUCCESS, again.out + again.err
    assert_exact(before, snapshot(kube, [rt], target))
    op = kube.get(deployments, ops, "op")
    assert op["spec"]["replicas"] == 2, "the operator is back at its replicas"
    assert "statusvault.io/replicas-before-restore" not in (op["metadata"].get("annotations") or {})
    kube.delete(NAMESPACES, None, target)
    kube.delete(NAMESPACES, None, ops)
    kube.delete(CRDS, None, f"gadgets.{group}")


STRICT_N = 22  # more than the audit reads one by one: the LIST path (settle.READ_ONE_BY_ONE)


def test_a_strict_restore_stays_short_while_the_cluster_lacks_what_the_server_dropped(run, kube, namespace):
    """--strict judges the cluster, not the run's own writes: a field the server pruned (a CRD upgraded since the
    backup) is still missing when the same command runs again, so it exits 3 again, naming it, where it used to
    find the objects there and exit 0. Without --strict the same restore is done; once the schema keeps the field
    again, a rewrite (--existing-resource-policy update) kept in full is done under --strict too."""
    group = f"{unique('strict')}.example.com"
    open_schema = {"type": "object", "x-kubernetes-preserve-unknown-fields": True}
    d = install_crds(kube, [crd(group, "Gadget", schema=open_schema)])
    for i in range(STRICT_N):
        body = cr(f"{group}/v1", "Gadget", f"g{i}", spec={"size": 1, "color": "red"}, status={"phase": "Ready"})
        create_with_status(kube, d, body, namespace)
    taken = ("--include-resources", f"gadgets.{group}")
    assert run("backup", "gadgets", "-n", namespace, *taken).code == 0
    delete_namespace(kube, namespace)
    pruning = {"type": "object", "properties": {
        "spec": {"type": "object", "properties": {"size": {"type": "integer"}}},
        "status": {"type": "object", "x-kubernetes-preserve-unknown-fields": True}}}  # fmt: skip
    set_crd(kube, crd(group, "Gadget", schema=pruning))

    def restored(*extra: str) -> tuple[int, dict[str, Any]]:
        result = run("restore", "gadgets", *taken, "-o", "json", *extra)
        return result.code, json.loads(result.out)["verdict"]

    for attempt in range(2):  # the second: the same command again, nothing left to write
        code, judged = restored("--strict")
        assert code == ExitStatus.PARTIAL_FAILURE, (attempt, judged)
        found = {f["reason"]: f for f in judged["reasons"]}["ServerChanged"]
        assert found["count"] == STRICT_N and all("spec.color pruned" in n for n in found["names"]), (attempt, found)
    code, judged = restored()
    assert (code, judged["outcome"]) == (ExitStatus.SUCCESS, "done"), "not strict: the statuses are all there"

    set_crd(kube, crd(group, "Gadget", schema=open_schema))
    code, judged = restored("--strict", "--existing-resource-policy", "update")
    assert (code, judged["outcome"]) == (ExitStatus.SUCCESS, "done"), judged
    rt = discover(kube).by_qualified(f"gadgets.{group}")
    assert [kube.get(rt, namespace, f"g{i}")["spec"]["color"] for i in range(STRICT_N)] == ["red"] * STRICT_N
