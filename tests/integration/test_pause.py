"""Objects created paused while a real operator runs (tests/operator.py): the operator never sees an object of
the restore without its saved status, so it provisions nothing; `--scale-down` too; and without either, the
race that users hit (a slow status write is enough), which the report now names."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from statusvault.errors import ExitStatus
from statusvault.kube.discovery import discover
from statusvault.restore.core.pausemarkers import RECORD
from statusvault.testing.fixtures import create_with_status, ensure_namespace, install_crds
from statusvault.vocabulary.kinds import NAMESPACES
from tests.builders import cr, crd, unique
from tests.integration.crs.servers import wait_gone

pytestmark = pytest.mark.version_neutral(
    "pause markers are annotations and scale-down is /scale, the same on every version"
)

GROUP = "rds.aws.upbound.io"  # a Crossplane provider's group: --pause auto picks the crossplane.io/paused annotation
QUALIFIED = f"instances.{GROUP}"
N = 30


@pytest.fixture(scope="module")
def instances(kube):
    return install_crds(kube, [crd(GROUP, "Instance")]).by_qualified(QUALIFIED)


def saved(i: int) -> dict:
    return {"externalID": f"db-{i:04d}", "endpoint": f"db{i}.rds.example.net"}


@pytest.fixture
def backed_up(run, kube, instances, namespace):
    """N managed resources with their external IDs, backed up, then lost with their namespace."""
    d = discover(kube)
    for i in range(N):
        body = cr(
            f"{GROUP}/v1", "Instance", f"db-{i:02d}", spec={"forProvider": {"region": "eu-west-1"}}, status=saved(i)
        )
        if i == 0:
            body["metadata"]["annotations"] = {"crossplane.io/paused": "true"}  # paused by its owner: stays so
        create_with_status(kube, d, body, namespace)
    assert run("backup", "b", "-n", namespace).code == 0
    kube.delete(NAMESPACES, None, namespace)
    wait_gone(kube, NAMESPACES, None, namespace)
    return namespace


class Operator:
    def __init__(
        self,
        cluster,
        namespace: str,
        log: Path,
        deployment: str = "",
        qualified: str = QUALIFIED,
        observes: bool = False,
    ):
        args = [str(cluster.kubeconfig), qualified, namespace, str(log), *([deployment] if deployment else [])]
        args += ["--observes"] if observes else []
        self.log = log
        self.proc = subprocess.Popen([sys.executable, "-m", "tests.operator", *args])
        deadline = time.monotonic() + 30
        while not log.exists():
            assert time.monotonic() < deadline and self.proc.poll() is None, "the operator did not start"
            time.sleep(0.05)

    def provisions(self, passes: int = 3) -> list[str]:
        """What it provisioned once it has made `passes` more passes over its objects."""
        done = Path(f"{self.log}.passes")
        count = lambda: int(done.read_text() or 0) if done.exists() else 0  # noqa: E731
        until, deadline = count() + passes, time.monotonic() + 30
        while count() < until:
            assert time.monotonic() < deadline and self.proc.poll() is None, "the operator stopped passing"
            time.sleep(0.05)
        return self.log.read_text().splitlines()

    def stop(self) -> None:
        self.proc.kill()
        self.proc.wait()


@pytest.fixture
def operator(cluster, tmp_path):
    started: list[Operator] = []

    def _start(namespace: str, deployment: str = "", observes: bool = False) -> Operator:
        op = Operator(cluster, namespace, tmp_path / f"provisions-{len(started)}.log", deployment, observes=observes)
        started.append(op)
        return op

    yield _start
    for op in started:
        op.stop()


def assert_raced_and_named(result, op: Operator) -> None:
    """The restore succeeded, the operator provisioned some of its objects again, and the report names each one
    it raced."""
    assert result.code == ExitStatus.SUCCESS, result.err
    provisioned = {line.split()[0] for line in op.provisions()}
    assert provisioned, "the operator saw objects without their status and provisioned again"
    raced = {
        i["name"] for i in json.loads(result.out)["items"] if any("another writer" in n for n in i.get("notes", ()))
    }
    assert raced and raced <= provisioned, "each object it raced is named in the report"


def assert_intact_and_unpaused(kube, instances, namespace: str) -> None:
    for i in range(N):
        obj = kube.get(instances, namespace, f"db-{i:02d}")
        assert obj["status"] == saved(i), obj["metadata"]["name"]
        annotations = obj["metadata"].get("annotations") or {}
        assert RECORD not in annotations
        if i == 0:
            assert annotations == {"crossplane.io/paused": "true"}, "paused in the backup: it stays paused"
        else:
            assert "crossplane.io/paused" not in annotations, "unpaused"


def test_pause_auto_while_the_operator_runs_provisions_nothing(run, kube, instances, backed_up, operator):
    op = operator(backed_up)
    result = run("restore", "b", "--pause", "auto", "-o", "json")
    assert result.code == ExitStatus.SUCCESS, result.err
    report = json.loads(result.out)
    assert (report["unpaused"], report["leftPaused"]) == (N - 1, 0)
    assert report["summary"]["pause"] == {"paused": N - 1, "kept": 1}
    assert op.provisions() == [], "the operator never saw an object of the restore without its status"
    assert_intact_and_unpaused(kube, instances, backed_up)


def observed(kube, instances, namespace: str) -> list[str]:
    """The objects whose status is the saved one plus the operator's observedGeneration (it took them over)."""
    out = []
    for i in range(N):
        obj = kube.get(instances, namespace, f"db-{i:02d}")
        if obj["status"] == {**saved(i), "observedGeneration": obj["metadata"]["generation"]}:
            out.append(obj["metadata"]["name"])
    return out


