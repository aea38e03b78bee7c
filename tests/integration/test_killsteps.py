"""Kill at every step: each command is killed (kill -9) at each step it goes through, then the same command runs
again: it must end exact (every object with its saved status, nothing left paused or marked that should not be),
and `list`/`describe` never show a partial backup as complete. A new step is one row (tests/killsteps.py)."""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterable
from typing import Any, NamedTuple

import pytest

from statusvault.archive import signing
from statusvault.errors import ExitStatus
from statusvault.kube.discovery import discover
from statusvault.restore.core.pausemarkers import RECORD
from statusvault.restore.quiet.scaledown import ANNOTATION
from statusvault.restore.runner import RestoreRequest, _resolved, open_backup
from statusvault.storage.base import fence_key
from statusvault.storage.local import LocalStore
from statusvault.testing.fixtures import create_with_status, install_crds
from statusvault.vocabulary.kinds import NAMESPACES
from tests.builders import cr, crd, unique
from tests.integration.crs.test_faults import assert_exact, snapshot
from tests.integration.test_fence import Cluster, an_operator_of, backed_up_widgets
from tests.integration.test_fence import N as WIDGETS
from tests.integration.test_fence import saved as widget_status
from tests.killsteps import Pause, Request, Where, kill_at

pytestmark = pytest.mark.version_neutral("kill points are steps of statusvault's own, not of the server")

GROUP = "rds.aws.upbound.io"  # a Crossplane provider's group: --pause auto uses crossplane.io/paused

QUALIFIED = f"instances.{GROUP}"

PAUSED = "crossplane.io/paused"

N = 12


def saved(i: int) -> dict[str, Any]:
    return {"externalID": f"db-{i:04d}", "endpoint": f"db{i}.rds.example.net"}


def seed_instances(kube, namespace):
    """N managed resources with their saved status; db-00 paused by its owner (it must stay paused)."""
    install_crds(kube, [crd(GROUP, "Instance")])
    d = discover(kube)
    for i in range(N):
        body = cr(f"{GROUP}/v1", "Instance", f"db-{i:02d}", spec={"forProvider": {"size": i}}, status=saved(i))
        if i == 0:
            body["metadata"]["annotations"] = {PAUSED: "true"}
        create_with_status(kube, d, body, namespace)
    return d.by_qualified(QUALIFIED)


@pytest.fixture
def instances(kube, namespace):
    return seed_instances(kube, namespace)


def env_of(run) -> dict[str, str]:
    return {"STATUSVAULT_STORAGE": str(run.storage), "STATUSVAULT_STATE_DIR": str(run.state)}


def assert_nothing_partial_listed_as_complete(run) -> None:
    """Every backup `list` calls Completed describes and verifies; every other one does not describe."""
    listed = run("list", "-o", "json")
    assert listed.code == ExitStatus.SUCCESS, listed.err
    for backup in json.loads(listed.out):
        described = run("describe", backup["name"]).code
        if backup["phase"] == "Completed":
            assert (described, run("verify", backup["name"]).code) == (0, 0), backup
        else:
            assert described != ExitStatus.SUCCESS, f"{backup['name']} is {backup['phase']} but describes"


def completed(run) -> list[str]:
    return [b["name"] for b in json.loads(run("list", "-o", "json").out) if b["phase"] == "Completed"]


class Census(NamedTuple):
    """What a killed run left in a namespace: objects, those with their saved status, those it still marks."""

    created: int
    with_status: int
    marked: int


def census(kube, rt, ns: str) -> Census:
    found = [o for page in kube.list_pages(rt, ns) for o in page]
    marked = sum(RECORD in (o["metadata"].get("annotations") or {}) for o in found)
    return Census(len(found), sum(bool(o.get("status")) for o in found), marked)


Step = tuple[Where, Callable[[Census], bool]]  # where to kill, and what the killed run must have left


def post(name: str, **kw: Any) -> Request:
    return Request("POST", body=f'"name":"{name}"'.encode(), **kw)


INSTANCES = f"/apis/{GROUP}/v1/namespaces/"

BACKUP_STEPS: dict[str, Where] = {  # (after its archive landed, before its manifest: the writer lease's tests)
    "archive-opened": Request("GET", "?limit="),  # its first LIST (the CRDs): the archive is open, empty
    "mid-list": Request("GET", "&continue=", nth=2),  # pages of 5: the CRD and some instances archived
    "mid-write": Pause("backup.type-archived"),  # the CRD archived, the instances not yet
}


