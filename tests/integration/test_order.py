"""--order: groups restored one after another with a readiness gate between them, against an operator that
refuses (leaves Pending for good) a child whose parent is not Ready when it first sees the child."""

from __future__ import annotations

import json
import re
import threading
import time
from pathlib import Path

import pytest

from statusvault.errors import ExitStatus, KubeApiError
from statusvault.kube.discovery import discover
from statusvault.testing.fixtures import create_with_status, install_crds
from statusvault.vocabulary.kinds import NAMESPACES
from tests.builders import cr, crd
from tests.integration.crs.servers import wait_gone
from tests.integration.test_current_kubernetes import deny_blocked

pytestmark = pytest.mark.version_neutral("readiness gates read status conditions, the same on every version")

GROUP = "order.example.com"
PARENTS, CHILDREN = f"parents.{GROUP}", f"kids.{GROUP}"
N = 4
PAUSE_KEY = "order.example.com/paused"
READY_AFTER = 1.5  # seconds the operator takes to make a new parent Ready


@pytest.fixture(scope="module")
def types(kube):
    d = install_crds(kube, [crd(GROUP, "Parent"), crd(GROUP, "Kid")])
    return d.by_qualified(PARENTS), d.by_qualified(CHILDREN)


class RefusingOperator:
    """A parent becomes Ready (phase and condition) READY_AFTER seconds after the operator first sees it; a child
    is judged once, when first seen: Ready if its parent is Ready then, else Pending for good."""

    def __init__(self, kube, types, namespace: str):
        self.kube, self.namespace = kube, namespace
        self.parents, self.children = types
        self.seen: dict[str, float] = {}
        self.stopped = threading.Event()
        self.thread = threading.Thread(target=self._loop, daemon=True)
        self.thread.start()

    def _loop(self) -> None:
        while not self.stopped.wait(0.05):
            try:
                self._parents()
                self._children()
            except KubeApiError:
                continue  # changed under us (or its namespace not there yet): look again

    def _parents(self) -> None:
        for page in self.kube.list_pages(self.parents, self.namespace):
            for obj in page:
                name = obj["metadata"]["name"]
                if (obj["metadata"].get("annotations") or {}).get(PAUSE_KEY) == "true":
                    continue  # paused: not looked at
                first = self.seen.setdefault(name, time.monotonic())
                if (obj.get("status") or {}).get("phase") != "Ready" and time.monotonic() - first >= READY_AFTER:
                    obj["status"] = {"phase": "Ready", "conditions": [{"type": "Ready", "status": "True"}]}
                    self.kube.replace(self.parents, self.namespace, name, obj, sub="status", manager="test-operator")

    def _children(self) -> None:
        for page in self.kube.list_pages(self.children, self.namespace):
            for obj in page:
                if (obj.get("status") or {}).get("phase"):
                    continue  # judged already: never again
                parent = self.kube.get(self.parents, self.namespace, obj["spec"]["parent"])
                ready = parent is not None and (parent.get("status") or {}).get("phase") == "Ready"
                obj["status"] = {"phase": "Ready" if ready else "Pending"}
                name = obj["metadata"]["name"]
                self.kube.replace(self.children, self.namespace, name, obj, sub="status", manager="test-operator")

    def stop(self) -> None:
        self.stopped.set()
        self.thread.join()


@pytest.fixture
def operator(kube, types):
    started: list[RefusingOperator] = []

    def _start(namespace: str) -> RefusingOperator:
        started.append(RefusingOperator(kube, types, namespace))
        return started[-1]

    yield _start
    for op in started:
        op.stop()


@pytest.fixture
def backed_up(run, kube, types, namespace):
    """N parents and a child of each (bound by spec.parent, not by ownerReferences), no status, backed up, lost."""
    d = discover(kube)
    for i in range(N):
        create_with_status(kube, d, cr(f"{GROUP}/v1", "Parent", f"p-{i}"), namespace)
        create_with_status(kube, d, cr(f"{GROUP}/v1", "Kid", f"c-{i}", spec={"parent": f"p-{i}"}), namespace)
    assert run("backup", "b", "-n", namespace).code == 0
    kube.delete(NAMESPACES, None, namespace)
    wait_gone(kube, NAMESPACES, None, namespace)
    return namespace


def order_file(tmp_path: Path, gate: str) -> Path:
    path = tmp_path / "order.yaml"
    path.write_text(
        f"version: v1\ngroups:\n  - name: parents\n    resources: [{PARENTS}]\n    gate: {gate}\n"
        f"  - name: children\n    resources: [{CHILDREN}]\n"
    )
    return path


