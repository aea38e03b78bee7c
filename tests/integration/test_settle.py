"""After its last write, a restore looks again (restore/core/settle.py): a status an unfenced operator wrote again once
the restore had written it is named, with who wrote it, and makes the exit code 3; without such a writer the
restore exits 0. On both servers: the look reads managedFields, whose status entries differ by version."""

from __future__ import annotations

import json
import threading
import time

import pytest

from statusvault.errors import ExitStatus
from statusvault.kube.transport import MERGE_PATCH
from statusvault.restore.core import settle
from tests.builders import cr, kc_status
from tests.integration.crs.servers import wait_gone

pytestmark = pytest.mark.version_sensitive(
    "status writes are managedFields entries of their own from 1.22; on 1.20 they join the writer's entry"
)
KC = "xyz.example.com/v1"


@pytest.fixture
def backed_up(run, kube, crds, make, namespace):
    kc = crds.resolve("kc")
    for i in range(3):
        make(cr(KC, "KubernetesCluster", f"k-{i}", spec={"region": "eu"}, status=kc_status(i)), namespace)
    assert run("backup", "b", "-n", namespace, "--no-include-crds").code == 0
    for i in range(3):
        kube.delete(kc, namespace, f"k-{i}")
        wait_gone(kube, kc, namespace, f"k-{i}")
    return kc


def reprovisioning_operator(kube, kc, namespace: str, name: str, stop: threading.Event) -> threading.Thread:
    """Writes the object's status again (a new endpoint) as soon as it sees the restored one."""

    def loop() -> None:
        while not stop.is_set():
            obj = kube.get(kc, namespace, name)
            if obj is not None and obj.get("status") == kc_status(1):
                obj["status"] = {**obj["status"], "apiServerURL": "https://new.example.net"}
                kube.replace(kc, namespace, name, obj, sub="status", manager="kc-operator")
                return
            time.sleep(0.02)

    thread = threading.Thread(target=loop, daemon=True)
    thread.start()
    return thread


def test_a_status_an_operator_writes_again_after_the_restore_is_named_with_its_writer(run, kube, backed_up, namespace):
    stop = threading.Event()
    operator = reprovisioning_operator(kube, backed_up, namespace, "k-1", stop)
    try:
        result = run("restore", "b", "--settle-seconds", "2", "-o", "json")
    finally:
        stop.set()
        operator.join()

    assert result.code == ExitStatus.PARTIAL_FAILURE, result.err
    report = json.loads(result.out)
    looked = report["statusesOverwritten"]
    assert (looked["checked"], looked["count"]) == (3, 1), looked
    assert looked["objects"] == [
        f"kubernetesclusters.xyz.example.com {namespace}/k-1: status written since by kc-operator"
    ]
    assert [(r["reason"], r["count"]) for r in report["verdict"]["reasons"]] == [("StatusOverwritten", 1)]
    last = result.err.strip().splitlines()[-1]
    assert "1 restored status(es) were written again by another writer" in last and "--fence auto" in last
    assert kube.get(backed_up, namespace, "k-0")["status"] == kc_status(0)


def test_without_another_writer_the_restore_looks_and_exits_0(run, kube, backed_up, namespace):
    result = run("restore", "b", "--settle-seconds", "0.5", "-o", "json")

    assert result.code == ExitStatus.SUCCESS, result.err
    looked = json.loads(result.out)["statusesOverwritten"]
    assert (looked["checked"], looked["count"], looked["objects"]) == (3, 0, [])
    for i in range(3):
        assert kube.get(backed_up, namespace, f"k-{i}")["status"] == kc_status(i)


def test_settle_seconds_0_reads_the_cluster_back_at_once(run, kube, backed_up, namespace):
    """--settle-seconds is the wait before the restore reads back, never whether it does (restore/results/audit.py)."""
    result = run("restore", "b", "--settle-seconds", "0", "-o", "json")

    assert result.code == ExitStatus.SUCCESS, result.err
    report = json.loads(result.out)
    assert (report["statusesOverwritten"]["checked"], report["audit"]["checked"]) == (3, 3)


def test_the_text_report_says_what_it_looked_at_and_names_what_was_written_again(run, kube, backed_up, namespace):
    stop = threading.Event()
    operator = reprovisioning_operator(kube, backed_up, namespace, "k-1", stop)
    try:
        result = run("restore", "b", "--settle-seconds", "1")
    finally:
        stop.set()
        operator.join()

    assert result.code == ExitStatus.PARTIAL_FAILURE, result.err
    lines = result.out.splitlines()
    assert "looked again after the last write: 1 of 3 restored status(es) written since by another writer" in lines
    assert (
        f"WRITTEN AGAIN: kubernetesclusters.xyz.example.com {namespace}/k-1: status written since by kc-operator"
        in (lines)
    )


class Counted:
    """The client, counting the reads of whole objects the look makes itself (its metadata-only LISTs go
    through the client's own list_pages, not counted)."""

    def __init__(self, kube):
        self.kube, self.gets, self.lists = kube, 0, 0

    def get(self, *args):
        self.gets += 1
        return self.kube.get(*args)

    def list_pages(self, *args, **kwargs):
        self.lists += 1
        return self.kube.list_pages(*args, **kwargs)

    def __getattr__(self, name):
        return getattr(self.kube, name)


@pytest.mark.parametrize("one_by_one", [settle.READ_ONE_BY_ONE, 0], ids=["a-GET-each", "one-LIST"])
def test_the_look_reads_whole_only_what_changed_and_tells_a_status_write_from_a_label(
    kube, crds, make, namespace, monkeypatch, one_by_one
):
    """The look compares resourceVersions first: an untouched object is not read again, a relabelled one is read
    and found with its status as written, a status an operator wrote is named, a deleted object is said; the same
    whether the changed objects are read one by one or with one LIST."""
    kc = crds.resolve("kc")
    marks = {}
    for i in range(4):
        answer = make(cr(KC, "KubernetesCluster", f"k-{i}", spec={"region": "eu"}, status=kc_status(i)), namespace)
        marks[(kc.qualified, namespace, f"k-{i}")] = settle.write_mark(answer)
    kube.patch(kc, namespace, "k-1", {"metadata": {"labels": {"touched": "yes"}}}, MERGE_PATCH, manager="labeller")
    obj = kube.get(kc, namespace, "k-2")
    obj["status"] = {**obj["status"], "apiServerURL": "https://new.example.net"}
    kube.replace(kc, namespace, "k-2", obj, sub="status", manager="kc-operator")
    kube.delete(kc, namespace, "k-3")
    wait_gone(kube, kc, namespace, "k-3")
    monkeypatch.setattr(settle, "READ_ONE_BY_ONE", one_by_one)
    client = Counted(kube)

    out = settle.look_again(client, crds, marks, "statusvault", 0)

    assert (out.checked, out.count) == (4, 2), out
    assert out.named == [
        f"kubernetesclusters.xyz.example.com {namespace}/k-2: status written since by kc-operator",
        f"kubernetesclusters.xyz.example.com {namespace}/k-3: deleted since the restore",
    ]
    assert (client.gets, client.lists) == ((2, 0) if one_by_one else (0, 1)), "read whole: k-1 and k-2 only"
