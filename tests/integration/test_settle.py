"""After its last write, a restore looks again (results/settle.py): a status an unfenced operator wrote again once
the restore had written it is named, with who wrote it, and makes the exit code 3; without such a writer the
restore exits 0. On both servers: the look reads managedFields, whose status entries differ by version."""

from __future__ import annotations

import json
import threading
import time

import pytest

from statusvault.errors import ExitStatus
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


def test_settle_seconds_0_does_not_look(run, kube, backed_up, namespace):
    result = run("restore", "b", "--settle-seconds", "0", "-o", "json")

    assert result.code == ExitStatus.SUCCESS, result.err
    assert json.loads(result.out)["statusesOverwritten"]["checked"] == 0


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