def phases(kube, types, namespace: str, timeout: float = 30) -> list[str]:
    """The children's phases once the operator has judged every one."""
    deadline = time.monotonic() + timeout
    while True:
        got = [(kube.get(types[1], namespace, f"c-{i}") or {}).get("status", {}).get("phase") for i in range(N)]
        if all(got) or time.monotonic() > deadline:
            return got
        time.sleep(0.05)


def test_a_plain_restore_leaves_children_refused(run, kube, types, backed_up, operator):
    operator(backed_up)
    assert run("restore", "b").code == ExitStatus.SUCCESS
    assert phases(kube, types, backed_up) == ["Pending"] * N, "each child came before its parent was Ready"


def test_groups_and_a_gate_make_every_child_ready(run, kube, types, backed_up, operator, tmp_path):
    operator(backed_up)
    result = run("restore", "b", "--order", str(order_file(tmp_path, "{condition: Ready, timeout: 30s}")), "-o", "json")
    assert result.code == ExitStatus.SUCCESS, result.err
    assert phases(kube, types, backed_up) == ["Ready"] * N
    gates = json.loads(result.out)["gates"]
    assert [(g["group"], g["outcome"], g["objects"]) for g in gates] == [("parents", "passed", N)]
    assert gates[0]["waitedSeconds"] >= READY_AFTER * 0.9, "it waited for the operator"


def test_a_gate_does_not_pass_over_its_own_groups_failures(run, kube, types, namespace, operator, tmp_path, cleanup):
    """Two of five parents are refused by the server: the gate after their group does not pass, whatever the
    other three do, and no child is created under a parent that does not exist. (On 1.36 only: the refusal is a
    ValidatingAdmissionPolicy, which 1.20 does not serve; the gate's rule is the same on every version.)"""
    d = discover(kube)
    blocked = {1, 3}
    for i in range(5):
        labels = {"blocked": "true"} if i in blocked else None
        create_with_status(kube, d, cr(f"{GROUP}/v1", "Parent", f"p-{i}", labels=labels), namespace)
        create_with_status(kube, d, cr(f"{GROUP}/v1", "Kid", f"c-{i}", spec={"parent": f"p-{i}"}), namespace)
    assert run("backup", "b", "-n", namespace).code == 0
    kube.delete(NAMESPACES, None, namespace)
    wait_gone(kube, NAMESPACES, None, namespace)
    message, _, _ = deny_blocked(kube, types[0], cleanup)
    operator(namespace)
    path = order_file(tmp_path, "{condition: Ready, timeout: 30s}")

    stopped = run("restore", "b", "--order", str(path))

    assert stopped.code == ExitStatus.ERROR, stopped.out + stopped.err
    assert "gate after group parents (condition Ready, timeout 30s, on timeout fail): not-restored" in stopped.err
    assert f"2 did not pass: {PARENTS} {namespace}/p-1: not restored (failed)" in stopped.err
    assert [kube.get(types[1], namespace, f"c-{i}") for i in range(5)] == [None] * 5, "no child was created"

    path.write_text(path.read_text().replace("timeout: 30s}", "timeout: 30s, onTimeout: continue}"))
    onward = run("restore", "b", "--order", str(path), "-o", "json")
    assert onward.code == ExitStatus.PARTIAL_FAILURE, onward.err
    report = json.loads(onward.out)
    reasons = {r["reason"]: r["count"] for r in report["verdict"]["reasons"]}
    assert reasons["FailedObjects"] == 2 and reasons["GateNotPassed"] == 1, reasons
    assert message in json.dumps(report["items"])


def test_dry_run_prints_the_groups_their_counts_and_gates(run, backed_up, tmp_path):
    result = run("restore", "b", "--order", str(order_file(tmp_path, "{condition: Ready}")), "--dry-run", "client")
    assert result.code == ExitStatus.SUCCESS, result.err
    assert re.search(r"\n  0\. \(named by no group\): \d+ object\(s\)\n", result.out)  # the namespace, CRDs
    assert f"  1. parents: {N} object(s); then gate: condition Ready, timeout 300s, on timeout fail" in result.out
    assert f"  2. children: {N} object(s)" in result.out
    assert "gate after group parents (condition Ready, timeout 300s, on timeout fail): not-waited" in result.out


