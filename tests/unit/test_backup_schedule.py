"""A BackupSchedule's CronJob: what the controller renders, when it rewrites it, and the status it records."""

from __future__ import annotations

import itertools
from typing import Any

import pytest

from statusvault.controller.backups import LOCK_MODES, LockLimits
from statusvault.controller.schedules import (
    DIGEST,
    SCHEDULES,
    JobSettings,
    desired,
    ensure_cronjob,
    parse_schedule,
    reconcile_schedule,
)
from statusvault.controller.schedules import schedule_status as status_of
from statusvault.errors import ConfigError
from statusvault.kube.discovery import Discovery
from statusvault.model import ResourceType
from statusvault.vocabulary.kinds import EVENTS
from tests.fake.server import FakeKube

CRONJOBS = ResourceType("batch", "v1", "cronjobs", "CronJob", namespaced=True, has_status=True)
JOB = JobSettings(storage="s3://b/p", image="img:1", credentials_secret="s3")
DEFAULT_LOCKS = LockLimits()


def events(kube: FakeKube) -> list[dict[str, Any]]:
    return list(itertools.chain.from_iterable(kube.list_pages(EVENTS, "sv")))


def schedule(uid: str = "u1", **spec: Any) -> dict[str, Any]:
    spec = {"schedule": "0 2 * * *", **spec}
    return {"metadata": {"name": "nightly", "namespace": "sv", "uid": uid, "generation": 1}, "spec": spec}


def rendered(obj: dict[str, Any], locks: LockLimits = DEFAULT_LOCKS) -> dict[str, Any]:
    return desired(obj, parse_schedule(obj, "sv", JOB, "batch/v1", locks), [])


def shell(job: dict[str, Any]) -> str:
    return str(job["spec"]["jobTemplate"]["spec"]["template"]["spec"]["containers"][0]["command"][2])


def test_the_cronjob_is_owned_suspended_as_asked_and_tuned_in_its_backup_step():
    job = rendered(schedule(**{"keep-last": 2, "page-size": 50, "suspend": True}))
    assert job["metadata"]["ownerReferences"] == [
        {
            "apiVersion": "statusvault.dev/v1alpha1",
            "kind": "BackupSchedule",
            "name": "nightly",
            "uid": "u1",
            "controller": True,
        }
    ]
    assert job["spec"]["suspend"] is True and job["metadata"]["namespace"] == "sv"
    backup, prune = shell(job).split(" && ")
    assert backup.endswith("--include-crds --page-size 50") and "--page-size" not in prune
    assert prune.endswith("prune --schedule nightly --storage s3://b/p --keep-last 2")


@pytest.mark.parametrize(
    ("spec", "error"),
    [({"ttl": "soon"}, "soon"), ({"schedule": "0 2 * * *", "backup": "x/y"}, "x/y")],
    ids=["bad-ttl", "bad-backup-name"],
)
def test_what_the_schema_cannot_check_is_refused_by_the_controller(spec, error):
    with pytest.raises(ConfigError, match=error):
        parse_schedule(schedule(**spec), "sv", JOB, "batch/v1", DEFAULT_LOCKS)


def test_the_cronjob_is_rewritten_only_when_what_is_rendered_changes():
    kube = FakeKube()
    first = ensure_cronjob(kube, CRONJOBS, rendered(schedule()))
    again = ensure_cronjob(kube, CRONJOBS, rendered(schedule()))
    assert again["metadata"]["resourceVersion"] == first["metadata"]["resourceVersion"]
    changed = ensure_cronjob(kube, CRONJOBS, rendered(schedule(schedule="5 4 * * *")))
    assert changed["spec"]["schedule"] == "5 4 * * *"
    assert changed["metadata"]["annotations"][DIGEST] != first["metadata"]["annotations"][DIGEST]


def test_a_cronjob_another_owns_is_left_alone():
    kube = FakeKube()
    theirs = ensure_cronjob(kube, CRONJOBS, rendered(schedule(uid="other")))
    with pytest.raises(ConfigError, match="not this BackupSchedule's"):
        ensure_cronjob(kube, CRONJOBS, rendered(schedule(uid="u1", schedule="5 4 * * *")))
    assert kube.get(CRONJOBS, "sv", "statusvault-nightly") == theirs


def test_the_status_is_ready_when_scheduled_and_stalled_when_not_and_stable_between_passes():
    obj = schedule()
    job = {"metadata": {"name": "statusvault-nightly"}, "status": {"lastScheduleTime": "2026-11-25T02:00:00Z"}}
    ready = status_of(obj, job, "")
    conds = {c["type"]: (c["status"], c["reason"]) for c in ready["conditions"]}
    assert conds == {"Ready": ("True", "Scheduled"), "Reconciling": ("False", "Scheduled"),
                     "Stalled": ("False", "Scheduled")}  # fmt: skip
    assert (ready["cronJob"], ready["lastScheduleTime"], ready["observedGeneration"]) == (
        "statusvault-nightly", "2026-11-25T02:00:00Z", 1)  # fmt: skip
    assert status_of({**obj, "status": ready}, job, "") == ready, "nothing to write on the next pass"
    stalled = status_of(obj, None, "bad ttl")
    assert {c["type"]: c["status"] for c in stalled["conditions"]}["Stalled"] == "True"
    assert stalled["reason"] == "InvalidSpec" and "cronJob" not in stalled


