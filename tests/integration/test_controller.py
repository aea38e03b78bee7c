"""`statusvault controller`: restore intents (ConfigMaps) reconciled against the real API server."""

from __future__ import annotations

import datetime as dt

import pytest

from statusvault.rfc3339 import format_micro
from statusvault.testing.fixtures import ensure_namespace
from statusvault.vocabulary.kinds import CONFIGMAPS, EVENTS, LEASES, NAMESPACES
from tests.builders import cr, kc_status, unique
from tests.integration.crs.test_restore import KC, delete_namespace

pytestmark = pytest.mark.version_neutral("restore intents are ConfigMaps: the core API is the same on every version")


@pytest.fixture
def ctl_ns(kube):
    ns = unique("ctl")
    ensure_namespace(kube, ns)
    return ns


def intent(kube, ns, name, **data):
    body = {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": name, "labels": {"statusvault.io/restore-intent": "true"}},
        "data": data,
    }
    live = kube.get(CONFIGMAPS, ns, name)
    if live is None:
        return kube.create(CONFIGMAPS, ns, body)
    return kube.replace(CONFIGMAPS, ns, name, {**live, "data": data})


def status_of(kube, ns, name):
    return (kube.get(CONFIGMAPS, ns, f"{name}-status") or {}).get("data") or {}


def reasons(kube, ns, name):
    events = [e for page in kube.list_pages(EVENTS, ns) for e in page if e["involvedObject"]["name"] == name]
    return sorted(e["reason"] for e in events)


def once(run, ns):
    result = run("controller", "run", "-n", ns, "--once")
    assert result.code == 0, result.err
    return int(result.out.split(": ")[1].split()[0])


def test_an_intent_restores_its_backup_with_phases_events_and_a_released_lease(
    run, kube, crds, make, namespace, ctl_ns
):
    make(cr(KC, "KubernetesCluster", "prod", spec={"region": "eu"}, status=kc_status(7)), namespace)
    assert run("backup", "nightly", "-n", namespace).code == 0
    delete_namespace(kube, namespace)
    owner = intent(kube, ctl_ns, "restore-a", backup="nightly", namespaces=namespace)

    assert once(run, ctl_ns) == 1
    assert kube.get(crds.resolve("kc"), namespace, "prod")["status"] == kc_status(7)
    status = status_of(kube, ctl_ns, "restore-a")
    assert status["phase"] == "Complete" and status["appliedBackup"] == "nightly"
    assert (status["failed"], status["withoutStatus"]) == ("0", "0")
    assert int(status["objects"]) >= 2, "the namespace, the KubernetesCluster (and the CRDs, skipped as existing)"
    assert status["attempts"] == "1"
    sc = kube.get(CONFIGMAPS, ctl_ns, "restore-a-status")
    assert sc["metadata"]["ownerReferences"][0]["uid"] == owner["metadata"]["uid"], "deleted with its intent"
    assert reasons(kube, ctl_ns, "restore-a") == ["RestoreCompleted", "RestoreStarted"]
    lease = kube.get(LEASES, ctl_ns, "statusvault-restore-restore-a")
    assert "holderIdentity" not in lease["spec"], "released, so another replica need not wait"

    assert once(run, ctl_ns) == 0, "nothing to do while the intent is unchanged"
    assert reasons(kube, ctl_ns, "restore-a") == ["RestoreCompleted", "RestoreStarted"]


def test_an_intent_can_restore_across_worker_processes(run, kube, crds, make, namespace, ctl_ns):
    for i in range(6):
        make(cr(KC, "KubernetesCluster", f"kc-{i}", status=kc_status(i)), namespace)
    assert run("backup", "nightly", "-n", namespace).code == 0
    delete_namespace(kube, namespace)
    intent(kube, ctl_ns, "restore-p", backup="nightly", namespaces=namespace, processes="2", parallel="2")

    assert once(run, ctl_ns) == 1
    status = status_of(kube, ctl_ns, "restore-p")
    assert (status["phase"], status["processes"], status["withoutStatus"]) == ("Complete", "2", "0"), status
    for i in range(6):
        assert kube.get(crds.resolve("kc"), namespace, f"kc-{i}")["status"] == kc_status(i)


