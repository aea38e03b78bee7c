"""The Restore resource (statusvault.dev/v1alpha1) on the real API server: its CRD refuses a bad spec at
admission, and the controller reconciles it into a restore with kstatus conditions, Events and annotations."""

from __future__ import annotations

import contextlib
import datetime as dt
import json
import shutil
import signal
import threading
import time
from pathlib import Path

import pytest
import yaml

from statusvault.cli.specfields import crds as restore_crds
from statusvault.errors import KubeApiError
from statusvault.kube.discovery import discover
from statusvault.kube.transport import APPLY_PATCH, MERGE_PATCH, Request
from statusvault.rfc3339 import format_micro
from statusvault.testing.fixtures import create_with_status, ensure_namespace, install_crds
from statusvault.vocabulary.kinds import CRDS, EVENTS, LEASES, NAMESPACES
from tests.builders import cr, crd, kc_status, unique
from tests.integration.crs.servers import delete_namespace
from tests.integration.crs.test_restore import KC

pytestmark = pytest.mark.version_sensitive(
    "its CRD's admission checks (structural schema, no CEL) must refuse a bad spec on 1.20 as on 1.36"
)

TABLE = "application/json;as=Table;v=v1;g=meta.k8s.io,application/json;as=Table;v=v1beta1;g=meta.k8s.io"


@pytest.fixture(scope="module")
def restores(kube):
    return install_crds(kube, restore_crds()).by_qualified("restores.statusvault.dev")


@pytest.fixture
def ctl_ns(kube):
    ns = unique("rctl")
    ensure_namespace(kube, ns)
    return ns


def restore_body(name: str, **spec) -> dict:
    return {"apiVersion": "statusvault.dev/v1alpha1", "kind": "Restore", "metadata": {"name": name}, "spec": spec}


@pytest.mark.parametrize(
    ("spec", "refusal"),
    [
        ({"backup": "b", "parallel": "eight"}, "spec.parallel"),
        ({"backup": "b", "parallel": 0}, "spec.parallel"),
        ({"backup": "b", "existing-resource-policy": "replace"}, "spec.existing-resource-policy"),
        ({"namespace": ["a"]}, "spec.backup"),
        ({"backup": "b", "no-status": True, "status-include-resources": ["kc"]}, "spec"),
        ({"backup": "b", "pause-annotation": "x/paused"}, "spec"),
    ],
    ids=["wrong-type", "out-of-range", "not-a-choice", "no-backup", "no-status-and-a-status-filter", "needs"],
)
def test_a_bad_spec_is_refused_at_admission(kube, restores, ctl_ns, spec, refusal):
    with pytest.raises(KubeApiError) as refused:
        kube.create(restores, ctl_ns, restore_body("bad", **spec))
    assert refused.value.code == 422 and refusal in str(refused.value), refused.value
    assert kube.get(restores, ctl_ns, "bad") is None


def test_no_status_alone_and_filters_alone_are_accepted(kube, restores, ctl_ns):
    kube.create(restores, ctl_ns, restore_body("a", backup="b", **{"no-status": True}))
    kube.create(
        restores, ctl_ns, restore_body("b", backup="b", **{"no-status": False, "status-include-resources": ["kc"]})
    )


def test_the_documented_example_is_accepted(kube, restores, ctl_ns):
    example = yaml.safe_load((Path(__file__).resolve().parents[2] / "docs" / "gitops" / "restore.yaml").read_text())
    made = kube.create(restores, ctl_ns, {**example, "metadata": {"name": "example"}})
    assert made["spec"] == example["spec"], "nothing pruned"


def test_an_unknown_field_is_refused_by_an_apply(kube, restores, ctl_ns):
    """Server-side apply (`kubectl apply --server-side`; plain kubectl apply validates fields strictly too) refuses
    a field the schema does not declare: 1.20 in building the typed patch, 1.25 on by strict field validation.
    A create without validation would have it pruned, so the controller never sees it."""
    body = restore_body("u", backup="b", paralel=4)
    strict = (("fieldValidation", "Strict"), ("fieldManager", "kubectl"))
    with pytest.raises(KubeApiError) as refused:
        kube.patch(restores, ctl_ns, "u", body, APPLY_PATCH, params=strict)
    assert "paralel" in str(refused.value)
    assert kube.get(restores, ctl_ns, "u") is None


def test_install_dry_run_prints_the_crd_first(run, crds):
    result = run("controller", "install", "--dry-run", "--storage", "s3://b/p", "--include-resources", "kc")
    assert result.code == 0, result.err
    first = result.out.split("\n---")[0]
    assert "kind: CustomResourceDefinition" in first and "name: restores.statusvault.dev" in first
    assert "kind: Deployment" in result.out


# --- the controller reconciling Restores ---


def wait_for(restores, kube, ns, name, condition="Ready", status="True", timeout=60.0) -> dict:
    """kubectl wait --for=condition=<condition> restore/<name>: the condition of that type has that status."""
    deadline = time.monotonic() + timeout
    while True:
        obj = kube.get(restores, ns, name) or {}
        conds = {c["type"]: c for c in (obj.get("status") or {}).get("conditions") or []}
        if conds.get(condition, {}).get("status") == status:
            return obj
        assert time.monotonic() < deadline, f"{condition}={status} never came: {obj.get('status')}"
        time.sleep(0.2)


def wait_phase(restores, kube, ns, name, phase, timeout=60.0) -> dict:
    """The Restore's status once its phase is `phase`."""
    deadline = time.monotonic() + timeout
    while (status := (kube.get(restores, ns, name) or {}).get("status") or {}).get("phase") != phase:
        assert time.monotonic() < deadline, f"phase {phase} never came: {status}"
        time.sleep(0.2)
    return status


