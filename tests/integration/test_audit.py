"""The verdict reads the cluster (restore/results/audit.py): before a restore reports, every object in its scope is
read back, so the exit code, `-o json`'s verdict and an independent read of the cluster agree after a resumed run, a
re-run and a retry, not only after one clean run. On both servers: the audit reads managedFields and status
subresources, which differ by version."""

from __future__ import annotations

import json
import threading
import time

import pytest

from statusvault.errors import ExitStatus
from statusvault.kube.discovery import discover
from statusvault.testing.fixtures import create_with_status, install_crds
from tests.builders import cr, crd, kc_status, unique
from tests.integration.crs.servers import replace_schema_and_wait, wait_gone
from tests.webhook import Webhook

pytestmark = pytest.mark.version_sensitive(
    "status writes are managedFields entries of their own from 1.22; on 1.20 they join the writer's entry"
)
KC = "xyz.example.com/v1"
N = 30
OVERWRITTEN = 20  # the objects the operator writes again: k-00 .. k-19


def reasons(out: str) -> list[tuple[str, int]]:
    return [(r["reason"], r["count"]) for r in json.loads(out)["verdict"]["reasons"]]


def journals(run) -> list:
    return list((run.state / "restores").glob("*.journal.sqlite")) if (run.state / "restores").exists() else []


@pytest.fixture
def clusters(run, kube, crds, make, namespace):
    """N KubernetesClusters with their saved status, backed up, then deleted."""
    kc = crds.resolve("kc")
    for i in range(N):
        make(cr(KC, "KubernetesCluster", f"k-{i:02d}", spec={"region": "eu"}, status=kc_status(i)), namespace)
    assert run("backup", "b", "-n", namespace, "--no-include-crds").code == 0
    for i in range(N):
        kube.delete(kc, namespace, f"k-{i:02d}")
    for i in range(N):
        wait_gone(kube, kc, namespace, f"k-{i:02d}")
    return kc


class Reprovisioner:
    """An operator that writes a new endpoint into each of the first OVERWRITTEN objects' status every time it finds
    the saved one there (as one that re-provisions on seeing a restored object would)."""

    def __init__(self, kube, kc, namespace: str):
        self.kube, self.kc, self.namespace = kube, kc, namespace
        self.stop, self.writes = threading.Event(), 0
        self.thread = threading.Thread(target=self.loop, daemon=True)
        self.thread.start()

    def loop(self) -> None:
        while not self.stop.is_set():
            for page in self.kube.list_pages(self.kc, self.namespace):
                for obj in page:
                    i = int(obj["metadata"]["name"].split("-")[1])
                    if i < OVERWRITTEN and obj.get("status") == kc_status(i):
                        obj["status"] = {**obj["status"], "apiServerURL": f"https://new-{i}.example.net"}
                        try:
                            self.kube.replace(self.kc, self.namespace, obj["metadata"]["name"], obj, sub="status",
                                              manager="kc-operator")  # fmt: skip
                            self.writes += 1
                        except Exception:  # a conflict with the restore's own write: seen again next round
                            pass
            time.sleep(0.02)

    def halt(self) -> None:
        self.stop.set()
        self.thread.join()


def statuses(kube, kc, namespace: str) -> dict[str, object]:
    return {o["metadata"]["name"]: o.get("status") for page in kube.list_pages(kc, namespace) for o in page}


def test_overwritten_statuses_are_counted_by_every_run_until_a_run_writes_them_back(run, kube, clusters, namespace):
    """The first run counts what the operator wrote again and keeps its journal; the same command run again while
    the operator still acts counts them again (never 0); once the operator is stopped, the same command writes the
    saved statuses back, exits 0, and the cluster holds every saved status."""
    operator = Reprovisioner(kube, clusters, namespace)
    try:
        first = run("restore", "b", "--settle-seconds", "1", "-o", "json")
        assert first.code == ExitStatus.PARTIAL_FAILURE, first.err
        assert reasons(first.out) == [("StatusOverwritten", OVERWRITTEN)]
        assert json.loads(first.out)["audit"]["checked"] == N
        assert journals(run), "kept: the overwritten statuses are this restore's to write back"

        again = run("restore", "b", "--settle-seconds", "1", "-o", "json")
        assert again.code == ExitStatus.PARTIAL_FAILURE, again.err
        assert reasons(again.out) == [("StatusOverwritten", OVERWRITTEN)], "counted again: the operator still acts"
        assert json.loads(again.out)["resumed"] == N - OVERWRITTEN, "only the short ones were written again"
    finally:
        operator.halt()

    last = run("restore", "b", "-o", "json")

    assert last.code == ExitStatus.SUCCESS, last.out + last.err
    assert json.loads(last.out)["verdict"] == {"outcome": "done", "reasons": []}
    assert statuses(kube, clusters, namespace) == {f"k-{i:02d}": kc_status(i) for i in range(N)}
    assert not journals(run), "finished once the audit found nothing short"