def test_a_gate_that_never_passes_stops_the_run_and_a_rerun_resumes_at_it(
    run, kube, types, backed_up, operator, tmp_path
):
    path = order_file(tmp_path, "{expression: '.status.phase == \"Ready\"', timeout: 1s}")
    result = run("restore", "b", "--order", str(path))  # no operator: the parents never become Ready
    assert result.code == ExitStatus.ERROR
    line = 'gate after group parents (JSONPath .status.phase == "Ready", timeout 1s, on timeout fail): timed-out'
    assert line in result.err and f"{N} did not pass" in result.err
    assert f'{PARENTS} {backed_up}/p-0: .status.phase == "Ready" does not hold' in result.err
    assert "run the same command again to resume" in result.err
    assert kube.get(types[1], backed_up, "c-0") is None, "the next group was not started"

    operator(backed_up)  # the fix: the operator runs
    path.write_text(path.read_text().replace("timeout: 1s", "timeout: 30s"))  # a gate's settings may change
    again = run("restore", "b", "--order", str(path), "-o", "json")
    assert again.code == ExitStatus.SUCCESS, again.err
    report = json.loads(again.out)
    assert {i["resource"] for i in report["items"]} == {CHILDREN}, "the parents (and the rest) were left alone"
    assert report["resumed"] >= N + 1
    assert [(g["group"], g["outcome"]) for g in report["gates"]] == [("parents", "passed")]
    assert phases(kube, types, backed_up) == ["Ready"] * N


@pytest.mark.version_sensitive("each of these fixes is shown on both servers")
def test_on_timeout_continue_goes_on_and_exits_partial(run, kube, types, backed_up, tmp_path):
    path = order_file(tmp_path, "{condition: Ready, timeout: 0.5s, onTimeout: continue}")
    result = run("restore", "b", "--order", str(path))
    assert result.code == ExitStatus.PARTIAL_FAILURE
    assert (
        "1 gate(s) did not pass (parents): the groups after it were restored before its group was ready "
        "(onTimeout continue)" in result.err
    )
    assert f"{N} did not pass: {PARENTS} {backed_up}/p-0: no Ready condition" in result.out
    assert kube.get(types[1], backed_up, "c-0") is not None, "the next group was restored"


@pytest.mark.version_sensitive("each of these fixes is shown on both servers")
@pytest.mark.parametrize(
    ("text", "error"),
    [
        ("version: v1\ngroups: []\n", "groups must be a non-empty list"),
        ("version: v1\ngroups:\n  - name: a\n    resources: [widgets.nowhere.io]\n", "no resource of that name"),
        (f"version: v1\ngroups:\n  - name: a\n    resources: [{PARENTS}]\n    gate: {{expression: '.a ==='}}\n",
         "JSONPath expression"),
    ],
)  # fmt: skip
def test_bad_order_files_change_nothing(run, kube, backed_up, tmp_path, text, error):
    path = tmp_path / "bad.yaml"
    path.write_text(text)
    result = run("restore", "b", "--order", str(path))
    assert result.code == ExitStatus.USAGE, result.err
    assert error in result.err and len(result.err.strip().splitlines()) == 1
    assert kube.get(NAMESPACES, None, backed_up) is None, "nothing was written"


def test_an_unknown_profile_is_refused(run, backed_up):
    result = run("restore", "b", "--order", "nosuchprofile")
    assert result.code == ExitStatus.USAGE
    assert "unknown --order profile 'nosuchprofile'" in result.err


def test_a_paused_group_is_unpaused_before_its_gate(run, kube, types, backed_up, operator, tmp_path):
    """Created paused (the operator does not look at them), a group's objects are unpaused before its gate is waited
    on: their operator makes them Ready, the gate passes, the next group follows."""
    operator(backed_up)
    pause = ["--pause-annotation", f"{PAUSE_KEY}=true", "--pause-resources", PARENTS]
    path = order_file(tmp_path, "{condition: Ready, timeout: 30s}")
    result = run("restore", "b", "--order", str(path), *pause, "-o", "json")
    assert result.code == ExitStatus.SUCCESS, result.err
    report = json.loads(result.out)
    assert (report["unpaused"], report["leftPaused"]) == (N, 0)
    assert [g["outcome"] for g in report["gates"]] == ["passed"]
    assert phases(kube, types, backed_up) == ["Ready"] * N
    for i in range(N):
        assert PAUSE_KEY not in (kube.get(types[0], backed_up, f"p-{i}")["metadata"].get("annotations") or {})