def test_a_name_too_long_for_a_cronjob_is_shortened_uniquely_and_the_same_each_time():
    from statusvault.schedule import CRONJOB_NAME_MAX, bounded_name

    short = "statusvault-nightly"
    assert bounded_name(short, CRONJOB_NAME_MAX) == short
    long = [f"statusvault-nightly-{'x' * 50}-{i}" for i in range(2)]
    bounded = [bounded_name(n, CRONJOB_NAME_MAX) for n in long]
    assert all(len(b) == CRONJOB_NAME_MAX and b.startswith("statusvault-nightly-x") for b in bounded)
    assert len(set(bounded)) == 2 and bounded == [bounded_name(n, CRONJOB_NAME_MAX) for n in long]
    assert "--" not in bounded_name("statusvault-" + "a" * 30 + "-" + "b" * 20, CRONJOB_NAME_MAX), "one dash"


def test_a_schedules_lock_fields_lock_each_backup_its_cronjob_takes():
    asked = schedule(**{"lock-mode": "compliance", "lock-for": "30d", "legal-hold": True})
    backup = shell(rendered(asked, LockLimits(LOCK_MODES)))
    assert "backup --schedule nightly --storage s3://b/p --lock-mode compliance --lock-for 30d --legal-hold" in backup
    with pytest.raises(ConfigError, match="soon"):
        parse_schedule(
            schedule(**{"lock-mode": "governance", "lock-for": "soon"}), "sv", JOB, "batch/v1", DEFAULT_LOCKS
        )


def test_a_schedule_asking_for_a_lock_the_controller_does_not_allow_stalls_and_gets_no_cronjob():
    """The CronJob would lock every backup it takes: the administrator's limits refuse the schedule instead."""
    kube = FakeKube()
    kube.put(SCHEDULES, schedule(**{"lock-mode": "compliance", "lock-for": "1d"}))
    served = Discovery([CRONJOBS, SCHEDULES], [CRONJOBS, SCHEDULES])

    reconcile_schedule(kube, served, kube.get(SCHEDULES, "sv", "nightly"), "sv", JOB, DEFAULT_LOCKS)

    assert kube.get(CRONJOBS, "sv", "statusvault-nightly") is None
    status = kube.get(SCHEDULES, "sv", "nightly")["status"]
    assert status["reason"] == "InvalidSpec" and "cronJob" not in status
    assert status["message"] == "spec.lock-mode compliance is not allowed by this controller (allowed: governance)"
    assert [(e["type"], e["reason"], e["involvedObject"]["kind"]) for e in events(kube)] == [
        ("Warning", "InvalidSpec", "BackupSchedule")
    ]


def test_a_schedule_refused_after_its_cronjob_was_made_has_that_cronjob_suspended_until_it_is_fixed():
    """The CronJob of an earlier, allowed spec would go on locking backups as the refused spec asks: it is
    suspended (and said so), stays so pass after pass, and is rendered again once the spec is allowed."""
    kube = FakeKube()
    served = Discovery([CRONJOBS, SCHEDULES], [CRONJOBS, SCHEDULES])
    kube.put(SCHEDULES, schedule(**{"lock-mode": "compliance", "lock-for": "1d"}))
    everything = LockLimits(LOCK_MODES)
    reconcile_schedule(kube, served, kube.get(SCHEDULES, "sv", "nightly"), "sv", JOB, everything)
    assert kube.get(CRONJOBS, "sv", "statusvault-nightly")["spec"]["suspend"] is False

    versions = []
    for _ in range(2):  # the administrator allows governance only: refused, and stable from the first pass on
        reconcile_schedule(kube, served, kube.get(SCHEDULES, "sv", "nightly"), "sv", JOB, DEFAULT_LOCKS)
        versions.append(kube.get(SCHEDULES, "sv", "nightly")["metadata"]["resourceVersion"])
    assert versions[0] == versions[1], "the second pass wrote the status again"
    said = kube.get(SCHEDULES, "sv", "nightly")["status"]["message"]
    assert [e["message"] for e in events(kube)] == [said], "one Event per refusal, not one per pass"
    job = kube.get(CRONJOBS, "sv", "statusvault-nightly")
    assert job["spec"]["suspend"] is True and DIGEST not in job["metadata"]["annotations"]
    status = kube.get(SCHEDULES, "sv", "nightly")["status"]
    assert status["reason"] == "InvalidSpec" and status["cronJob"] == "statusvault-nightly"
    assert status["message"].endswith("(its CronJob statusvault-nightly is suspended until the spec is fixed)")

    fixed = kube.get(SCHEDULES, "sv", "nightly")
    fixed["spec"]["lock-mode"] = "governance"
    kube.replace(SCHEDULES, "sv", "nightly", fixed)
    reconcile_schedule(kube, served, kube.get(SCHEDULES, "sv", "nightly"), "sv", JOB, DEFAULT_LOCKS)
    job = kube.get(CRONJOBS, "sv", "statusvault-nightly")
    assert job["spec"]["suspend"] is False and "--lock-mode governance" in shell(job)
    assert kube.get(SCHEDULES, "sv", "nightly")["status"]["reason"] == "Scheduled"


def test_a_refused_schedule_leaves_a_cronjob_it_does_not_own_alone():
    kube = FakeKube()
    served = Discovery([CRONJOBS, SCHEDULES], [CRONJOBS, SCHEDULES])
    other = rendered(schedule(uid="someone-else"))
    kube.put(CRONJOBS, other)
    refused = {
        **schedule(**{"lock-mode": "compliance", "lock-for": "1d"}),
        "status": {"cronJob": "statusvault-nightly"},
    }
    kube.put(SCHEDULES, refused)
    reconcile_schedule(kube, served, kube.get(SCHEDULES, "sv", "nightly"), "sv", JOB, DEFAULT_LOCKS)
    assert kube.get(CRONJOBS, "sv", "statusvault-nightly")["spec"]["suspend"] is False
    assert kube.get(SCHEDULES, "sv", "nightly")["status"]["message"].endswith("(allowed: governance)")