def test_an_operator_reconciling_what_a_paused_restore_handed_it_is_its_own_work_not_a_race(
    run, kube, instances, backed_up, operator
):
    """Once unpaused with its saved status on, an object's status is its operator's: the status writes it makes from
    then on (built on the restored status) are not counted against the restore, which exits 0."""
    op = operator(backed_up, observes=True)
    result = run("restore", "b", "--pause", "auto", "-o", "json")
    assert result.code == ExitStatus.SUCCESS, result.out[-2000:] + result.err
    report = json.loads(result.out)
    assert report["verdict"] == {"outcome": "done", "reasons": []}
    assert report["unpaused"] == N - 1
    op.provisions()
    assert len(observed(kube, instances, backed_up)) == N - 1, "the operator took over every unpaused object"
    assert op.provisions() == []


def test_a_fenced_restore_reads_the_cluster_back_before_its_operator_runs_again(
    run, kube, instances, backed_up, operator
):
    """The operator scaled back reconciles what it finds (observedGeneration): its writes come after the restore's
    read-back, so they are not counted as a race; the restore exits 0 and the operator then takes every object."""
    ops, _ = operator_deployment(kube)
    op = operator(backed_up, f"{ops}/op", observes=True)
    result = run("restore", "b", "--scale-down", f"{ops}/deployment/op", "--settle-seconds", "1", "-o", "json")
    assert result.code == ExitStatus.SUCCESS, result.out[-2000:] + result.err
    assert json.loads(result.out)["statusesOverwritten"]["count"] == 0
    op.provisions()
    assert len(observed(kube, instances, backed_up)) == N - 1, "scaled back, it took over every unpaused object"
    assert op.provisions() == []
    kube.delete(NAMESPACES, None, ops)


def test_keep_paused_then_unpause(run, kube, instances, backed_up, operator):
    result = run("restore", "b", "--pause", "auto", "--keep-paused", QUALIFIED)
    assert result.code == ExitStatus.SUCCESS, result.err
    assert f"{N - 1} object(s) stay paused as asked" in result.out
    assert kube.get(instances, backed_up, "db-05")["metadata"]["annotations"]["crossplane.io/paused"] == "true"
    op = operator(backed_up)
    released = run("unpause", "b", "--pause", "auto", "--keep-paused", QUALIFIED)
    assert released.code == ExitStatus.SUCCESS, released.err
    assert f"pause: {N - 1} object(s) unpaused" in released.out
    assert op.provisions() == []
    assert_intact_and_unpaused(kube, instances, backed_up)
    again = run("unpause", "b", "--pause", "auto")
    assert again.code == ExitStatus.USAGE and "no restore of b with these options" in again.err