def essentials(objects: Iterable[dict[str, Any]]) -> dict[str, Any]:
    """Per Instance, what a restore gives back: spec, status, annotations."""
    return {
        o["metadata"]["name"]: (o.get("spec"), o.get("status"), o["metadata"].get("annotations"))
        for o in objects
        if o["kind"] == "Instance"
    }


def archived(run, name: str) -> dict[str, Any]:
    with open_backup(LocalStore(run.storage), name) as reader:
        return essentials(json.loads(data) for _, data in reader.objects())


@pytest.mark.parametrize("step", list(BACKUP_STEPS))
def test_backup_killed_at_each_step_then_the_same_command_ends_exact(
    run, kube, namespace, instances, proxied, tmp_path, step
):
    live = essentials(o for page in kube.list_pages(instances, namespace) for o in page)
    proxy, kubeconfig = proxied(0.0)
    args = ["--kubeconfig", str(kubeconfig), "backup", "b", "-n", namespace, "--page-size", "5"]
    args += ["--include-resources", instances.qualified]  # this test's type (and its CRD), whatever else is served

    kill_at(BACKUP_STEPS[step], args, env_of(run), {"source": proxy}, tmp_path)
    assert list(run.storage.glob("backups/b/.archive.tar.gz.*.partial")), "killed while writing its archive"
    assert completed(run) == []
    assert_nothing_partial_listed_as_complete(run)

    again = run(*args[2:], "-o", "json", kubeconfig=kubeconfig)

    assert again.code == ExitStatus.SUCCESS, again.out + again.err
    assert json.loads(again.out)["totals"]["objects"] == N + 1, "the instances and their CRD"
    assert completed(run) == ["b"]
    assert_nothing_partial_listed_as_complete(run)
    assert archived(run, "b") == live


RESTORE_STEPS: dict[str, Step] = {
    "journal-opened": (Request("POST"), lambda c: c.created == 0),  # the target namespace's create
    "namespace-created-not-journaled": (Request("POST", lands=True), lambda c: c.created == 0),
    "mid-wave": (post("db-06"), lambda c: 0 < c.created < N),
    # --stream: writes as the archive is read, in pages of what --parallel 2 holds in flight (8 objects)
    "streamed-journal-opened": (Request("POST"), lambda c: c.created == 0),
    # the walk stops at the page's end while the writers still hold it: how much of it landed before the kill is
    # the machine's timing (streamed-mid-wave is the step that kills with part of the objects surely written)
    "streamed-page-boundary": (Pause("restore.stream-page"), lambda c: c.created < N),
    "streamed-mid-page": (Pause("restore.stream-mid-page"), lambda c: c.created < N),
    "streamed-mid-wave": (post("db-06"), lambda c: 0 < c.created < N),
    "streamed-status-written-not-journaled": (
        Request("PUT", "/status", nth=4, lands=True),
        lambda c: c.with_status >= 3 and c.marked == c.created - 1,
    ),
    "streamed-before-unpause": (Request("PATCH", INSTANCES), lambda c: c == (N, N, N - 1)),
    # --stream -n: the CRD that comes along is held until the first object of its type, then handed on
    "streamed-selection-held": (Pause("restore.stream-held"), lambda c: c.created == 0),
    "streamed-selection-mid-wave": (post("db-06"), lambda c: 0 < c.created < N),
    "between-create-and-status": (Request("PUT", "/status"), lambda c: c.created > c.with_status),
    "status-written-not-journaled": (
        Request("PUT", "/status", nth=4, lands=True),
        lambda c: c.with_status >= 3 and c.marked == c.created - 1,  # the 4th lands as the run dies
    ),
    "before-unpause": (Request("PATCH", INSTANCES), lambda c: c == (N, N, N - 1)),  # db-00 was paused by its owner
    "mid-unpause": (Request("PATCH", INSTANCES, nth=5, lands=True), lambda c: c[:2] == (N, N) and c.marked < N - 1),
    # --settle-seconds: every object done and unpaused, killed before it looks again (its state not finished)
    "looking-again": (Pause("restore.looking-again"), lambda c: c[:2] == (N, N) and c.marked == 0),
    # a signed backup, restored with --verify-key-file: the re-run checks the signature again and resumes
    "signed-mid-wave": (post("db-06"), lambda c: 0 < c.created < N),
}


