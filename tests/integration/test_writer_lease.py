"""A backup's name after a crash and under a race, on the real API server, to a directory and to S3 (moto's
server): the same command run again after a kill -9 between archive and manifest succeeds, and of two runs of one
name at once exactly one lands while the other is refused, naming it. The processes stop themselves at a chosen
store write (tests/stopper.py)."""

from __future__ import annotations

import json
import signal
import socket
import time
from pathlib import Path

import pytest

from statusvault.errors import ExitStatus
from statusvault.vocabulary.kinds import NAMESPACES
from tests.builders import cr, kc_status, unique

pytestmark = pytest.mark.version_neutral("a backup's name is settled in the store, not on the server")

KC = "xyz.example.com/v1"
KCS = "kubernetesclusters.xyz.example.com"


@pytest.fixture(params=["dir", "s3"])
def where(request) -> list[str]:
    """Storage options: the test's directory, or a bucket of the moto server (If-None-Match over HTTP)."""
    if request.param == "dir":
        return []
    endpoint, bucket = request.getfixturevalue("s3_endpoint"), request.getfixturevalue("bucket")
    return ["--storage", f"s3://{bucket}/sv", "--s3-endpoint-url", endpoint, "--s3-addressing-style", "path"]


@pytest.fixture
def seeded(make, namespace) -> str:
    for i in range(3):
        make(cr(KC, "KubernetesCluster", f"kc-{i}", spec={"region": "eu"}, status=kc_status(i)), namespace)
    return namespace


def wait_for(mark: Path, proc) -> None:
    deadline = time.monotonic() + 60
    while not mark.exists():
        assert proc.poll() is None, proc.stderr.read().decode()
        assert time.monotonic() < deadline, "the run never reached its manifest"
        time.sleep(0.05)


def phases(run, where: list[str]) -> dict[str, tuple[str, str | None]]:
    listed = run("list", *where, "-o", "json")
    assert listed.code == 0, listed.err
    return {b["name"]: (b["phase"], b["writer"]) for b in json.loads(listed.out)}


def test_a_backup_killed_before_its_manifest_is_replaced_by_the_same_command(run, kube, crds, seeded, where, tmp_path):
    args = ("backup", "nightly", "-n", seeded, "--include-resources", KCS, "--no-include-crds", *where)
    killed = run.spawn(*args, stop=("manifest.json", "kill", tmp_path / "mark"))
    killed.wait(120)
    assert killed.returncode == -signal.SIGKILL, killed.stderr.read().decode()
    assert phases(run, where) == {"nightly": ("Incomplete", None)}, "its process has ended: not being written"
    refused = run("restore", "nightly", *where)
    assert refused.code == ExitStatus.ERROR
    assert refused.err.strip().splitlines() == [
        "error: backup 'nightly' is incomplete (no manifest): it cannot be used; a run that stopped left it "
        "(the same backup command replaces it, `delete` removes it)"
    ]

    again = run(*args)

    assert again.code == ExitStatus.SUCCESS, again.err
    assert "replacing the incomplete backup a stopped run left" in again.err
    assert "Backup nightly completed: 3 objects (3 with status)" in again.out
    assert phases(run, where) == {"nightly": ("Completed", None)}
    assert json.loads(run("describe", "nightly", *where, "-o", "json").out)["totals"]["objects"] == 3
    assert run("verify", "nightly", *where).code == 0
    target = unique("to")
    restored = run("restore", "nightly", "--namespace-mapping", f"{seeded}:{target}", *where)
    assert restored.code == ExitStatus.SUCCESS, restored.err
    assert kube.get(crds.resolve(KCS), target, "kc-2")["status"] == kc_status(2)
    kube.delete(NAMESPACES, None, target)
    exists = run(*args)
    assert exists.code == ExitStatus.ERROR and "backup 'nightly' already exists" in exists.err


def test_a_second_run_of_a_backup_being_written_is_refused_naming_the_first(run, seeded, where, tmp_path):
    args = ("backup", "nightly", "-n", seeded, "--include-resources", KCS, "--no-include-crds", *where)
    first = run.spawn(*args, stop=("manifest.json", "8", tmp_path / "mark"))  # its archive landed; it waits
    wait_for(tmp_path / "mark", first)
    (phase, writer), *_ = phases(run, where).values()
    assert phase == "Writing" and writer.startswith(f"{socket.gethostname()} (pid {first.pid}) since ")
    listed = run("list", *where).out.splitlines()
    assert listed[1].split()[:2] == ["nightly", "Writing"] and listed[-1] == f"nightly is being written by {writer}"

    second = run(*args)
    refused_delete = run("delete", "nightly", "-y", *where)
    refused_describe = run("describe", "nightly", *where)

    assert second.code == ExitStatus.ERROR
    [line] = second.err.strip().splitlines()
    assert line.startswith(f"error: backup 'nightly' is being written by another run ({writer}) in ")
    assert "wait for it to finish, or choose another name" in line
    assert refused_delete.code == ExitStatus.ERROR and "being written" in refused_delete.err
    assert refused_describe.code == ExitStatus.ERROR and "being written" in refused_describe.err
    assert first.wait(60) == 0, first.stderr.read().decode()
    assert phases(run, where) == {"nightly": ("Completed", None)}
    assert run("verify", "nightly", *where).code == 0


def test_of_two_backups_of_one_name_started_at_once_exactly_one_lands(run, seeded, where):
    args = ("backup", "twins", "-n", seeded, "--include-resources", KCS, "--no-include-crds", *where)
    procs = [run.spawn(*args) for _ in range(2)]
    results = [(p.wait(120), p.stderr.read().decode()) for p in procs]

    assert sorted(code for code, _ in results) == [0, 1], results
    [err] = [err for code, err in results if code == 1]
    [line] = [x for x in err.splitlines() if x.startswith("error:")]
    assert "backup 'twins' is being written by another run" in line or "backup 'twins' already exists" in line
    assert phases(run, where) == {"twins": ("Completed", None)}
    assert run("verify", "twins", *where).code == 0