def test_kill_9_mid_restore_then_rerun_provisions_nothing(run, kube, instances, backed_up, operator, proxied):
    op = operator(backed_up)
    victim: dict[str, subprocess.Popen[bytes]] = {}

    def kill_at_the_15th(method: str, path: str, body: bytes | None) -> None:
        proc = victim.get("proc")
        if proc is not None and proc.poll() is None and method == "POST" and b'"name":"db-15"' in (body or b""):
            os.kill(proc.pid, signal.SIGKILL)
            proc.wait()

    proxy, kubeconfig = proxied(0.0, before=kill_at_the_15th)
    victim["proc"] = run.spawn("restore", "b", "--pause", "auto", "--parallel", "2", kubeconfig=kubeconfig)
    _, err = victim["proc"].communicate(timeout=120)
    assert victim["proc"].returncode == -signal.SIGKILL, err.decode()
    assert op.provisions() == [], "what the killed run created is paused"
    proxy.before = lambda method, path, body: None

    again = run("restore", "b", "--pause", "auto", "--parallel", "2", kubeconfig=kubeconfig)
    assert again.code == ExitStatus.SUCCESS, again.err
    assert op.provisions() == []
    assert_intact_and_unpaused(kube, instances, backed_up)


def read_cluster(kube, user: str, resources: list[tuple[str, str]]) -> None:
    """A ClusterRole reading these (group, resource) pairs, bound to `user` (named for it: one test each)."""
    rbac = "rbac.authorization.k8s.io"
    d = discover(kube)
    rules = [{"apiGroups": [g], "resources": [r], "verbs": ["get", "list"]} for g, r in resources]
    role = {"apiVersion": f"{rbac}/v1", "kind": "ClusterRole", "metadata": {"name": f"{user}-read"}, "rules": rules}
    binding = {
        "apiVersion": f"{rbac}/v1",
        "kind": "ClusterRoleBinding",
        "metadata": {"name": f"{user}-read"},
        "roleRef": {"apiGroup": rbac, "kind": "ClusterRole", "name": f"{user}-read"},
        "subjects": [{"apiGroup": rbac, "kind": "User", "name": user}],
    }
    for kind, body in (("clusterroles", role), ("clusterrolebindings", binding)):
        rt = d.resolve(f"{kind}.{rbac}")
        if kube.get(rt, None, body["metadata"]["name"]) is None:
            kube.create(rt, None, body)


@pytest.mark.version_sensitive("each of these fixes is shown on both servers")
def test_an_unpause_the_server_refuses_exits_3_naming_what_stays_paused(
    run, kube, cluster, instances, backed_up, grant
):
    """A restorer who may create the objects and write their status but not patch them: every status is back,
    and every object stays paused, so its operator never resumes it. That is not success."""
    ensure_namespace(kube, backed_up)
    user = "sv-user-3"
    objects = {"apiGroups": [GROUP], "resources": ["instances"], "verbs": ["get", "list", "create"]}
    grant(backed_up, user, [objects, {"apiGroups": [GROUP], "resources": ["instances/status"], "verbs": ["*"]}])
    read_cluster(kube, user, [("apiextensions.k8s.io", "customresourcedefinitions"), ("", "namespaces")])

    result = run("restore", "b", "--pause", "auto", "-o", "json", kubeconfig=cluster.kubeconfig_for(user))

    assert result.code == ExitStatus.PARTIAL_FAILURE, result.err
    report = json.loads(result.out)
    assert report["verdict"]["outcome"] == "partial"
    assert [(r["reason"], r["count"]) for r in report["verdict"]["reasons"]] == [("StillPaused", N - 1)]
    last = result.err.strip().splitlines()[-1]
    assert f"{N - 1} object(s) could not be unpaused and stay paused ({QUALIFIED} {backed_up}/" in last, last
    assert "statusvault unpause" in last
    assert kube.get(instances, backed_up, "db-05")["metadata"]["annotations"]["crossplane.io/paused"] == "true"
    assert kube.get(instances, backed_up, "db-05")["status"] == saved(5)