def events_on(kube, ns, name, kind="Restore") -> dict[str, str]:
    return {
        e["reason"]: e["type"]
        for page in kube.list_pages(EVENTS, ns)
        for e in page
        if e["involvedObject"]["name"] == name and e["involvedObject"]["kind"] == kind
    }


def backed_up(run, kube, make, namespace, count):
    for i in range(count):
        make(cr(KC, "KubernetesCluster", f"k-{i}", status=kc_status(i)), namespace)
    assert run("backup", "nightly", "-n", namespace).code == 0
    delete_namespace(kube, namespace)


@pytest.fixture
def controller(run):
    started = []

    def _start(ns, kubeconfig=None, *extra):
        proc = run.spawn("controller", "run", "-n", ns, "--interval", "1", *extra, kubeconfig=kubeconfig)
        started.append(proc)
        return proc

    yield _start
    for proc in started:
        proc.kill()
        proc.wait()


def test_a_restore_becomes_ready_when_every_object_has_its_status(
    run, kube, crds, make, namespace, restores, ctl_ns, controller
):
    backed_up(run, kube, make, namespace, 2)
    made = kube.create(restores, ctl_ns, restore_body("r1", backup="nightly", namespace=[namespace]))
    controller(ctl_ns)

    obj = wait_for(restores, kube, ctl_ns, "r1")
    for i in range(2):
        assert kube.get(crds.resolve("kc"), namespace, f"k-{i}")["status"] == kc_status(i)
    status = obj["status"]
    assert status["observedGeneration"] == made["metadata"]["generation"] == 1
    assert (status["phase"], status["withoutStatus"], status["failed"]) == ("Complete", 0, 0)
    assert status["created"] >= 2 and status["statusWritten"] == 2, status
    assert status["startedAt"] <= status["completedAt"]
    key = f"reports/restores/{ctl_ns}/r1-{status['appliedDigest']}.json"
    assert status["report"].endswith(key), status["report"]
    kept = json.loads((run.storage / key).read_text())
    assert {i["name"] for i in kept["items"]} >= {"k-0", "k-1"} and kept["withoutSavedStatus"] == 0
    table = kube.request_json(Request("GET", restores.path(ctl_ns, "r1"), accept=TABLE))  # what kubectl get shows
    row = dict(zip([c["name"] for c in table["columnDefinitions"]], table["rows"][0]["cells"], strict=True))
    assert {k: row[k] for k in ("Phase", "Ready", "Reason", "Created", "Status", "Without", "Failed")} == {
        "Phase": "Complete", "Ready": "True", "Reason": "Completed", "Created": status["created"], "Status": 2,
        "Without": 0, "Failed": 0}  # fmt: skip
    assert row["Age"] and row["Backup"] == "nightly"
    ready = {c["type"]: (c["status"], c["reason"]) for c in status["conditions"]}
    assert ready == {"Ready": ("True", "Completed"), "Reconciling": ("False", "Completed"),
                     "Stalled": ("False", "Completed")}  # fmt: skip
    assert events_on(kube, ctl_ns, "r1") == {"RestoreStarted": "Normal", "RestoreCompleted": "Normal"}


def test_spec_strict_makes_a_restore_whose_fields_the_server_dropped_partial_and_without_it_complete(
    run, kube, namespace, restores, ctl_ns, controller
):
    """spec.strict is --strict: a field the backup held that the server dropped (a schema that prunes it since the
    backup) makes the Restore Partial (ServerChanged) instead of Complete; the same restore without it completes."""
    group = f"{unique('strict')}.example.com"
    open_schema = {"type": "object", "x-kubernetes-preserve-unknown-fields": True}
    d = install_crds(kube, [crd(group, "Gadget", schema=open_schema)])
    for i in range(2):
        body = cr(f"{group}/v1", "Gadget", f"g{i}", spec={"size": 1, "color": "red"}, status={"phase": "Ready"})
        create_with_status(kube, d, body, namespace)
    assert run("backup", "gadgets", "-n", namespace, "--include-resources", f"gadgets.{group}").code == 0
    pruning = {"type": "object", "properties": {
        "spec": {"type": "object", "properties": {"size": {"type": "integer"}}},
        "status": {"type": "object", "x-kubernetes-preserve-unknown-fields": True}}}  # fmt: skip
    live = kube.get(CRDS, None, f"gadgets.{group}")
    kube.replace(CRDS, None, f"gadgets.{group}", {**crd(group, "Gadget", schema=pruning), "metadata": live["metadata"]})
    strict_ns, plain_ns = unique("strict"), unique("plain")
    for name, target, strict in (("r-strict", strict_ns, True), ("r-plain", plain_ns, False)):
        spec = {
            "backup": "gadgets",
            "namespace-mapping": [f"{namespace}:{target}"],
            **({"strict": True} if strict else {}),
        }
        kube.create(restores, ctl_ns, restore_body(name, **spec))
    controller(ctl_ns)

    deadline = time.monotonic() + 60
    while "shortfalls" not in (partial := (kube.get(restores, ctl_ns, "r-strict") or {}).get("status") or {}):
        assert time.monotonic() < deadline, f"the strict restore never ended partial: {partial}"
        time.sleep(0.1)
    plain = wait_for(restores, kube, ctl_ns, "r-plain")["status"]
    gadgets = d.by_qualified(f"gadgets.{group}")
    for target in (strict_ns, plain_ns):
        assert [kube.get(gadgets, target, f"g{i}")["spec"] for i in range(2)] == [{"size": 1}] * 2, "pruned"
        assert [kube.get(gadgets, target, f"g{i}")["status"] for i in range(2)] == [{"phase": "Ready"}] * 2
    assert partial["shortfalls"].split(",")[0] == "ServerChanged=2", partial  # 1.36 also warns: ServerWarned
    ready = {c["type"]: (c["status"], c["reason"]) for c in partial["conditions"]}
    assert ready["Ready"] == ("False", "PartiallyRestored"), ready
    assert (plain["phase"], "shortfalls" in plain) == ("Complete", False), plain