def test_a_failed_restore_backs_off_until_the_intent_changes(run, kube, crds, make, namespace, ctl_ns):
    make(cr(KC, "KubernetesCluster", "k1", status=kc_status(1)), namespace)
    assert run("backup", "nightly", "-n", namespace).code == 0
    delete_namespace(kube, namespace)
    intent(kube, ctl_ns, "restore-b", backup="no-such-backup")

    assert once(run, ctl_ns) == 1
    status = status_of(kube, ctl_ns, "restore-b")
    assert status["phase"] == "Failed" and "not found" in status["message"]
    due = dt.datetime.strptime(status["nextAttemptAt"], "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=dt.UTC)
    assert dt.timedelta(seconds=20) < due - dt.datetime.now(dt.UTC) <= dt.timedelta(seconds=31)
    assert "RestoreFailed" in reasons(kube, ctl_ns, "restore-b")
    assert once(run, ctl_ns) == 0, "backing off"

    intent(kube, ctl_ns, "restore-b", backup="nightly", namespaces=namespace)
    assert once(run, ctl_ns) == 1, "a changed intent is acted on at once"
    status = status_of(kube, ctl_ns, "restore-b")
    assert (status["phase"], status["attempts"], status["failed"]) == ("Complete", "1", "0")
    assert kube.get(crds.resolve("kc"), namespace, "k1")["status"] == kc_status(1)
    assert "nextAttemptAt" not in status


def test_an_intent_whose_lease_another_replica_holds_is_left_alone(run, kube, ctl_ns):
    intent(kube, ctl_ns, "restore-c", backup="nightly")
    now = format_micro(dt.datetime.now(dt.UTC))
    spec = {"holderIdentity": "other-pod", "leaseDurationSeconds": 60, "acquireTime": now, "renewTime": now}
    lease = {
        "apiVersion": "coordination.k8s.io/v1",
        "kind": "Lease",
        "metadata": {"name": "statusvault-restore-restore-c"},
    }
    kube.create(LEASES, ctl_ns, {**lease, "spec": spec})
    assert once(run, ctl_ns) == 0
    assert status_of(kube, ctl_ns, "restore-c") == {}


def test_an_invalid_intent_is_reported_once(run, kube, ctl_ns):
    intent(kube, ctl_ns, "restore-d", backup="nightly", **{"dry-run": "client"})
    assert once(run, ctl_ns) == 0
    status = status_of(kube, ctl_ns, "restore-d")
    assert status["phase"] == "Invalid" and "not taken by an intent: dry-run: an intent restores" in status["message"]
    assert once(run, ctl_ns) == 0
    assert reasons(kube, ctl_ns, "restore-d") == ["InvalidIntent"], "not repeated every pass"


def test_the_rendered_controller_restores_with_its_own_permissions(run, kube, crds, make, namespace, cluster, tmp_path):
    """render --apply, then reconcile an intent as the controller's ServiceAccount: its RBAC is enough."""
    from tests.integration.test_schedule import _service_account_kubeconfig

    ctl_ns = unique("ctlr")
    ensure_namespace(kube, ctl_ns)  # a server dry run cannot create the namespace it then writes into
    args = ("controller", "render", "-n", ctl_ns, "--storage", "s3://b/p", "--include-resources", "kc")
    dry = run(*args, "--apply", "--dry-run", "server")
    assert dry.code == 0, dry.err
    assert dry.out.splitlines()[-1] == "deployment/statusvault-controller applied (server dry run)"
    assert run(*args, "--apply").code == 0
    make(cr(KC, "KubernetesCluster", "prod", status=kc_status(3)), namespace)
    assert run("backup", "nightly", "-n", namespace, "--include-resources", "kc").code == 0
    delete_namespace(kube, namespace)
    intent(kube, ctl_ns, "restore-e", backup="nightly")
    as_sa = _service_account_kubeconfig(kube, cluster, ctl_ns, "statusvault-controller", tmp_path)

    result = run("controller", "run", "-n", ctl_ns, "--once", kubeconfig=as_sa)
    assert result.code == 0, result.err
    status = status_of(kube, ctl_ns, "restore-e")
    assert status["phase"] == "Complete", status.get("message")
    assert kube.get(crds.resolve("kc"), namespace, "prod")["status"] == kc_status(3)
    assert reasons(kube, ctl_ns, "restore-e") == ["RestoreCompleted", "RestoreStarted"]


def test_a_fence_auto_intent_fences_a_racing_operator_with_the_controllers_own_permissions(
    run, kube, namespace, cluster, proxied, tmp_path
):
    """The rendered ClusterRole lets the controller read RBAC and workloads, and scale the operator it finds to 0
    and back: the operator (status writes made slow, so it would race) provisions nothing."""
    from statusvault.restore.quiet.scaledown import ANNOTATION
    from tests.integration.test_fence import Cluster, N, an_operator_of, backed_up_widgets, saved, slow_status
    from tests.integration.test_pause import Operator
    from tests.integration.test_schedule import _service_account_kubeconfig

    group = f"{unique('ctlfence')}.example.com"
    widgets = backed_up_widgets(run, kube, group, namespace)  # backup "b"; the objects deleted
    world, ctl_ns = Cluster(kube), unique("ctlf")
    ensure_namespace(kube, ctl_ns)
    deployment = an_operator_of(world, group)
    op = Operator(cluster, namespace, tmp_path / "op.log", deployment, qualified=widgets.qualified)
    try:
        args = ("controller", "render", "-n", ctl_ns, "--storage", "s3://b/p", "--include-resources", widgets.qualified)
        assert run(*args, "--apply").code == 0
        intent(kube, ctl_ns, "restore-f", backup="b", namespaces=namespace, fence="auto", parallel="4")
        proxy, _ = proxied(0.0, before=slow_status)
        as_sa = _service_account_kubeconfig(kube, cluster, ctl_ns, "statusvault-controller", tmp_path, proxy.url)

        result = run("controller", "run", "-n", ctl_ns, "--once", kubeconfig=as_sa)

        assert result.code == 0, result.err
        status = status_of(kube, ctl_ns, "restore-f")
        assert status["phase"] == "Complete", status.get("message")
        assert op.provisions() == [], "scaled to 0 while the objects had no status"
        ns, name = deployment.split("/")
        live = world.get(ns, "Deployment", name)
        assert live["spec"]["replicas"] == 1 and live["metadata"]["generation"] >= 3, "scaled to 0 and back"
        assert ANNOTATION not in (live["metadata"].get("annotations") or {})
        for i in range(N):
            assert kube.get(widgets, namespace, f"w-{i:02d}")["status"] == saved(i)
    finally:
        op.stop()
        world.cleanup()
        kube.delete(NAMESPACES, None, ctl_ns)


def test_an_intent_restores_a_velero_backup_of_a_storage_location(run, kube, crds, make, namespace, ctl_ns, tmp_path):
    """data.from-velero: "true": the backup is a Velero backup of the storage the intent names."""
    from tests.velerotar import tarball

    kc = crds.resolve("kc")
    make(cr(KC, "KubernetesCluster", "prod", status=kc_status(3)), namespace)
    objects = [("kubernetesclusters.xyz.example.com", kube.get(kc, namespace, "prod")),
               ("namespaces", kube.get(NAMESPACES, None, namespace))]  # fmt: skip
    delete_namespace(kube, namespace)
    bsl = tmp_path / "velero-bucket"
    (bsl / "backups" / "daily-1").mkdir(parents=True)
    tarball(bsl / "backups" / "daily-1" / "daily-1.tar.gz", objects)
    intent(kube, ctl_ns, "from-velero", backup="daily-1", storage=str(bsl), **{"from-velero": "true"})
    intent(kube, ctl_ns, "bad-flag", backup="daily-1", storage=str(bsl), **{"from-velero": "yes"})

    assert once(run, ctl_ns) == 1, "the invalid one is reported, not run"
    assert status_of(kube, ctl_ns, "from-velero")["phase"] == "Complete"
    assert kube.get(kc, namespace, "prod")["status"] == kc_status(3)
    bad = status_of(kube, ctl_ns, "bad-flag")
    assert bad["phase"] == "Invalid" and "from-velero must be true or false" in bad["message"], bad