def operator_deployment(kube) -> tuple[str, Any]:
    """A Deployment `op` of 1 replica in a namespace of its own, standing for the operator's pod: (namespace, the
    deployments resource). The stand-in operator acts only while it is scaled up."""
    ops = unique("ops")
    ensure_namespace(kube, ops)
    deployments = discover(kube).resolve("deployments.apps")
    labels = {"app": "op"}
    template = {"metadata": {"labels": labels}, "spec": {"containers": [{"name": "c", "image": "op:1"}]}}
    spec = {"replicas": 1, "selector": {"matchLabels": labels}, "template": template}
    kube.create(
        deployments, ops, {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "op"}, "spec": spec}
    )
    return ops, deployments


def test_scale_down_stops_the_operator_instead(run, kube, instances, backed_up, operator):
    ops, deployments = operator_deployment(kube)
    op = operator(backed_up, f"{ops}/op")
    result = run("restore", "b", "--scale-down", f"{ops}/deployment/op")
    assert result.code == ExitStatus.SUCCESS, result.err
    assert kube.get(deployments, ops, "op")["spec"]["replicas"] == 1
    assert op.provisions() == [], "it was stopped while objects had no status; after, every one has its ID"
    kube.delete(NAMESPACES, None, ops)


def test_without_either_the_operator_races_the_status_write_and_the_report_says_so(
    run, kube, instances, backed_up, operator, proxied
):
    """The race users hit (Velero #6017): here made certain by slowing each status write by 0.3 s."""
    op = operator(backed_up)
    _, kubeconfig = proxied(
        0.0, before=lambda method, path, body: time.sleep(0.3) if path.split("?")[0].endswith("/status") else None
    )
    result = run("restore", "b", "--parallel", "4", "-o", "json", kubeconfig=kubeconfig)
    assert_raced_and_named(result, op)
    for i in range(1, N):  # statusvault's saved status won; the duplicates the operator made are the user's to find
        assert kube.get(instances, backed_up, f"db-{i:02d}")["status"] == saved(i)


# --- when a pause does not take, and what the report says before and after ---


def widget_crd(group: str) -> dict:
    """A structural schema with no spec.paused and no preserve-unknown-fields there: the server prunes it."""
    spec = {"type": "object", "properties": {"size": {"type": "integer"}}}
    status = {"type": "object", "x-kubernetes-preserve-unknown-fields": True}
    schema = {"type": "object", "properties": {"spec": spec, "status": status}}
    return crd(group, "Widget", schema=schema)


def backed_up_and_gone(run, kube, ns: str, bodies: list[dict]) -> None:
    d = discover(kube)
    for body in bodies:
        create_with_status(kube, d, body, ns)
    assert run("backup", "b", "-n", ns).code == 0
    kube.delete(NAMESPACES, None, ns)
    wait_gone(kube, NAMESPACES, None, ns)


def test_a_pause_field_the_server_prunes_is_reported_as_what_is_on_the_cluster(run, kube, namespace):
    group = f"{unique('p')}.example.com"
    widgets = install_crds(kube, [widget_crd(group)]).by_qualified(f"widgets.{group}")
    bodies = [cr(f"{group}/v1", "Widget", f"w-{i}", spec={"size": i}, status={"id": f"w{i}"}) for i in range(3)]
    backed_up_and_gone(run, kube, namespace, bodies)

    flags = ["--pause-field", "/spec/paused=true", "--pause-resources", widgets.qualified]
    result = run("restore", "b", *flags, "-o", "json")

    assert result.code == ExitStatus.PARTIAL_FAILURE, result.out + result.err
    assert "NOT paused" in result.err and "will not pause them" in result.err, "advice that helps, not 'run again'"
    report = json.loads(result.out)
    items = [i for i in report["items"] if i["resource"] == widgets.qualified]
    assert len(items) == 3
    for item in items:
        assert item["result"] == "created" and item["status"] == "written", item
        assert "created WITHOUT its pause marker /spec/paused=true" in item["notPaused"]
        assert "pausedWith" not in item, "not counted as paused"
    assert report["summary"]["pause"] == {"lost": 3}
    assert (report["withoutSavedStatus"], report["unreached"], report["notPaused"]) == (0, 0, 3), "as on the cluster"
    assert (report["unpaused"], report["leftPaused"], report["unpauseFailures"]) == (0, 0, []), "never paused"
    for i in range(3):
        obj = kube.get(widgets, namespace, f"w-{i}")
        assert obj["status"] == {"id": f"w{i}"} and "paused" not in obj["spec"]
        assert RECORD not in (obj["metadata"].get("annotations") or {}), "no record of a pause that did not hold"
    again = run("restore", "b", *flags)
    assert again.code == 0 and "were restored by an earlier run" in again.out, again.out + again.err