def test_a_restore_that_loses_a_race_is_partially_restored_names_the_object_and_its_retry_unmarks_it(
    run, kube, crds, make, namespace, restores, ctl_ns, proxied
):
    backed_up(run, kube, make, namespace, 2)
    kc = crds.resolve("kc")
    racing = [True]

    def another_writer(method, path, body):  # changes k-1 before each of our status writes: every one is stale
        if racing[0] and method == "PUT" and path.split("?")[0].endswith("/k-1/status"):
            kube.patch(kc, namespace, "k-1", {"metadata": {"labels": {"touched": str(time.monotonic_ns())}}},
                       MERGE_PATCH)  # fmt: skip

    _, kubeconfig = proxied(0.0, before=another_writer)
    kube.create(restores, ctl_ns, restore_body("r2", backup="nightly", namespace=[namespace]))
    result = run("controller", "run", "-n", ctl_ns, "--once", kubeconfig=kubeconfig)
    assert result.code == 0, result.err

    obj = wait_for(restores, kube, ctl_ns, "r2", "Ready", "False")
    conds = {c["type"]: (c["status"], c["reason"]) for c in obj["status"]["conditions"]}
    assert conds["Ready"] == ("False", "PartiallyRestored"), "never Ready with an object lacking its status"
    assert (conds["Reconciling"][0], conds["Stalled"][0]) == ("True", "False"), "retried by itself: progressing"
    assert obj["status"]["nextAttemptAt"] and obj["status"]["attempts"] == 1
    assert (obj["status"]["withoutStatus"], obj["status"]["statusWritten"]) == (1, 1)
    assert obj["status"]["shortfalls"] == "FailedObjects=1,WithoutSavedStatus=1", "as -o json names them"
    assert kube.get(kc, namespace, "k-0")["status"] == kc_status(0)
    lost = kube.get(kc, namespace, "k-1")
    assert lost.get("status") != kc_status(1)
    note = lost["metadata"]["annotations"]["statusvault.dev/status-not-restored"]
    assert note.startswith(f"Restore {ctl_ns}/r2: ") and "409" in note, note
    assert events_on(kube, ctl_ns, "r2")["RestoreFailed"] == "Warning"

    # the other writer stops; the retry (its backoff cut short) writes k-1's status and takes the mark away
    racing[0] = False
    kube.patch(restores, ctl_ns, "r2", {"status": {"nextAttemptAt": "2000-01-01T00:00:00Z"}}, MERGE_PATCH, sub="status")
    result = run("controller", "run", "-n", ctl_ns, "--once", kubeconfig=kubeconfig)
    assert result.code == 0, result.err
    obj = wait_for(restores, kube, ctl_ns, "r2", "Ready", "True")
    assert (obj["status"]["withoutStatus"], obj["status"]["attempts"]) == (0, 2), obj["status"]
    assert "shortfalls" not in obj["status"], "the earlier attempt's reasons are no longer true"
    retried = kube.get(kc, namespace, "k-1")
    assert retried["status"] == kc_status(1)
    assert "statusvault.dev/status-not-restored" not in (retried["metadata"].get("annotations") or {}), retried
    assert "statusvault.dev/status-not-restored" not in (
        kube.get(kc, namespace, "k-0")["metadata"].get("annotations") or {}
    )


def running_slowly(run, kube, crds, make, namespace, restores, ctl_ns, proxied, controller, name, spec):
    """8 objects backed up, a Restore of them and the controller running it (each create 0.4 s late, through a proxy)
    until the Restore is reconciling and its first object is on the cluster: (kc, proxy, kubeconfig, process)."""
    backed_up(run, kube, make, namespace, 8)
    kc = crds.resolve("kc")

    def slow_creates(method, path, body):
        if method == "POST" and "/kubernetesclusters" in path:
            time.sleep(0.4)

    proxy, kubeconfig = proxied(0.0, before=slow_creates)
    kube.create(restores, ctl_ns, restore_body(name, **spec))
    proc = controller(ctl_ns, kubeconfig)
    wait_for(restores, kube, ctl_ns, name, "Reconciling", "True")
    deadline = time.monotonic() + 60
    while not [k for page in kube.list_pages(kc, namespace) for k in page]:
        assert time.monotonic() < deadline and proc.poll() is None
        time.sleep(0.1)
    return kc, proxy, kubeconfig, proc