@pytest.mark.parametrize("step", list(RESTORE_STEPS))
def test_restore_killed_at_each_step_then_the_same_command_ends_exact(
    run, kube, namespace, instances, proxied, tmp_path, step
):
    before = snapshot(kube, [instances], namespace)
    signed = step.startswith("signed-")
    if signed:
        signing.generate(tmp_path / "signing.pem")
    assert run("backup", "b", "-n", namespace, *(["--signing-key-file", str(tmp_path / "signing.pem")] if signed
                                                 else [])).code == 0  # fmt: skip
    target = unique("dst")
    proxy, kubeconfig = proxied(0.0)
    args = ["--kubeconfig", str(kubeconfig), "restore", "b", "--namespace-mapping", f"{namespace}:{target}"]
    args += ["--pause", "auto", "--parallel", "2", *(["--stream"] if step.startswith("streamed-") else [])]
    args += ["-n", namespace] if step.startswith("streamed-selection-") else []
    args += ["--settle-seconds", "0.5"] if step == "looking-again" else []
    args += ["--verify-key-file", str(tmp_path / "signing.pem.pub")] if signed else []
    try:
        where, left = RESTORE_STEPS[step]
        kill_at(where, args, env_of(run), {"source": proxy}, tmp_path)
        assert left(census(kube, instances, target)), census(kube, instances, target)
        assert list((run.state / "restores").glob("*.journal.sqlite")), "the killed run's journal is there"

        again = run(*args[2:], "-o", "json", kubeconfig=kubeconfig)

        assert again.code == ExitStatus.SUCCESS, again.out + again.err
        report = json.loads(again.out)
        assert report["leftPaused"] == 0
        assert_exact(before, snapshot(kube, [instances], target))
        assert census(kube, instances, target).marked == 0
    finally:
        kube.delete(NAMESPACES, None, target)


RERUN_STEPS = ("mid-wave", "between-create-and-status", "status-written-not-journaled", "before-unpause")


@pytest.mark.parametrize("step", RERUN_STEPS)
@pytest.mark.parametrize("rerun", ["elsewhere", "restore-resource"])
def test_restore_killed_then_re_run_elsewhere_or_as_a_restore_resource_ends_exact(
    run, kube, namespace, instances, proxied, tmp_path, step, rerun
):
    """The re-run after a kill need not be the same command on the same machine: from another state directory (no
    journal: what the killed run created is recognised by its field manager) or as a Restore resource the controller
    reconciles (the same restore: it resumes the journal), it ends exact, and its verdict says so."""
    before = snapshot(kube, [instances], namespace)
    assert run("backup", "b", "-n", namespace).code == 0
    target = unique("dst")
    proxy, kubeconfig = proxied(0.0)
    args = ["--kubeconfig", str(kubeconfig), "restore", "b", "--namespace-mapping", f"{namespace}:{target}"]
    args += ["--pause", "auto", "--parallel", "2"]
    try:
        where, left = RESTORE_STEPS[step]
        kill_at(where, args, env_of(run), {"source": proxy}, tmp_path)
        assert left(census(kube, instances, target)), census(kube, instances, target)

        if rerun == "elsewhere":
            again = run(*args[2:], "--state-dir", str(tmp_path / "elsewhere"), "-o", "json", kubeconfig=kubeconfig)
            assert again.code == ExitStatus.SUCCESS, again.out + again.err
            assert json.loads(again.out)["verdict"]["outcome"] == "done"
        else:
            assert reconciled_as_a_restore_resource(run, kube, namespace, target, kubeconfig)["phase"] == "Complete"
        assert_exact(before, snapshot(kube, [instances], target))
        assert census(kube, instances, target).marked == 0, "nothing left paused"
    finally:
        kube.delete(NAMESPACES, None, target)


