"""The BackupSchedule resource on the real control plane: its CRD refuses a bad spec at admission, and the controller
renders it into an owned CronJob (batch/v1, or batch/v1beta1 on 1.20) that follows the spec and is garbage
collected with it."""

from __future__ import annotations

import time

import pytest

from statusvault.cli.specfields import crds as controller_crds
from statusvault.controller.schedules import BACKUP_ACCOUNT, served_cronjobs
from statusvault.errors import KubeApiError
from statusvault.kube.transport import Request
from statusvault.testing.fixtures import ensure_namespace, install_crds
from tests.builders import unique

pytestmark = pytest.mark.version_sensitive("the CronJob it renders is batch/v1beta1 on 1.20 and batch/v1 from 1.21")

TABLE = "application/json;as=Table;v=v1;g=meta.k8s.io,application/json;as=Table;v=v1beta1;g=meta.k8s.io"


@pytest.fixture(scope="module")
def schedules(kube):
    return install_crds(kube, controller_crds()).by_qualified("backupschedules.statusvault.dev")


@pytest.fixture
def ctl_ns(kube):
    ns = unique("sched")
    ensure_namespace(kube, ns)
    return ns


def schedule_body(name: str, **spec) -> dict:
    return {"apiVersion": "statusvault.dev/v1alpha1", "kind": "BackupSchedule", "metadata": {"name": name},
            "spec": spec}  # fmt: skip


def eventually(check, timeout: float = 60.0):
    """check()'s first truthy answer (the garbage collector works in the background)."""
    deadline = time.monotonic() + timeout
    while not (answer := check()):
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.2)
    return answer


@pytest.mark.parametrize(
    ("spec", "refusal"),
    [
        ({"schedule": 5}, "spec.schedule"),
        ({"include-resources": ["kc"]}, "spec.schedule"),
        ({"schedule": "0 2 * * *", "keep-last": 0}, "spec.keep-last"),
        ({"schedule": "0 2 * * *", "suspend": "yes"}, "spec.suspend"),
    ],
    ids=["cron-not-a-string", "no-cron", "out-of-range", "wrong-type"],
)
def test_a_bad_schedule_is_refused_at_admission(kube, schedules, ctl_ns, spec, refusal):
    with pytest.raises(KubeApiError) as refused:
        kube.create(schedules, ctl_ns, schedule_body("bad", **spec))
    assert refused.value.code == 422 and refusal in str(refused.value), refused.value
    assert kube.get(schedules, ctl_ns, "bad") is None