def test_deleting_a_restore_mid_run_stops_it_and_a_new_one_resumes(
    run, kube, crds, make, namespace, restores, ctl_ns, proxied, controller
):
    spec = {"backup": "nightly", "namespace": [namespace], "parallel": 1}
    kc, proxy, kubeconfig, proc = running_slowly(run, kube, crds, make, namespace, restores, ctl_ns, proxied,
                                                 controller, "r3", spec)  # fmt: skip
    deadline = time.monotonic() + 60
    kube.delete(restores, ctl_ns, "r3")
    lease = "statusvault-restores-r3"
    while "holderIdentity" in ((kube.get(LEASES, ctl_ns, lease) or {}).get("spec") or {"holderIdentity": 1}):
        assert time.monotonic() < deadline and proc.poll() is None, "the attempt never ended"
        time.sleep(0.1)
    assert proc.poll() is None, "the controller goes on"
    done = len([k for page in kube.list_pages(kc, namespace) for k in page])
    assert 0 < done < 8, "stopped before its last object"
    assert "RestoreStopped" in events_on(kube, ctl_ns, "r3")
    proc.kill()
    proc.wait()

    proxy.before = lambda method, path, body: None
    kube.create(restores, ctl_ns, restore_body("r4", **spec))
    result = run("controller", "run", "-n", ctl_ns, "--once", kubeconfig=kubeconfig)  # the same cluster URL
    assert result.code == 0, result.err
    status = wait_for(restores, kube, ctl_ns, "r4")["status"]
    assert status["resumed"] >= done and status["withoutStatus"] == 0, status
    for i in range(8):
        assert kube.get(kc, namespace, f"k-{i}")["status"] == kc_status(i)


def overwriting(kube, kc, namespace: str, names: list[str]) -> tuple[threading.Event, threading.Thread]:
    """An operator that writes a new endpoint into these objects' status each time it finds the saved one."""
    stop = threading.Event()

    def loop() -> None:
        while not stop.is_set():
            for name in names:
                obj = kube.get(kc, namespace, name)
                i = int(name.split("-")[1])
                if obj is not None and obj.get("status") == kc_status(i):
                    obj["status"] = {**obj["status"], "apiServerURL": f"https://new-{i}.example.net"}
                    with contextlib.suppress(KubeApiError):  # a conflict with the restore's write: next round
                        kube.replace(kc, namespace, name, obj, sub="status", manager="kc-operator")
            time.sleep(0.02)

    thread = threading.Thread(target=loop, daemon=True)
    thread.start()
    return stop, thread


def test_a_retried_restore_is_never_ready_while_an_operator_writes_its_statuses_again(
    run, kube, crds, make, namespace, restores, ctl_ns, monkeypatch
):
    """Each attempt reads the cluster back: the statuses the operator wrote again keep the Restore from Ready, on
    every retry, however much the journal says is done; once the operator stops, the next attempt writes them back
    and the Restore is Ready with every saved status on the cluster."""
    backed_up(run, kube, make, namespace, 4)
    kc = crds.resolve("kc")
    monkeypatch.setenv("STATUSVAULT_SETTLE_SECONDS", "1")  # the controller's own wait before it reads back
    stop, operator = overwriting(kube, kc, namespace, ["k-0", "k-1"])
    kube.create(restores, ctl_ns, restore_body("r5", backup="nightly", namespace=[namespace]))
    try:
        for attempt in (1, 2, 3):
            if attempt > 1:  # its backoff cut short
                kube.patch(restores, ctl_ns, "r5", {"status": {"nextAttemptAt": "2000-01-01T00:00:00Z"}}, MERGE_PATCH,
                           sub="status")  # fmt: skip
            assert run("controller", "run", "-n", ctl_ns, "--once").code == 0
            status = wait_for(restores, kube, ctl_ns, "r5", "Ready", "False")["status"]
            assert (status["attempts"], status["shortfalls"]) == (attempt, "StatusOverwritten=2"), status
    finally:
        stop.set()
        operator.join()

    kube.patch(restores, ctl_ns, "r5", {"status": {"nextAttemptAt": "2000-01-01T00:00:00Z"}}, MERGE_PATCH, sub="status")
    assert run("controller", "run", "-n", ctl_ns, "--once").code == 0

    status = wait_for(restores, kube, ctl_ns, "r5")["status"]
    assert (status["phase"], status["attempts"]) == ("Complete", 4)
    for i in range(4):
        assert kube.get(kc, namespace, f"k-{i}")["status"] == kc_status(i), "an independent read agrees"


def test_sigterm_stops_the_controllers_restore_after_its_writes_in_flight_and_the_next_attempt_resumes(
    run, kube, crds, make, namespace, restores, ctl_ns, proxied, controller
):
    spec = {"backup": "nightly", "namespace": [namespace], "parallel": 1}
    kc, proxy, kubeconfig, proc = running_slowly(run, kube, crds, make, namespace, restores, ctl_ns, proxied,
                                                 controller, "r6", spec)  # fmt: skip
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=60)

    assert proc.returncode == 0, err.decode()
    assert "Traceback" not in err.decode() and "controller stopped" in err.decode()
    status = wait_phase(restores, kube, ctl_ns, "r6", "Failed")
    assert status["reason"] == "Interrupted", status
    done = [k for page in kube.list_pages(kc, namespace) for k in page]
    assert 0 < len(done) < 8 and all(k.get("status") == kc_status(int(k["metadata"]["name"][2:])) for k in done), (
        "stopped after its write in flight: every object it created has its status"
    )

    proxy.before = lambda method, path, body: None
    assert run("controller", "run", "-n", ctl_ns, "--once", kubeconfig=kubeconfig).code == 0
    status = wait_for(restores, kube, ctl_ns, "r6")["status"]
    assert status["resumed"] >= len(done) and status["withoutStatus"] == 0, status  # the namespace is done too
    for i in range(8):
        assert kube.get(kc, namespace, f"k-{i}")["status"] == kc_status(i)


# --- Backup: a one-off backup asked for declaratively ---


@pytest.fixture(scope="module")
def backups(kube, restores):
    return install_crds(kube, restore_crds()).by_qualified("backups.statusvault.dev")


