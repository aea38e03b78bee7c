"""`statusvault move` between two real API servers, an operator running on each side."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from statusvault.errors import ConfigError, ExitStatus
from statusvault.kube.client import KubeClient
from statusvault.kube.discovery import discover
from statusvault.kube.transport import MERGE_PATCH, load_transport
from statusvault.model import Selection
from statusvault.move import MoveRequest, Side, run_move
from statusvault.restore.core.pausemarkers import RECORD
from statusvault.restore.options import RestoreOptions
from statusvault.storage.local import LocalStore
from statusvault.testing.cluster import ADMIN_TOKEN, kubeconfig_yaml
from statusvault.testing.fixtures import create_with_status, install_crds
from statusvault.vocabulary.kinds import NAMESPACES
from tests.builders import cr, crd, unique, unique_kind
from tests.faultproxy import FaultProxy, self_signed
from tests.integration.test_pause import GROUP, QUALIFIED, Operator, saved

pytestmark = pytest.mark.version_neutral("a move is a backup and a restore, each guarded by crs/ on every version")

N = 12
PAUSED = "crossplane.io/paused"


@pytest.fixture
def moving(run, kube, namespace, tmp_path):
    install_crds(kube, [crd(GROUP, "Instance")])
    d = discover(kube)
    for i in range(N):
        body = cr(f"{GROUP}/v1", "Instance", f"db-{i:02d}", spec={"forProvider": {"region": "eu"}}, status=saved(i))
        create_with_status(kube, d, body, namespace)
    return namespace


def test_move_pauses_the_source_restores_paused_verifies_and_unpauses_the_target(
    run, kube, cluster, target, moving, tmp_path
):
    ns = moving
    target_kube = KubeClient(load_transport(str(target.kubeconfig)))
    ops = [Operator(c, ns, tmp_path / f"ops-{i}.log") for i, c in enumerate((cluster, target))]
    try:
        args = ["move", "--from-kubeconfig", str(cluster.kubeconfig), "--to-kubeconfig", str(target.kubeconfig)]
        result = run(*args, "-n", ns, "-o", "json")
        assert result.code == ExitStatus.SUCCESS, result.out + result.err
        report = json.loads(result.out)
        assert report["sourcePaused"] == N and report["verifyProblems"] == []
        assert report["restore"]["unpaused"] == N

        moved = discover(target_kube).by_qualified(QUALIFIED)
        for i in range(N):
            obj = target_kube.get(moved, ns, f"db-{i:02d}")
            assert obj["status"] == saved(i)
            assert PAUSED not in (obj["metadata"].get("annotations") or {}), "unpaused in the target"
            source = kube.get(discover(kube).by_qualified(QUALIFIED), ns, f"db-{i:02d}")
            assert source["metadata"]["annotations"][PAUSED] == "true", "the source stays paused"
        assert [op.provisions() for op in ops] == [[], []], "no operator provisioned anything, on either side"

        again = run(*args, "-n", ns)
        assert again.code == ExitStatus.SUCCESS, "a re-run of a finished move finds it done"

        aborted = run(*args, "-n", ns, "--abort")
        assert aborted.code == ExitStatus.ERROR and "live (not paused) in the target" in aborted.err
        source = kube.get(discover(kube).by_qualified(QUALIFIED), ns, "db-03")
        assert source["metadata"]["annotations"][PAUSED] == "true", "a finished move's source stays paused"
    finally:
        for op in ops:
            op.stop()


def test_move_refuses_the_same_cluster_on_both_sides(run, cluster, moving):
    result = run("move", "--from-kubeconfig", str(cluster.kubeconfig), "--to-kubeconfig", str(cluster.kubeconfig))
    assert result.code == ExitStatus.USAGE and "are the same API server" in result.err


def by_localhost(cluster, tmp_path: Path) -> Path:
    """A kubeconfig that reaches the test cluster as localhost (its own names it 127.0.0.1)."""
    path = tmp_path / "kubeconfig-localhost"
    path.write_text(kubeconfig_yaml(cluster.server.replace("127.0.0.1", "localhost"), "admin", ADMIN_TOKEN))
    assert "127.0.0.1" in cluster.server, "two names for one server"
    return path


def versions(kube, rt, namespace: str) -> dict[str, str]:
    return {
        o["metadata"]["name"]: o["metadata"]["resourceVersion"] for page in kube.list_pages(rt, namespace) for o in page
    }


@pytest.mark.version_sensitive("the cluster's identity is read from the server on each version")
def test_move_refuses_one_cluster_reached_by_two_names_and_touches_nothing(run, kube, cluster, moving, tmp_path):
    """127.0.0.1 and localhost are one cluster: the move is refused before any write (the source not paused, not
    backed up, nothing deleted), by the CLI and by the library's run_move."""
    other = by_localhost(cluster, tmp_path)
    rt = discover(kube).by_qualified(QUALIFIED)
    before = versions(kube, rt, moving)

    result = run("move", "--from-kubeconfig", str(cluster.kubeconfig), "--to-kubeconfig", str(other), "-n", moving,
                 "--delete-source", "--yes")  # fmt: skip

    assert result.code == ExitStatus.USAGE, result.out + result.err
    assert "are the same cluster (kube-system namespace UID" in result.err
    other_kube = KubeClient(load_transport(str(other)))
    store = LocalStore(tmp_path / "api-store")
    request = MoveRequest(
        source=Side(kube, lambda refresh: discover(kube)),
        target=Side(other_kube, lambda refresh: discover(other_kube)),
        store=store, selection=Selection(namespaces=(moving,)), options=RestoreOptions(), delete_source=True,
    )  # fmt: skip
    with pytest.raises(ConfigError, match="are the same cluster"):
        run_move(request)
    assert versions(kube, rt, moving) == before, "nothing paused, nothing deleted"
    assert list(store.list("")) == [] and list(LocalStore(run.storage).list("")) == [], "nothing backed up"