def reconciled_as_a_restore_resource(run, kube, namespace: str, target: str, kubeconfig) -> dict[str, Any]:
    """A Restore with the killed command's options, reconciled once by the controller: its status."""
    from statusvault.cli.specfields import crds as restore_crds

    restores = install_crds(kube, restore_crds()).by_qualified("restores.statusvault.dev")
    ctl = unique("ctl")
    kube.create(NAMESPACES, None, {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ctl}})
    try:
        spec = {"backup": "b", "namespace-mapping": [f"{namespace}:{target}"], "pause": "auto", "parallel": 2}
        body = {"apiVersion": "statusvault.dev/v1alpha1", "kind": "Restore", "metadata": {"name": "again"}}
        kube.create(restores, ctl, {**body, "spec": spec})
        result = run("controller", "run", "-n", ctl, "--once", kubeconfig=kubeconfig)
        assert result.code == 0, result.err
        return dict(kube.get(restores, ctl, "again")["status"])
    finally:
        kube.delete(NAMESPACES, None, ctl)


ORDER_STEPS: dict[str, tuple[Pause, str]] = {  # where, and what the re-run's report says of the gate
    "waiting-on-a-gate": (Pause("restore.gate-waiting"), "passed"),  # the group restored, its gate not passed
    "between-groups": (Pause("restore.gate-passed"), "passed-earlier"),  # the gate journalled as passed
}


@pytest.mark.parametrize("step", list(ORDER_STEPS))
def test_restore_with_order_killed_at_each_gate_step_then_the_same_command_ends_exact(
    run, cluster, kube, namespace, instances, tmp_path, step
):
    """--order with --pause auto: the group is unpaused before its gate; a re-run waits again only on a gate the
    journal has not seen passed."""
    before = snapshot(kube, [instances], namespace)
    signed = step.startswith("signed-")
    if signed:
        signing.generate(tmp_path / "signing.pem")
    assert run("backup", "b", "-n", namespace, *(["--signing-key-file", str(tmp_path / "signing.pem")] if signed
                                                 else [])).code == 0  # fmt: skip
    target = unique("dst")
    order = tmp_path / "order.yaml"
    order.write_text(
        f"version: v1\ngroups:\n  - name: instances\n    resources: [{QUALIFIED}]\n"
        "    gate: {expression: .status.externalID, timeout: 30s}\n"
    )
    args = ["--kubeconfig", str(cluster.kubeconfig), "restore", "b"]
    args += ["--namespace-mapping", f"{namespace}:{target}", "--pause", "auto", "--order", str(order)]
    try:
        where, outcome = ORDER_STEPS[step]
        kill_at(where, args, env_of(run), {}, tmp_path)
        assert census(kube, instances, target).created == N, "the group was restored before its gate"

        again = run(*args[2:], "-o", "json")

        assert again.code == ExitStatus.SUCCESS, again.out + again.err
        report = json.loads(again.out)
        assert [(g["group"], g["outcome"]) for g in report["gates"]] == [("instances", outcome)]
        assert report["leftPaused"] == 0
        assert_exact(before, snapshot(kube, [instances], target))
        assert census(kube, instances, target).marked == 0
    finally:
        kube.delete(NAMESPACES, None, target)


KEPT_STEPS: dict[str, tuple[str, Where]] = {  # (the command killed, where)
    "restore-mid-wave": ("restore", post("db-06")),
    "restore-as-its-last-status-lands": ("restore", Request("PUT", "/status", nth=N, lands=True)),
    "unpause-before-its-first-patch": ("unpause", Request("PATCH", INSTANCES)),
    "unpause-mid-way": ("unpause", Request("PATCH", INSTANCES, nth=5, lands=True)),
}


@pytest.mark.parametrize("step", list(KEPT_STEPS))
def test_keep_paused_then_unpause_killed_at_each_step(run, kube, namespace, instances, proxied, tmp_path, step):
    """--keep-paused leaves the objects paused as asked; `unpause` with the same options releases them."""
    before = snapshot(kube, [instances], namespace)
    signed = step.startswith("signed-")
    if signed:
        signing.generate(tmp_path / "signing.pem")
    assert run("backup", "b", "-n", namespace, *(["--signing-key-file", str(tmp_path / "signing.pem")] if signed
                                                 else [])).code == 0  # fmt: skip
    target = unique("dst")
    proxy, kubeconfig = proxied(0.0)
    options = ["b", "--namespace-mapping", f"{namespace}:{target}", "--pause", "auto", "--parallel", "2"]
    restore = ["restore", *options, "--keep-paused", QUALIFIED]
    command, where = KEPT_STEPS[step]
    try:
        if command == "unpause":
            assert run(*restore, kubeconfig=kubeconfig).code == ExitStatus.SUCCESS
        killed = restore if command == "restore" else ["unpause", *options]
        kill_at(where, ["--kubeconfig", str(kubeconfig), *killed], env_of(run), {"source": proxy}, tmp_path)
        if command == "restore":
            kept = run(*restore, kubeconfig=kubeconfig)
            assert kept.code == ExitStatus.SUCCESS, kept.out + kept.err
            assert f"{N - 1} object(s) stay paused as asked" in kept.out
            assert census(kube, instances, target) == (N, N, N - 1)

        released = run("unpause", *options, kubeconfig=kubeconfig)

        assert released.code == ExitStatus.SUCCESS, released.out + released.err
        assert_exact(before, snapshot(kube, [instances], target))
        assert census(kube, instances, target).marked == 0
        assert not list((run.state / "restores").glob("*.journal.sqlite")), "the restore is finished"
    finally:
        kube.delete(NAMESPACES, None, target)