def test_a_bad_backup_spec_is_refused_at_admission(kube, backups, ctl_ns):
    body = {"apiVersion": "statusvault.dev/v1alpha1", "kind": "Backup", "metadata": {"name": "bad"}}
    with pytest.raises(KubeApiError) as refused:
        kube.create(backups, ctl_ns, {**body, "spec": {"all-namespaces": True, "namespace": ["a"]}})
    assert refused.value.code == 422
    with pytest.raises(KubeApiError):
        kube.create(backups, ctl_ns, {**body, "spec": {"page-size": "big"}})


def test_a_backup_resource_is_backed_up_once_and_restorable(
    run, kube, crds, make, namespace, backups, restores, ctl_ns
):
    make(cr(KC, "KubernetesCluster", "k-0", status=kc_status(5)), namespace)
    body = {"apiVersion": "statusvault.dev/v1alpha1", "kind": "Backup", "metadata": {"name": "before-upgrade"}}
    kube.create(backups, ctl_ns, {**body, "spec": {"namespace": [namespace], "include-crds": False}})
    result = run("controller", "run", "-n", ctl_ns, "--once")
    assert result.code == 0 and result.out.endswith(": 1 restore(s) run\n"), (result.out, result.err)

    obj = wait_for(backups, kube, ctl_ns, "before-upgrade")
    status = obj["status"]
    assert (status["phase"], status["appliedBackup"], status["objects"], status["withStatus"]) == (
        "Complete", "before-upgrade", 1, 1)  # fmt: skip
    assert events_on(kube, ctl_ns, "before-upgrade", "Backup") == {"BackupStarted": "Normal",
                                                                   "BackupCompleted": "Normal"}  # fmt: skip
    assert run("controller", "run", "-n", ctl_ns, "--once").out.endswith(": 0 restore(s) run\n"), "once"

    delete_namespace(kube, namespace)
    kube.create(restores, ctl_ns, restore_body("back", backup="before-upgrade"))
    assert run("controller", "run", "-n", ctl_ns, "--once").code == 0
    wait_for(restores, kube, ctl_ns, "back")
    assert kube.get(crds.resolve("kc"), namespace, "k-0")["status"] == kc_status(5)


def test_a_backup_resource_takes_dependencies_and_keeps_secret_data_out_of_a_plaintext_backup_unless_allowed(
    run, kube, crds, namespace, backups, ctl_ns
):
    """spec.with-dependencies and spec.allow-plaintext-secrets mean what the CLI's flags mean: a Secret the cluster
    names by a reference is a dependency; asked for in an unencrypted backup it fails the Backup, with nothing
    kept, until the spec allows plaintext Secret data."""
    group = f"{unique('deps')}.example.com"
    vaults = install_crds(kube, [crd(group, "Vault")]).resolve(f"vaults.{group}")
    spec = {"region": "eu", "credentialsSecretRef": {"name": "creds"}}
    vault = cr(f"{group}/v1", "Vault", "v-0", spec=spec)
    vault["metadata"]["namespace"] = namespace
    created = kube.create(vaults, namespace, vault)
    kube.replace(vaults, namespace, "v-0", {**created, "status": kc_status(1)}, sub="status")
    secret = {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "creds"}, "data": {"token": "c2VjcmV0"}}
    kube.create(crds.resolve("secrets"), namespace, secret)
    body = {"apiVersion": "statusvault.dev/v1alpha1", "kind": "Backup"}
    wanted = {"namespace": [namespace], "include-crds": False, "with-dependencies": True}
    kube.create(backups, ctl_ns, {**body, "metadata": {"name": "refused"}, "spec": wanted})
    assert run("controller", "run", "-n", ctl_ns, "--once").code == 0

    refused = wait_for(backups, kube, ctl_ns, "refused", "Ready", "False")["status"]
    assert refused["reason"] == "BackupFailed" and "--allow-plaintext-secrets" in refused["message"], refused
    assert not list((run.storage / "backups").glob("refused/*")), "nothing of it kept"

    allowed = {**wanted, "allow-plaintext-secrets": True}
    kube.create(backups, ctl_ns, {**body, "metadata": {"name": "allowed"}, "spec": allowed})
    assert run("controller", "run", "-n", ctl_ns, "--once").code == 0
    assert wait_for(backups, kube, ctl_ns, "allowed")["status"]["phase"] == "Complete"
    described = json.loads(run("describe", "allowed", "-o", "json").out)
    assert described["resources"]["secrets"]["count"] == 1, described["resources"]
    edges = described["dependencies"]["edges"]
    assert any("creds" in json.dumps(e) and "credentialsSecretRef" in json.dumps(e) for e in edges), edges
    kube.delete(CRDS, None, f"vaults.{group}")


def test_deleting_a_backup_mid_run_stops_it_before_it_lands(
    run, kube, crds, make, namespace, backups, ctl_ns, proxied, controller
):
    for i in range(12):  # 12 pages: 6 s to list them all, the deletion comes after the second
        make(cr(KC, "KubernetesCluster", f"k-{i}", status=kc_status(i)), namespace)
    listed = []

    def slow_lists(method, path, body):  # one object a page (page-size 1), half a second a page
        if method == "GET" and f"/namespaces/{namespace}/kubernetesclusters" in path:
            listed.append(path)
            time.sleep(0.5)

    _, kubeconfig = proxied(0.0, before=slow_lists)
    body = {"apiVersion": "statusvault.dev/v1alpha1", "kind": "Backup", "metadata": {"name": "doomed"}}
    spec = {"namespace": [namespace], "include-crds": False, "page-size": 1, "list-concurrency": 1}
    kube.create(backups, ctl_ns, {**body, "spec": spec})
    proc = controller(ctl_ns, kubeconfig)
    deadline = time.monotonic() + 60
    while len(listed) < 2:  # the backup is under way: its LIST has gone past its first page
        assert time.monotonic() < deadline and proc.poll() is None, "the backup never started listing"
        time.sleep(0.05)
    kube.delete(backups, ctl_ns, "doomed")
    while "BackupStopped" not in events_on(kube, ctl_ns, "doomed", "Backup"):
        assert time.monotonic() < deadline and proc.poll() is None, "the backup was never stopped"
        time.sleep(0.1)
    assert proc.poll() is None, "the controller goes on"
    assert len(listed) < 12, f"stopped before its last page, not after {len(listed)} LISTs"
    assert not list((run.storage / "backups").glob("doomed/*")), "nothing of it landed"
    proc.kill()
    proc.wait()
    described = run("describe", "doomed")
    assert described.code != 0 and "doomed" in described.err, (described.out, described.err)