def test_a_move_within_one_cluster_maps_each_namespace_and_deletes_only_the_source_objects(
    run, kube, cluster, moving, tmp_path
):
    """Within one cluster a move is one between namespaces: allowed when each is mapped to another, and then the
    target's objects are others than the source's, so --delete-source deletes the source's only."""
    other, dest = by_localhost(cluster, tmp_path), unique("moved")
    rt = discover(kube).by_qualified(QUALIFIED)
    try:
        result = run("move", "--from-kubeconfig", str(cluster.kubeconfig), "--to-kubeconfig", str(other),
                     "-n", moving, "--namespace-mapping", f"{moving}:{dest}", "--delete-source", "--yes")  # fmt: skip

        assert result.code == ExitStatus.SUCCESS, result.out + result.err
        assert versions(kube, rt, moving) == {}, "the source objects are deleted"
        moved = {o["metadata"]["name"]: o["status"] for page in kube.list_pages(rt, dest) for o in page}
        assert moved == {f"db-{i:02d}": saved(i) for i in range(N)}
    finally:
        kube.delete(NAMESPACES, None, dest)


@pytest.fixture
def target_proxy(target, tmp_path):
    """A proxy in front of the target (its `before` hook sees each request) and a kubeconfig through it."""
    proxy = FaultProxy(target.server, 0.0, certs=self_signed(tmp_path)).start()
    path = tmp_path / "kubeconfig-target-proxy"
    path.write_text(kubeconfig_yaml(proxy.url, "admin", ADMIN_TOKEN))
    yield proxy, path
    proxy.stop()


def kill_move_at_db05(run, proxy: FaultProxy, args: list[str]) -> None:
    """Run the move as a process and kill -9 it as it creates db-05 in the target (db-00.. are there, paused)."""
    victim: dict[str, subprocess.Popen[bytes]] = {}

    def kill(method: str, path: str, body: bytes | None) -> None:
        proc = victim.get("proc")
        if proc is not None and proc.poll() is None and method == "POST" and b'"name":"db-05"' in (body or b""):
            os.kill(proc.pid, signal.SIGKILL)
            proc.wait()

    proxy.before = kill
    env = {**os.environ, "STATUSVAULT_STORAGE": str(run.storage), "STATUSVAULT_STATE_DIR": str(run.state)}
    victim["proc"] = subprocess.Popen([sys.executable, "-m", "statusvault", *args], env=env, stderr=subprocess.PIPE)
    _, err = victim["proc"].communicate(timeout=180)
    assert victim["proc"].returncode == -signal.SIGKILL, f"the move was never killed: {err.decode()}"
    proxy.before = lambda method, path, body: None