def test_an_object_the_journal_has_as_done_but_the_cluster_lacks_is_counted_and_restored_again(
    run, kube, clusters, namespace
):
    """A re-run resumes the journal of a run that fell short; an object that run finished and someone deleted since
    is done for the journal, not for the cluster: the re-run's audit names it, and the run after creates it."""
    operator = Reprovisioner(kube, clusters, namespace)
    try:
        assert run("restore", "b", "--settle-seconds", "1").code == ExitStatus.PARTIAL_FAILURE
    finally:
        operator.halt()
    kube.delete(clusters, namespace, "k-25")
    wait_gone(kube, clusters, namespace, "k-25")

    again = run("restore", "b", "-o", "json")

    assert again.code == ExitStatus.PARTIAL_FAILURE, again.out + again.err
    assert reasons(again.out) == [("WithoutSavedStatus", 1)]
    names = json.loads(again.out)["verdict"]["reasons"][0]["names"]
    assert names == [f"kubernetesclusters.xyz.example.com {namespace}/k-25 (not on the cluster)"]
    assert kube.get(clusters, namespace, "k-25") is None, "an independent read agrees"

    last = run("restore", "b", "-o", "json")

    assert last.code == ExitStatus.SUCCESS, last.out + last.err
    assert statuses(kube, clusters, namespace) == {f"k-{i:02d}": kc_status(i) for i in range(N)}


@pytest.fixture
def pruning(run, kube, namespace):
    """Objects of a type without /status whose saved status travels in the create body, backed up; then the type's
    schema is changed to one that prunes status (a CRD upgraded since the backup), and the objects deleted."""
    group = f"{unique('prune')}.example.com"
    install_crds(kube, [crd(group, "Gadget", status=False)])
    d = discover(kube)
    rt = d.by_qualified(f"gadgets.{group}")
    for i in range(3):
        create_with_status(kube, d, cr(f"{group}/v1", "Gadget", f"g-{i}", spec={"n": i}, status={"id": f"x-{i}"}),
                           namespace)  # fmt: skip
    assert kube.get(rt, namespace, "g-0")["status"] == {"id": "x-0"}, "kept in the body: no /status, no schema"
    assert run("backup", "b", "-n", namespace, "--include-resources", rt.qualified, "--no-include-crds").code == 0
    for i in range(3):
        kube.delete(rt, namespace, f"g-{i}")
        wait_gone(kube, rt, namespace, f"g-{i}")
    spec_only = {
        "type": "object",
        "properties": {"spec": {"type": "object", "x-kubernetes-preserve-unknown-fields": True}},
    }
    probe = cr(f"{group}/v1", "Gadget", "probe", spec={"n": 0}, status={"id": "probe"})
    probe["metadata"]["namespace"] = "default"
    replace_schema_and_wait(kube, rt, spec_only, probe)
    return rt


def test_a_status_the_schema_prunes_is_short_in_a_server_dry_run_a_run_and_its_re_run(run, kube, pruning, namespace):
    dry = run("restore", "b", "--dry-run", "server", "-o", "json")
    assert dry.code == ExitStatus.PARTIAL_FAILURE, dry.out + dry.err
    assert ("FailedObjects", 3) in reasons(dry.out), "the dry run's answer has the status pruned, as the real one will"
    assert kube.get(pruning, namespace, "g-0") is None, "a dry run writes nothing"

    first = run("restore", "b", "-o", "json")
    assert first.code == ExitStatus.PARTIAL_FAILURE, first.err
    assert ("WithoutSavedStatus", 3) in reasons(first.out)

    again = run("restore", "b", "-o", "json")

    assert again.code == ExitStatus.PARTIAL_FAILURE, again.out + again.err
    assert ("WithoutSavedStatus", 3) in reasons(again.out), "found existing: compared, never taken as in-body"
    assert all(kube.get(pruning, namespace, f"g-{i}").get("status") is None for i in range(3)), "as the cluster says"