# where to kill, the (replicas, annotation) left: the count is kept by the restore (its journal, the store), never on
# the workload, which only ever sees /scale writes
FENCE_STEPS: dict[str, tuple[Where, tuple[int, str | None]]] = {
    "fence-planned": (Pause("restore.fence-planned"), (2, None)),
    "count-kept-not-scaled": (Pause("restore.count-kept"), (2, None)),
    "scaled-down": (Request("PATCH", "/scale", lands=True), (0, None)),
    "mid-restore": (Request("POST", body=b'"name":"w-06"'), (0, None)),
    "scaled-back-count-kept": (Request("PATCH", "/scale", nth=2, lands=True), (2, None)),
}


@pytest.fixture
def world(kube) -> Iterable[Cluster]:
    """RBAC objects and workloads (tests/integration/test_fence.py), deleted afterwards."""
    c = Cluster(kube)
    yield c
    c.cleanup()


RERUNS = {  # the run after the kill: the same command, or one whose --fence changed (the same restore resumes)
    "same": ["--fence", "auto"],
    "without-fence": [],
    "best-effort": ["--fence", "best-effort"],
    # another machine: no journal of the killed run, only the replica counts it kept in the store
    "without-fence-elsewhere": ["--state-dir", "{tmp}/elsewhere"],
}
FENCE_KILLS = [(step, "same") for step in FENCE_STEPS] + [
    (step, rerun)
    for step in ("scaled-down", "mid-restore")
    for rerun in ("without-fence", "best-effort", "without-fence-elsewhere")
]


@pytest.mark.version_sensitive("each of these fixes is shown on both servers")
@pytest.mark.parametrize(("step", "rerun"), FENCE_KILLS)
def test_a_restore_killed_at_each_step_of_fencing_then_run_again_ends_with_the_original_replicas(
    run, kube, namespace, world, proxied, tmp_path, step, rerun
):
    """--fence auto finds the operator by its ClusterRole and scales it to 0 and back; a re-run resumes the same
    restore whatever its --fence says, so it scales back what the killed run fenced."""
    group = f"{unique('kill')}.example.com"
    widgets = backed_up_widgets(run, kube, group, namespace)
    ops, name = an_operator_of(world, group, replicas=2).split("/")
    proxy, kubeconfig = proxied(0.0)
    args = ["--kubeconfig", str(kubeconfig), "restore", "b", "--fence", "auto", "--parallel", "2"]
    where, left = FENCE_STEPS[step]

    kill_at(where, args, env_of(run), {"source": proxy}, tmp_path)

    def state() -> tuple[int, str | None]:
        live = world.get(ops, "Deployment", name)
        return live["spec"]["replicas"], (live["metadata"].get("annotations") or {}).get(ANNOTATION)

    assert settles(state, left)

    rerun_args = [a.replace("{tmp}", str(tmp_path)) for a in RERUNS[rerun]]
    again = run("restore", "b", *rerun_args, "--parallel", "2", "-o", "json", kubeconfig=kubeconfig)

    assert again.code == ExitStatus.SUCCESS, again.out + again.err
    if rerun != "same" and left[0] == 0:
        fence = json.loads(again.out)["fence"]
        assert f"scaled back (fenced by an earlier run of this restore): deployment {ops}/{name}" in fence
    live = world.get(ops, "Deployment", name)
    assert live["spec"]["replicas"] == 2, "the original count: never fenced twice (which would remember 0)"
    assert ANNOTATION not in (live["metadata"].get("annotations") or {})
    for i in range(WIDGETS):
        assert kube.get(widgets, namespace, f"w-{i:02d}")["status"] == widget_status(i)