def test_a_restore_whose_lease_another_replica_holds_waits_for_it(kube, restores, ctl_ns, run):
    now = format_micro(dt.datetime.now(dt.UTC))
    spec = {"holderIdentity": "other-pod", "leaseDurationSeconds": 60, "acquireTime": now, "renewTime": now}
    lease = {"apiVersion": "coordination.k8s.io/v1", "kind": "Lease", "metadata": {"name": "statusvault-restores-w"}}
    kube.create(LEASES, ctl_ns, {**lease, "spec": spec})
    kube.create(restores, ctl_ns, restore_body("w", backup="nightly"))
    assert run("controller", "run", "-n", ctl_ns, "--once").code == 0
    obj = wait_for(restores, kube, ctl_ns, "w", "Reconciling", "True")
    assert obj["status"]["phase"] == "Pending"
    assert {c["type"]: c["reason"] for c in obj["status"]["conditions"]}["Ready"] == "WaitingForLease"


def test_the_installed_controller_reconciles_restores_with_its_own_permissions(
    run, kube, crds, make, namespace, restores, cluster, tmp_path, proxied
):
    """controller install, then a Restore that leaves an object without its status, reconciled as the
    controller's ServiceAccount: listing it, writing its /status, annotating the object, recording Events."""
    from tests.integration.test_schedule import _service_account_kubeconfig

    ctl_ns = unique("ctli")
    ensure_namespace(kube, ctl_ns)
    installed = run("controller", "install", "-n", ctl_ns, "--storage", "s3://b/p", "--include-resources", "kc")
    assert installed.code == 0, installed.err
    assert installed.out.splitlines()[:2] == [
        "customresourcedefinition/restores.statusvault.dev applied",
        "customresourcedefinition/backups.statusvault.dev applied",
    ]
    backed_up(run, kube, make, namespace, 2)
    kc = crds.resolve("kc")

    def refuse_k1_status(method, path, body):  # every status write of k-1 meets another writer's change first
        if method == "PUT" and path.split("?")[0].endswith("/k-1/status"):
            kube.patch(kc, namespace, "k-1", {"metadata": {"labels": {"t": str(time.monotonic_ns())}}}, MERGE_PATCH)

    proxy, _ = proxied(0.0, before=refuse_k1_status)
    as_sa = _service_account_kubeconfig(kube, cluster, ctl_ns, "statusvault-controller", tmp_path)
    as_sa.write_text(as_sa.read_text().replace(cluster.server, proxy.url))
    kube.create(restores, ctl_ns, restore_body("mine", backup="nightly", namespace=[namespace]))
    result = run("controller", "run", "-n", ctl_ns, "--once", kubeconfig=as_sa)
    assert result.code == 0 and "Forbidden" not in result.err and "403" not in result.err, result.err

    obj = wait_for(restores, kube, ctl_ns, "mine", "Ready", "False")
    assert obj["status"]["reason"] == "PartiallyRestored" and obj["status"]["statusWritten"] == 1
    assert "statusvault.dev/status-not-restored" in kube.get(kc, namespace, "k-1")["metadata"]["annotations"]
    assert events_on(kube, ctl_ns, "mine") == {"RestoreStarted": "Normal", "RestoreFailed": "Warning"}


def test_a_restore_naming_a_store_the_administrator_did_not_allow_fails_and_writes_nothing(
    run, kube, crds, make, namespace, restores, ctl_ns, controller, tmp_path
):
    """A tenant who may create Restores points one at a store they write (a planted backup there): with
    --allowed-storage the controller refuses to read it, and says why on the Restore."""
    backed_up(run, kube, make, namespace, 1)
    theirs = tmp_path / "mallory"
    shutil.copytree(run.storage, theirs)  # the same backup, in the tenant's own store
    kube.create(restores, ctl_ns, restore_body("r-theirs", backup="nightly", storage=str(theirs)))
    kube.create(restores, ctl_ns, restore_body("r-ours", backup="nightly", storage=str(run.storage / "sub" / "..")))
    controller(ctl_ns, None, "--allowed-storage", str(run.storage))

    refused = wait_phase(restores, kube, ctl_ns, "r-theirs", "Failed")
    assert "is not one the controller may use (--allowed-storage" in refused["message"]
    ours = wait_for(restores, kube, ctl_ns, "r-ours")["status"]
    assert ours["phase"] == "Complete", ours