@pytest.fixture
def mixed(run, kube, instances, namespace):
    """Two Crossplane instances (one paused by its owner) and two custom resources no profile knows, backed up
    and gone."""
    group = f"{unique('db')}.example.com"
    databases = install_crds(kube, [crd(group, "Database")]).by_qualified(f"databases.{group}")
    owner_paused = {"crossplane.io/paused": "true"}
    bodies = [
        cr(f"{GROUP}/v1", "Instance", "i-0", spec={"forProvider": {}}, status=saved(0), annotations=owner_paused),
        cr(f"{GROUP}/v1", "Instance", "i-1", spec={"forProvider": {}}, status=saved(1)),
        *(cr(f"{group}/v1", "Database", f"d-{i}", spec={"size": i}, status={"id": f"d{i}"}) for i in range(2)),
    ]
    backed_up_and_gone(run, kube, namespace, bodies)
    return namespace, databases


def paused_with(report: dict, ns: str) -> dict[str, str | None]:
    """Each object of the namespace: the pause marker it was (or would be) created with."""
    return {i["name"]: i.get("pausedWith") for i in report["items"] if i["namespace"] == ns}


def test_pause_auto_warns_once_per_type_it_cannot_pause_and_a_dry_run_shows_each_marker(run, kube, mixed):
    ns, databases = mixed
    warning = f"--pause auto knows no pause marker for {databases.qualified}: its objects were NOT paused"

    dry = run("restore", "b", "--pause", "auto", "--dry-run", "client", "-o", "json")

    assert dry.code == ExitStatus.SUCCESS, dry.err
    preview = json.loads(dry.out)
    assert paused_with(preview, ns) == {"i-0": "kept", "i-1": "crossplane.io/paused=true", "d-0": None, "d-1": None}
    assert [w for w in preview["warnings"] if w.startswith(warning)] == [warning + f" (name a marker with "
        f"--pause-annotation or --pause-field and --pause-resources {databases.qualified})"]  # fmt: skip

    result = run("restore", "b", "--pause", "auto", "-o", "json")

    assert result.code == ExitStatus.SUCCESS, result.err
    report = json.loads(result.out)
    assert len([w for w in report["warnings"] if w.startswith(warning)]) == 1, "once, not once per object"
    assert report["summary"]["pause"] == {"paused": 1, "kept": 1, "no-marker": 2}
    assert report["unpaused"] == 1


def test_generic_pause_annotation_for_named_resources(run, kube, mixed, proxied):
    ns, databases = mixed
    flags = ["--pause-annotation", "hold.example.com/frozen=yes", "--pause-resources", databases.qualified]
    dry = run("restore", "b", *flags, "--dry-run", "client", "-o", "json")
    assert paused_with(json.loads(dry.out), ns) == {
        "i-0": None, "i-1": None, "d-0": "hold.example.com/frozen=yes", "d-1": "hold.example.com/frozen=yes"
    }, "only the named resources; --pause auto was not given"  # fmt: skip
    created: dict[str, dict] = {}

    def seen(method: str, path: str, body: bytes | None) -> None:
        if method == "POST" and f"/{databases.resource}?" in path + "?":
            obj = json.loads(body or b"{}")
            created[obj["metadata"]["name"]] = obj["metadata"].get("annotations") or {}

    _, kubeconfig = proxied(0.0, before=seen)
    result = run("restore", "b", *flags, "-o", "json", kubeconfig=kubeconfig)

    assert result.code == ExitStatus.SUCCESS, result.err
    assert {name: a.get("hold.example.com/frozen") for name, a in created.items()} == {"d-0": "yes", "d-1": "yes"}
    assert all(RECORD in a for a in created.values()), "created paused, with the record of what was added"
    assert json.loads(result.out)["unpaused"] == 2
    for i in range(2):
        obj = kube.get(databases, ns, f"d-{i}")
        assert obj["status"] == {"id": f"d{i}"}
        assert not ({"hold.example.com/frozen", RECORD} & set(obj["metadata"].get("annotations") or {})), "unpaused"