def move_args(cluster, kubeconfig: Path, ns: str) -> list[str]:
    return [
        "--kubeconfig", str(cluster.kubeconfig), "move", "--from-kubeconfig", str(cluster.kubeconfig),
        "--to-kubeconfig", str(kubeconfig), "-n", ns, "--parallel", "2",
    ]  # fmt: skip


def assert_moved(kube, target_kube, ns: str, statuses: dict[str, dict]) -> None:
    """Every object in the target with its status and unpaused; the source paused by the move."""
    moved = discover(target_kube).by_qualified(QUALIFIED)
    source_type = discover(kube).by_qualified(QUALIFIED)
    for name, status in statuses.items():
        obj = target_kube.get(moved, ns, name)
        assert obj is not None and obj["status"] == status, name
        assert not ({PAUSED, RECORD} & set(obj["metadata"].get("annotations") or {})), f"{name} unpaused"
        source = kube.get(source_type, ns, name)["metadata"]["annotations"]
        assert source[PAUSED] == "true" and RECORD in source, f"{name} paused in the source by the move"


def test_a_move_killed_mid_restore_resumes_with_the_same_command(run, kube, cluster, target, moving, target_proxy):
    proxy, kubeconfig = target_proxy
    args = move_args(cluster, kubeconfig, moving)
    kill_move_at_db05(run, proxy, args)
    target_kube = KubeClient(load_transport(str(target.kubeconfig)))
    early = target_kube.get(discover(target_kube).by_qualified(QUALIFIED), moving, "db-00")
    assert early["metadata"]["annotations"][PAUSED] == "true", "what the killed run created is paused"

    again = run(*args[2:], "-o", "json")

    assert again.code == ExitStatus.SUCCESS, again.out + again.err
    report = json.loads(again.out)
    assert report["sourcePaused"] == 0, "resumed: the source was paused and backed up by the killed run"
    assert report["restore"]["resumed"] >= 1 and report["verifyProblems"] == []
    assert_moved(kube, target_kube, moving, {f"db-{i:02d}": saved(i) for i in range(N)})


def test_a_move_killed_as_its_backup_lands_runs_again_with_the_same_command(
    run, kube, cluster, target, moving, target_proxy, tmp_path
):
    """Killed after its backup's archive landed, before the manifest (the source paused, nothing restored): the
    same command replaces that backup, never mistaking it for the move's record, and moves everything."""
    _, kubeconfig = target_proxy
    args = move_args(cluster, kubeconfig, moving)
    killed = run.spawn(*args[2:], stop=("manifest.json", "kill", tmp_path / "mark"))
    _, err = killed.communicate(timeout=180)
    assert killed.returncode == -signal.SIGKILL, err.decode()

    again = run(*args[2:], "-o", "json")

    assert again.code == ExitStatus.SUCCESS, again.out + again.err
    assert "replacing the incomplete backup a stopped run left" in again.err
    report = json.loads(again.out)
    assert report["sourcePaused"] == 0, "the killed run had paused the source"
    assert report["restore"]["resumed"] == 0 and report["verifyProblems"] == []
    target_kube = KubeClient(load_transport(str(target.kubeconfig)))
    assert_moved(kube, target_kube, moving, {f"db-{i:02d}": saved(i) for i in range(N)})


def test_a_second_run_of_a_move_whose_backup_is_being_written_is_refused_and_destroys_nothing(
    run, kube, cluster, target, moving, target_proxy, tmp_path
):
    """The first run's archive has landed and it is about to write the manifest: the second run is refused,
    naming the first (it used to delete the first run's archive as a killed run's leftover)."""
    _, kubeconfig = target_proxy
    args = move_args(cluster, kubeconfig, moving)
    first = run.spawn(*args[2:], stop=("manifest.json", "8", tmp_path / "mark"))
    deadline = time.monotonic() + 120
    while not (tmp_path / "mark").exists():
        assert first.poll() is None and time.monotonic() < deadline, first.stderr.read().decode()
        time.sleep(0.05)

    second = run(*args[2:])

    assert second.code == ExitStatus.ERROR
    assert second.err.strip().splitlines()[-1].startswith("error: backup 'move-")
    assert f"is being written by another run ({socket.gethostname()} (pid {first.pid}) since" in second.err
    _, err = first.communicate(timeout=180)
    assert first.returncode == 0, err.decode()
    target_kube = KubeClient(load_transport(str(target.kubeconfig)))
    assert_moved(kube, target_kube, moving, {f"db-{i:02d}": saved(i) for i in range(N)})