PAUSED = "crossplane.io/paused"  # the marker --pause auto uses for a Crossplane provider's group
REPAUSE = {"statusvault.test/repause": "yes"}


def repaused(obj: dict) -> list[dict]:
    """The webhook's patch: the pause marker back on an object that lost it (a policy engine that keeps every
    managed resource of a namespace paused)."""
    annotations = obj["metadata"].get("annotations")
    if annotations is None:
        return [{"op": "add", "path": "/metadata/annotations", "value": {PAUSED: "true"}}]
    if annotations.get(PAUSED) == "true":
        return []
    return [{"op": "add", "path": "/metadata/annotations/crossplane.io~1paused", "value": "true"}]


@pytest.fixture
def repausing(kube, namespace, cleanup, tmp_path):
    """A real mutating webhook that puts the pause marker back on every update of the namespace's instances."""
    d = discover(kube)
    ns = kube.get(d.resolve("namespaces"), None, namespace)
    ns["metadata"].setdefault("labels", {}).update(REPAUSE)
    kube.replace(d.resolve("namespaces"), None, namespace, ns)
    hook = Webhook(tmp_path, repaused)
    configs = d.resolve("mutatingwebhookconfigurations.admissionregistration.k8s.io")
    name = unique("repause")
    kube.create(configs, None, hook.configuration(name, GROUP, ["instances"], REPAUSE))
    cleanup(configs, name)
    yield lambda: kube.delete(configs, None, name)
    hook.stop()


GROUP = "rds.aws.upbound.io"


def test_an_unpause_the_server_answers_still_paused_is_counted_and_unpause_finishes_it_later(
    run, kube, namespace, repausing
):
    """The webhook answers each unpause with the marker back on: 200, but still paused. The restore says so (exit 3,
    StillPaused), keeps what `statusvault unpause` needs, which says so again while the webhook acts, and unpauses
    once it is gone."""
    install_crds(kube, [crd(GROUP, "Instance")])
    d = discover(kube)
    rt = d.by_qualified(f"instances.{GROUP}")
    for i in range(4):
        create_with_status(kube, d, cr(f"{GROUP}/v1", "Instance", f"db-{i}", spec={"forProvider": {}},
                                       status={"id": f"x-{i}"}), namespace)  # fmt: skip
    assert run("backup", "b", "-n", namespace, "--include-resources", rt.qualified).code == 0
    for i in range(4):
        kube.delete(rt, namespace, f"db-{i}")
        wait_gone(kube, rt, namespace, f"db-{i}")

    first = run("restore", "b", "--pause", "auto", "-o", "json")

    assert first.code == ExitStatus.PARTIAL_FAILURE, first.out + first.err
    report = json.loads(first.out)
    assert ("StillPaused", 4) in reasons(first.out) and report["unpaused"] == 0
    assert all(kube.get(rt, namespace, f"db-{i}")["metadata"]["annotations"].get(PAUSED) == "true" for i in range(4))
    assert all(kube.get(rt, namespace, f"db-{i}")["status"] == {"id": f"x-{i}"} for i in range(4))

    still = run("unpause", "b", "--pause", "auto", "-o", "json")
    assert still.code == ExitStatus.PARTIAL_FAILURE, still.out + still.err
    assert ("StillPaused", 4) in reasons(still.out), "the record kept: unpause knows what is left, and says so"

    repausing()  # the webhook goes
    done = run("unpause", "b", "--pause", "auto", "-o", "json")

    assert done.code == ExitStatus.SUCCESS, done.out + done.err
    for i in range(4):
        assert PAUSED not in (kube.get(rt, namespace, f"db-{i}")["metadata"].get("annotations") or {})