def tenant_account(kube, ctl_ns: str, own: str, cleanup) -> None:
    """ServiceAccount `tenant` in the controller's namespace, which may restore KubernetesClusters (and their
    status) into namespace `own` only, and read what a restore reads cluster-wide (namespaces, CRDs)."""
    d = discover(kube)
    rbac = "rbac.authorization.k8s.io/v1"
    sa = f"system:serviceaccount:{ctl_ns}:tenant"
    kube.create(d.resolve("serviceaccounts"), ctl_ns, {"apiVersion": "v1", "kind": "ServiceAccount",
                                                       "metadata": {"name": "tenant"}})  # fmt: skip
    write = {"apiGroups": ["xyz.example.com"], "resources": ["kubernetesclusters", "kubernetesclusters/status"],
             "verbs": ["get", "list", "create", "update", "patch"]}  # fmt: skip
    read = [{"apiGroups": [""], "resources": ["namespaces"], "verbs": ["get", "list"]},
            {"apiGroups": ["apiextensions.k8s.io"], "resources": ["customresourcedefinitions"],
             "verbs": ["get", "list"]}]  # fmt: skip
    subject = [{"kind": "User", "apiGroup": "rbac.authorization.k8s.io", "name": sa}]
    role_ref = {"apiGroup": "rbac.authorization.k8s.io"}
    kube.create(d.resolve("roles.rbac.authorization.k8s.io"), own,
                {"apiVersion": rbac, "kind": "Role", "metadata": {"name": "tenant"}, "rules": [write]})  # fmt: skip
    kube.create(d.resolve("rolebindings.rbac.authorization.k8s.io"), own,
                {"apiVersion": rbac, "kind": "RoleBinding", "metadata": {"name": "tenant"}, "subjects": subject,
                 "roleRef": {**role_ref, "kind": "Role", "name": "tenant"}})  # fmt: skip
    name = f"tenant-{ctl_ns}"
    clusterroles = d.resolve("clusterroles.rbac.authorization.k8s.io")
    kube.create(clusterroles, None, {"apiVersion": rbac, "kind": "ClusterRole", "metadata": {"name": name},
                                     "rules": read})  # fmt: skip
    bindings = d.resolve("clusterrolebindings.rbac.authorization.k8s.io")
    binding = {"apiVersion": rbac, "kind": "ClusterRoleBinding", "metadata": {"name": name}, "subjects": subject,
               "roleRef": {**role_ref, "kind": "ClusterRole", "name": name}}  # fmt: skip
    kube.create(bindings, None, binding)
    cleanup(clusterroles, name)
    cleanup(bindings, name)


def test_a_restore_acts_as_its_service_account_and_cannot_write_where_that_account_may_not(
    run, kube, crds, make, namespace, restores, ctl_ns, controller, cleanup
):
    """The controller impersonates spec.serviceAccountName (as Flux does): a tenant's Restore into its own
    namespace completes; the same Restore mapped into another team's namespace, or scaling another team's operator
    down, is refused by the API server, as the tenant would be, and changes nothing there, though the controller
    itself could."""
    kc = crds.resolve("kc")
    own, other = unique("tenant"), unique("other")
    for ns in (own, other):
        ensure_namespace(kube, ns)
    tenant_account(kube, ctl_ns, own, cleanup)
    backed_up(run, kube, make, namespace, 2)
    kube.create(restores, ctl_ns, restore_body("r-own", backup="nightly", serviceAccountName="tenant",
                                               **{"namespace-mapping": [f"{namespace}:{own}"]}))  # fmt: skip
    kube.create(restores, ctl_ns, restore_body("r-other", backup="nightly", serviceAccountName="tenant",
                                               **{"namespace-mapping": [f"{namespace}:{other}"]}))  # fmt: skip
    deployments = discover(kube).resolve("deployments.apps")
    labels = {"app": "op"}
    kube.create(deployments, other, {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "op"},
                                     "spec": {"replicas": 1, "selector": {"matchLabels": labels}, "template": {
                                         "metadata": {"labels": labels},
                                         "spec": {"containers": [{"name": "c", "image": "op:1"}]}}}})  # fmt: skip
    kube.create(restores, ctl_ns, restore_body("r-fence", backup="nightly", serviceAccountName="tenant",
                                               **{"namespace-mapping": [f"{namespace}:{own}"],
                                                  "scale-down": [f"{other}/deployment/op"]}))  # fmt: skip
    controller(ctl_ns)

    done = wait_for(restores, kube, ctl_ns, "r-own")["status"]
    assert done["phase"] == "Complete", done
    assert [kube.get(kc, own, f"k-{i}")["status"] for i in range(2)] == [kc_status(0), kc_status(1)]
    refused = wait_phase(restores, kube, ctl_ns, "r-other", "Failed")
    assert "forbidden" in refused["message"].lower(), refused
    assert [o for page in kube.list_pages(kc, other) for o in page] == [], "nothing written in the other namespace"
    fenced = wait_phase(restores, kube, ctl_ns, "r-fence", "Failed")
    assert "forbidden" in fenced["message"].lower(), fenced
    op = kube.get(deployments, other, "op")
    assert (op["spec"]["replicas"], op["metadata"]["generation"]) == (1, 1), "the other team's operator never scaled"
    for ns in (own, other):
        delete_namespace(kube, ns)


def test_a_locked_down_controller_refuses_a_restore_that_names_no_service_account(
    run, kube, crds, make, namespace, restores, ctl_ns, controller
):
    backed_up(run, kube, make, namespace, 1)
    kube.create(restores, ctl_ns, restore_body("r-none", backup="nightly"))
    kube.create(restores, ctl_ns, restore_body("r-own-sa", backup="nightly", serviceAccountName="statusvault-backup"))
    controller(ctl_ns, None, "--require-service-account")

    for name, says in (("r-none", "names no spec.serviceAccountName"), ("r-own-sa", "is the controller's own")):
        refused = wait_phase(restores, kube, ctl_ns, name, "Failed")  # Ready is False while it starts, too
        assert says in refused["message"], refused
    assert kube.get(NAMESPACES, None, namespace) is None, "nothing restored"