SCALE_RERUNS = {  # the run after the kill, without --scale-down: on this machine, and on another one
    "without-scale-down": [],
    "without-scale-down-elsewhere": ["--state-dir", "{tmp}/elsewhere"],
}


@pytest.mark.version_sensitive("the same restore's re-run must scale back on both servers")
@pytest.mark.parametrize("step", ["scaled-down", "mid-restore"])
@pytest.mark.parametrize("rerun", list(SCALE_RERUNS))
def test_a_scale_down_restore_killed_then_run_again_without_it_scales_the_workload_back(
    run, kube, namespace, world, proxied, tmp_path, step, rerun
):
    """--scale-down changes who is stopped, not what is restored: a re-run without it is the same restore, which
    finds the count the killed run kept (its journal, or the store's on another machine) and scales back."""
    group = f"{unique('kill')}.example.com"
    widgets = backed_up_widgets(run, kube, group, namespace)
    ops, name = an_operator_of(world, group, replicas=2).split("/")
    proxy, kubeconfig = proxied(0.0)
    args = ["--kubeconfig", str(kubeconfig), "restore", "b", "--scale-down", f"{ops}/deployments/{name}"]
    kill_at(FENCE_STEPS[step][0], [*args, "--parallel", "2"], env_of(run), {"source": proxy}, tmp_path)
    assert settles(lambda: world.get(ops, "Deployment", name)["spec"]["replicas"], 0), "the kill left it at 0"

    rerun_args = [a.replace("{tmp}", str(tmp_path)) for a in SCALE_RERUNS[rerun]]
    again = run("restore", "b", *rerun_args, "--parallel", "2", "-o", "json", kubeconfig=kubeconfig)

    assert again.code == ExitStatus.SUCCESS, again.out + again.err
    fence = json.loads(again.out)["fence"]
    assert f"scaled back (fenced by an earlier run of this restore): deployment {ops}/{name}" in fence
    assert world.get(ops, "Deployment", name)["spec"]["replicas"] == 2
    assert not list(run.storage.glob("fences/*")), "the store keeps no count once it is scaled back"
    for i in range(WIDGETS):
        assert kube.get(widgets, namespace, f"w-{i:02d}")["status"] == widget_status(i)


def settles(state: Callable[[], Any], expected: Any, seconds: float = 5.0) -> bool:
    """Whether state() comes to `expected` within `seconds`: a request that landed goes on through the proxy after
    the kill, so the operator's fencing may still be moving."""
    deadline = time.monotonic() + seconds
    while state() != expected and time.monotonic() < deadline:
        time.sleep(0.1)
    return bool(state() == expected)


@pytest.mark.version_sensitive("the store's replica record is read on both servers")
def test_a_store_record_scales_back_only_what_is_at_0_never_a_running_workload(run, kube, namespace, world):
    """The store's replica record (fences/<key>.json) lets a run on another machine scale back what a killed run left
    at 0; one written by a store writer cannot make a restore scale up a workload that runs."""
    group = f"{unique('ledger')}.example.com"
    widgets = backed_up_widgets(run, kube, group, namespace)
    running = an_operator_of(world, group, replicas=2)
    stopped = an_operator_of(world, group, replicas=0)
    store = LocalStore(run.storage)
    with open_backup(store, "b") as reader:
        _, key = _resolved(kube, discover(kube), reader, RestoreRequest(store=store, backup="b"))
    specs = {w: "{}/deployments.apps/{}".format(*w.split("/")) for w in (running, stopped)}
    record = {"restore": key, "workloads": {specs[running]: 50, specs[stopped]: 3}}
    store.put(fence_key(key), json.dumps(record).encode())

    result = run("restore", "b", "-o", "json")

    assert result.code == ExitStatus.SUCCESS, result.out + result.err
    replicas = {w: world.get(*w.split("/")[:1], "Deployment", w.split("/")[1])["spec"]["replicas"] for w in specs}
    assert replicas == {running: 2, stopped: 3}, "the one at 0 is scaled back; the running one is left alone"
    for i in range(WIDGETS):
        assert kube.get(widgets, namespace, f"w-{i:02d}")["status"] == widget_status(i)