def test_a_schedule_becomes_an_owned_cronjob_that_follows_its_spec(run, kube, crds, schedules, ctl_ns, monkeypatch):
    for name in ("STATUSVAULT_S3_REGION", "AWS_REGION", "AWS_DEFAULT_REGION"):  # the session's S3 fixtures set one:
        monkeypatch.delenv(name, raising=False)  # the controller's own region would go into the command line
    kc = crds.resolve("kc").qualified
    spec = {"schedule": "0 2 * * *", "storage": "s3://bucket/nightly", "include-resources": [kc], "keep-last": 3}
    made = kube.create(schedules, ctl_ns, schedule_body("nightly", **spec))
    cronjobs = served_cronjobs(crds)
    assert cronjobs is not None

    assert run("controller", "run", "-n", ctl_ns, "--once").code == 0
    job = kube.get(cronjobs, ctl_ns, "statusvault-nightly")
    assert job is not None
    assert [(o["kind"], o["uid"]) for o in job["metadata"]["ownerReferences"]] == [
        ("BackupSchedule", made["metadata"]["uid"])
    ]
    pod = job["spec"]["jobTemplate"]["spec"]["template"]["spec"]
    assert pod["serviceAccountName"] == BACKUP_ACCOUNT
    assert pod["containers"][0]["command"][2] == (
        "statusvault --log-format json backup --schedule nightly --storage s3://bucket/nightly "
        f"--include-resources {kc} --include-crds"
        " && statusvault --log-format json prune --schedule nightly --storage s3://bucket/nightly --keep-last 3"
    )
    assert (job["spec"]["schedule"], job["spec"]["suspend"]) == ("0 2 * * *", False)
    status = kube.get(schedules, ctl_ns, "nightly")["status"]
    ready = next(c for c in status["conditions"] if c["type"] == "Ready")
    assert (ready["status"], ready["reason"], status["observedGeneration"], status["cronJob"]) == (
        "True", "Scheduled", 1, "statusvault-nightly")  # fmt: skip

    live = kube.get(schedules, ctl_ns, "nightly")
    kube.replace(schedules, ctl_ns, "nightly", {**live, "spec": {**spec, "schedule": "30 3 * * *", "suspend": True}})
    assert run("controller", "run", "-n", ctl_ns, "--once").code == 0
    job = kube.get(cronjobs, ctl_ns, "statusvault-nightly")
    assert (job["spec"]["schedule"], job["spec"]["suspend"]) == ("30 3 * * *", True)
    assert kube.get(schedules, ctl_ns, "nightly")["status"]["observedGeneration"] == 2
    table = kube.request_json(Request("GET", schedules.path(ctl_ns, "nightly"), accept=TABLE))  # kubectl get
    row = dict(zip([c["name"] for c in table["columnDefinitions"]], table["rows"][0]["cells"], strict=True))
    assert {k: row[k] for k in ("Schedule", "Suspend", "Ready")} == {"Schedule": "30 3 * * *", "Suspend": True,
                                                                     "Ready": "True"}  # fmt: skip
    assert row["Age"] and "Last Schedule" in row

    kube.delete(schedules, ctl_ns, "nightly")
    eventually(lambda: kube.get(cronjobs, ctl_ns, "statusvault-nightly") is None)


def test_a_schedule_with_a_long_name_gets_a_cronjob_the_server_takes(run, kube, crds, schedules, ctl_ns):
    """A CronJob's name is at most 52 characters (its Jobs get an 11-character suffix within 63); a BackupSchedule's
    may be 253. A long one gets a shortened, still unique CronJob name, and its backups keep the schedule's name."""
    names = [f"nightly-{'x' * 50}-{i}" for i in range(2)]  # one prefix: the names differ only past 52 characters
    for name in names:
        kube.create(schedules, ctl_ns, schedule_body(name, schedule="0 2 * * *", storage="/backups"))
    assert run("controller", "run", "-n", ctl_ns, "--once").code == 0
    cronjobs = served_cronjobs(crds)
    jobs = [kube.get(schedules, ctl_ns, name)["status"].get("cronJob", "") for name in names]
    assert all(0 < len(job) <= 52 for job in jobs) and len(set(jobs)) == 2, jobs
    for name, job in zip(names, jobs, strict=True):
        command = kube.get(cronjobs, ctl_ns, job)["spec"]["jobTemplate"]["spec"]["template"]["spec"]["containers"]
        assert f"backup --schedule {name} " in command[0]["command"][2], "its backups are named after the schedule"
        kube.delete(schedules, ctl_ns, name)


@pytest.mark.parametrize(
    ("spec", "said"),
    [({"schedule": "0 2 * * *", "ttl": "soon"}, "soon"), ({"schedule": "every night"}, "the CronJob was refused")],
    ids=["bad-ttl", "cron-the-server-refuses"],
)
def test_a_schedule_the_controller_cannot_render_is_stalled(run, kube, crds, schedules, ctl_ns, spec, said):
    """What the schema cannot check (a duration, a cron expression) is refused by the controller or by the
    CronJob's own validation: the BackupSchedule is Stalled with the reason, and no CronJob is made."""
    kube.create(schedules, ctl_ns, schedule_body("odd", storage="s3://b/p", **spec))
    assert run("controller", "run", "-n", ctl_ns, "--once").code == 0
    status = kube.get(schedules, ctl_ns, "odd")["status"]
    stalled = next(c for c in status["conditions"] if c["type"] == "Stalled")
    assert (stalled["status"], stalled["reason"]) == ("True", "InvalidSpec") and said in stalled["message"]
    assert "cronJob" not in status and kube.get(served_cronjobs(crds), ctl_ns, "statusvault-odd") is None