def test_a_restore_reads_a_velero_backup_of_a_storage_location(run, kube, crds, make, namespace, restores, ctl_ns,
                                                                controller, tmp_path):  # fmt: skip
    """spec.from-velero: the backup is a Velero backup of the storage the Restore names (its Velero layout); every
    status comes back, as from a native backup."""
    from tests.velerotar import tarball

    kc = crds.resolve("kc")
    for i in range(2):
        make(cr(KC, "KubernetesCluster", f"k-{i}", status=kc_status(i)), namespace)
    objects = [("kubernetesclusters.xyz.example.com", kube.get(kc, namespace, f"k-{i}")) for i in range(2)]
    objects.append(("namespaces", kube.get(NAMESPACES, None, namespace)))
    delete_namespace(kube, namespace)
    bsl = tmp_path / "velero-bucket"
    (bsl / "backups" / "daily-1").mkdir(parents=True)
    tarball(bsl / "backups" / "daily-1" / "daily-1.tar.gz", objects)
    kube.create(restores, ctl_ns, restore_body("r-velero", backup="daily-1", storage=str(bsl),
                                               **{"from-velero": True}))  # fmt: skip
    controller(ctl_ns)

    done = wait_for(restores, kube, ctl_ns, "r-velero")["status"]
    assert done["phase"] == "Complete", done
    assert [kube.get(kc, namespace, f"k-{i}")["status"] for i in range(2)] == [kc_status(0), kc_status(1)]


def test_a_restore_naming_a_verification_key_never_restores_a_backup_it_did_not_sign(
    run, kube, crds, make, namespace, restores, ctl_ns, controller, tmp_path
):
    """spec.verify-key-file narrows the controller's verification keys: an unsigned backup is refused before
    anything is written; a key file the controller was not given is refused (a Restore makes it read no other file);
    the backup signed by the key named is restored."""
    from statusvault.archive import signing

    pub, _ = signing.generate(tmp_path / "signing.pem")
    make(cr(KC, "KubernetesCluster", "k-0", status=kc_status(0)), namespace)
    assert run("backup", "nightly", "-n", namespace).code == 0
    assert run("backup", "signed", "-n", namespace, "--signing-key-file", str(tmp_path / "signing.pem")).code == 0
    delete_namespace(kube, namespace)
    stranger = tmp_path / "stranger.pub"
    stranger.write_bytes(pub.read_bytes())
    kube.create(restores, ctl_ns, restore_body("r-unsigned", backup="nightly", namespace=[namespace],
                                               **{"verify-key-file": [str(pub)]}))  # fmt: skip
    kube.create(restores, ctl_ns, restore_body("r-stranger", backup="signed", namespace=[namespace],
                                               **{"verify-key-file": [str(stranger)]}))  # fmt: skip
    controller(ctl_ns, None, "--verify-key-file", str(pub))

    unsigned = wait_phase(restores, kube, ctl_ns, "r-unsigned", "Failed")
    assert "sign" in unsigned["message"], unsigned
    stranger_refused = wait_phase(restores, kube, ctl_ns, "r-stranger", "Failed")
    assert "is not one of the controller's verification keys" in stranger_refused["message"]
    assert kube.list_names(crds.resolve("kc"), namespace) == set(), "nothing written by either"
    kube.create(restores, ctl_ns, restore_body("r-signed", backup="signed", namespace=[namespace],
                                               **{"verify-key-file": [str(pub)]}))  # fmt: skip
    assert wait_for(restores, kube, ctl_ns, "r-signed")["status"]["phase"] == "Complete"
    assert kube.get(crds.resolve("kc"), namespace, "k-0")["status"] == kc_status(0)


def refused_as_a_file(run, kube, crds, make, namespace, restores, ctl_ns, controller, tmp_path, field: str) -> str:
    """A tenant's Restore naming a secret file on the controller's disk as `field`: Invalid, nothing restored, the
    file's content in no status and no Event. Returns the refusal's message."""
    secret = tmp_path / "db-password.yaml"
    secret.write_text("db-password=hunter2-very-secret\n")
    backed_up(run, kube, make, namespace, 1)
    kube.create(restores, ctl_ns, restore_body("r-peek", backup="nightly", **{field: str(secret)}))
    controller(ctl_ns)

    refused = wait_phase(restores, kube, ctl_ns, "r-peek", "Invalid")
    seen = json.dumps(kube.get(restores, ctl_ns, "r-peek")) + json.dumps(events_on(kube, ctl_ns, "r-peek"))
    assert "hunter2" not in seen and "hunter2" not in refused["message"]
    assert kube.list_names(crds.resolve("kc"), namespace) == set(), "nothing restored"
    return str(refused["message"])


def test_a_restore_cannot_make_the_controller_read_a_file_by_naming_it_as_its_order(
    run, kube, crds, make, namespace, restores, ctl_ns, controller, tmp_path
):
    """spec.order is a profile's name, never a file: refused as an unknown profile, the file never read."""
    message = refused_as_a_file(run, kube, crds, make, namespace, restores, ctl_ns, controller, tmp_path, "order")
    assert "names a profile, never a file" in message


def test_a_restore_cannot_make_the_controller_read_a_file_by_naming_it_as_its_moment(
    run, kube, crds, make, namespace, restores, ctl_ns, controller, tmp_path
):
    """spec.at is a moment (RFC 3339 or latest) of a watch in an allowed store, never a path: refused before
    anything is read or written."""
    message = refused_as_a_file(run, kube, crds, make, namespace, restores, ctl_ns, controller, tmp_path, "at")
    assert "invalid --at" in message and "RFC 3339" in message, message