def test_an_aborted_move_is_not_resumed_the_same_command_starts_a_fresh_one(
    run, kube, cluster, target, moving, target_proxy
):
    proxy, kubeconfig = target_proxy
    args = move_args(cluster, kubeconfig, moving)
    kill_move_at_db05(run, proxy, args)
    aborted = run(*args[2:], "--abort")
    assert aborted.code == ExitStatus.SUCCESS, aborted.err
    assert f"{N} object(s) unpaused in the source" in aborted.out and "dropped" in aborted.out
    target_kube = KubeClient(load_transport(str(target.kubeconfig)))
    moved = discover(target_kube).by_qualified(QUALIFIED)
    assert target_kube.get(moved, moving, "db-00") is None, "the paused copies the move left are gone"
    instances = discover(kube).by_qualified(QUALIFIED)
    live = kube.get(instances, moving, "db-03")  # the source's operator is back and changes a status
    assert not ({PAUSED, RECORD} & set(live["metadata"].get("annotations") or {}))
    kube.replace(instances, moving, "db-03", {**live, "status": {"externalID": "db-9999"}}, sub="status")

    again = run(*args[2:], "-o", "json")

    assert again.code == ExitStatus.SUCCESS, again.out + again.err
    report = json.loads(again.out)
    assert report["sourcePaused"] == N, "the source is paused again before the new backup"
    assert report["restore"]["resumed"] == 0
    statuses = {f"db-{i:02d}": saved(i) for i in range(N)} | {"db-03": {"externalID": "db-9999"}}
    assert_moved(kube, target_kube, moving, statuses)


def test_delete_source_deletes_exactly_the_objects_moved(kube, cluster, target, moving, tmp_path):
    ns = moving
    instances = discover(kube).by_qualified(QUALIFIED)

    def after_the_backup() -> None:  # while the move restores into the target, the source changes
        kube.create(instances, ns, cr(f"{GROUP}/v1", "Instance", "late", spec={"forProvider": {}}))
        kube.delete(instances, ns, "db-01")
        kube.create(instances, ns, cr(f"{GROUP}/v1", "Instance", "db-01", spec={"forProvider": {}}))

    target_kube = KubeClient(load_transport(str(target.kubeconfig)))
    hooked = []

    def target_discovery(refresh: bool):
        if not hooked:
            hooked.append(True)
            after_the_backup()
        return discover(target_kube)

    request = MoveRequest(
        source=Side(kube, lambda refresh: discover(kube)), target=Side(target_kube, target_discovery),
        store=LocalStore(tmp_path / "store"), selection=Selection(namespaces=(ns,)), options=RestoreOptions(),
        state_dir=tmp_path / "state", delete_source=True,
    )  # fmt: skip
    report = run_move(request)

    assert report.succeeded and hooked
    assert report.source_deleted == N - 1
    assert report.source_kept == [f"{QUALIFIED} {ns}/db-01 (not the object moved: created again since the backup)"]
    left = {o["metadata"]["name"] for page in kube.list_pages(instances, ns) for o in page}
    assert left == {"late", "db-01"}, "what was created in the source after the backup survives"
    moved = discover(target_kube).by_qualified(QUALIFIED)
    assert target_kube.get(moved, ns, "db-01")["status"] == saved(1), "the object moved is the backed-up one"
    report.restore.report.close()


def test_delete_source_releases_what_it_paused_and_keeps_what_a_live_operator_would_clean_up(
    run, kube, cluster, target, moving
):
    """A moved object's finalizers are its operator's clean-up of what the target's copy now manages. The move
    paused the Instances' operator, so their finalizers would never run and the objects would stay terminating:
    the move deletes and releases them, as clusterctl move does. A type the move cannot pause keeps its operator
    live, and a delete would start the clean-up: such an object is left in the source and named."""
    ns = moving
    instances = discover(kube).by_qualified(QUALIFIED)
    finalizers = {"metadata": {"finalizers": ["example.com/clean-up"]}}
    for i in range(N):
        kube.patch(instances, ns, f"db-{i:02d}", finalizers, MERGE_PATCH)
    group, kind = f"{unique('fin')}.example.com", unique_kind("Widget")
    install_crds(kube, [crd(group, kind)])
    widgets = discover(kube).by_qualified(f"{kind.lower()}s.{group}")
    for name in ("held", "free"):
        kube.create(widgets, ns, cr(f"{group}/v1", kind, name, spec={"size": 1}))
    kube.patch(widgets, ns, "held", finalizers, MERGE_PATCH)

    result = run("move", "--from-kubeconfig", str(cluster.kubeconfig), "--to-kubeconfig", str(target.kubeconfig),
                 "-n", ns, "--delete-source", "--yes", "-o", "json")  # fmt: skip
    assert result.code == ExitStatus.SUCCESS, result.out + result.err
    report = json.loads(result.out)

    assert [o for page in kube.list_pages(instances, ns) for o in page] == [], "gone, not left terminating"
    left = [o["metadata"] for page in kube.list_pages(widgets, ns) for o in page]
    assert [(m["name"], m.get("deletionTimestamp")) for m in left] == [("held", None)], "never deleted"
    assert report["sourceKept"] == [
        f"{widgets.qualified} {ns}/held (not paused in the source, and its finalizers would have its live operator "
        "clean up what the target's copy now manages)"
    ]
    target_kube = KubeClient(load_transport(str(target.kubeconfig)))
    moved = discover(target_kube).by_qualified(QUALIFIED)
    assert [target_kube.get(moved, ns, f"db-{i:02d}")["status"] for i in range(N)] == [saved(i) for i in range(N)]


def test_move_with_include_resources_takes_the_crd_the_target_lacks(run, kube, cluster, target, namespace):
    """The move's backup holds the CRD; its restore brings it along with the resource named (by Kind, as any
    option takes resource names), so the target need not have it."""
    group = f"{unique('mv')}.example.com"
    kind = unique_kind("Gadget")
    install_crds(kube, [crd(group, kind)])
    d = discover(kube)
    for i in range(3):
        body = cr(f"{group}/v1", kind, f"g-{i}", spec={"size": i}, status={"id": f"g{i}"})
        create_with_status(kube, d, body, namespace)
    target_kube = KubeClient(load_transport(str(target.kubeconfig)))
    plural = f"{kind.lower()}s.{group}"
    assert discover(target_kube).by_qualified(plural) is None, "the target lacks the CRD"
    args = ["move", "--from-kubeconfig", str(cluster.kubeconfig), "--to-kubeconfig", str(target.kubeconfig)]
    marker = ["--pause-annotation", "example.com/hold=true", "--pause-resources", kind]

    result = run(*args, "-n", namespace, "--include-resources", kind, *marker, "-o", "json")

    assert result.code == ExitStatus.SUCCESS, result.out + result.err
    report = json.loads(result.out)
    assert report["sourcePaused"] == 3 and report["verifyProblems"] == []
    gadgets = discover(target_kube).by_qualified(plural)
    assert gadgets is not None
    for i in range(3):
        obj = target_kube.get(gadgets, namespace, f"g-{i}")
        assert obj["status"] == {"id": f"g{i}"}
        assert "example.com/hold" not in (obj["metadata"].get("annotations") or {}), "unpaused in the target"
        source = kube.get(d.by_qualified(plural), namespace, f"g-{i}")
        assert source["metadata"]["annotations"]["example.com/hold"] == "true", "the source stays paused"


def test_a_failed_move_says_how_to_give_the_source_back(run, kube, cluster, target, namespace):
    group = f"{unique('mv')}.example.com"
    install_crds(kube, [crd(group, "Gadget")])
    create_with_status(kube, discover(kube), cr(f"{group}/v1", "Gadget", "g", status={"id": "g"}), namespace)
    args = ["move", "--from-kubeconfig", str(cluster.kubeconfig), "--to-kubeconfig", str(target.kubeconfig)]
    marker = ["--pause-annotation", "example.com/hold=true", "--pause-resources", "gadgets.*"]
    no_crd = ["--exclude-resources", "customresourcedefinitions.apiextensions.k8s.io"]

    result = run(*args, "-n", namespace, *marker, *no_crd)

    assert result.code == ExitStatus.PARTIAL_FAILURE, result.out + result.err
    assert "its CRD does not come with this restore" in result.out
    assert "--abort to give the source back" in result.err
    assert run(*args, "-n", namespace, *marker, *no_crd, "--abort").code == ExitStatus.SUCCESS


def test_pause_resources_may_name_a_resource_the_move_leaves_out(run, kube, cluster, target, namespace):
    """As in a restore, a generic marker named for a resource the selection leaves out pauses nothing (it was
    refused: "no resource of that name among the resources moved"); a name the source does not know still fails."""
    group = f"{unique('mv')}.example.com"
    tag = unique_kind("")  # Kinds no other test's CRD has
    install_crds(kube, [crd(group, f"Moved{tag}"), crd(group, f"Left{tag}")])
    moved_type, left_type = f"moved{tag.lower()}s.{group}", f"left{tag.lower()}s.{group}"
    d = discover(kube)
    for kind in (f"Moved{tag}", f"Left{tag}"):
        create_with_status(kube, d, cr(f"{group}/v1", kind, "x", status={"id": kind}), namespace)
    args = [
        "move", "--from-kubeconfig", str(cluster.kubeconfig), "--to-kubeconfig", str(target.kubeconfig),
        "-n", namespace, "--exclude-resources", left_type, "--pause-annotation", "example.com/hold=true",
    ]  # fmt: skip

    typo = run(*args, "--pause-resources", f"{moved_type},typo.{group}")
    assert typo.code == ExitStatus.USAGE and f"--pause-resources typo.{group}: no resource of that" in typo.err
    result = run(*args, "--pause-resources", f"{moved_type},{left_type}", "-o", "json")

    assert result.code == ExitStatus.SUCCESS, result.out + result.err
    assert json.loads(result.out)["sourcePaused"] == 1
    moved = kube.get(d.by_qualified(moved_type), namespace, "x")
    assert moved["metadata"]["annotations"]["example.com/hold"] == "true", "the object moved stays paused"
    left = kube.get(d.by_qualified(left_type), namespace, "x")
    assert "annotations" not in left["metadata"], "the one left out of the move is untouched"


def test_a_move_with_name_pauses_only_the_objects_it_moves(run, kube, cluster, target, moving):
    """--name narrows what is paused in the source as it narrows the backup: the objects it leaves out stay as they
    were, live for their operator (they were paused too, and no step of the move unpauses them)."""
    args = ["move", "--from-kubeconfig", str(cluster.kubeconfig), "--to-kubeconfig", str(target.kubeconfig)]

    result = run(*args, "-n", moving, "--name", "db-0*", "-o", "json")

    assert result.code == ExitStatus.SUCCESS, result.out + result.err
    assert json.loads(result.out)["sourcePaused"] == 10
    instances = discover(kube).by_qualified(QUALIFIED)
    assert kube.get(instances, moving, "db-05")["metadata"]["annotations"][PAUSED] == "true", "moved: paused"
    for name in ("db-10", "db-11"):
        assert "annotations" not in kube.get(instances, moving, name)["metadata"], f"{name} was not moved"


def test_the_api_moves_as_the_command_does_and_refuses_what_the_command_would(kube, cluster, target, moving, tmp_path):
    """api.move reads the command's options with its declarations and runs its run: the same verdict, the same
    refusal of one cluster under two names, and a TypeError for what only a terminal has (output, yes, abort)."""
    from statusvault import api

    where = {"from_kubeconfig": str(cluster.kubeconfig), "storage": str(tmp_path / "api-store"),
             "state_dir": str(tmp_path / "api-state"), "namespace": moving}  # fmt: skip
    for refused in ("output", "yes", "abort"):
        with pytest.raises(TypeError, match=f"does not take '{refused}'"):
            api.move(to_kubeconfig=str(target.kubeconfig), **{refused: True}, **where)
    with pytest.raises(ConfigError, match="are the same cluster"):
        api.move(to_kubeconfig=str(by_localhost(cluster, tmp_path)), delete_source=True, **where)
    assert list(LocalStore(tmp_path / "api-store").list("")) == [], "refused before anything was backed up"

    report = api.move(to_kubeconfig=str(target.kubeconfig), parallel=2, **where)

    assert report.succeeded and report.verdict.outcome == "done" and report.source_paused == N, report.verdict
    target_kube = KubeClient(load_transport(str(target.kubeconfig)))
    assert_moved(kube, target_kube, moving, {f"db-{i:02d}": saved(i) for i in range(N)})
