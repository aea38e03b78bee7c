"""S3 Object Lock on moto's S3 server and on versitygw, over HTTP (backups of an in-memory cluster, tests/sealed.py;
the last test goes through the CLI on the real API server): a locked backup survives `prune` and `delete`, a direct
delete of its object versions with the same credentials fails, restore and verify still read it; a legal hold is
set and released; a bucket without Object Lock and a directory are refused before anything is written."""

from __future__ import annotations

import base64
import contextlib
import datetime as dt
import json
import os
import time

import boto3
import pytest
from botocore.config import Config
from botocore.exceptions import ClientError

from statusvault.archive.envelope import FileKek, Keyring
from statusvault.errors import BackupHeldError, ConfigError, ExitStatus
from statusvault.keys import rotation as keys
from statusvault.storage.base import ObjectLock, S3Options, archive_key, manifest_key
from statusvault.storage.local import LocalStore
from statusvault.storage.s3 import S3Store
from statusvault.store import catalog
from statusvault.store.backups import BackupStore
from statusvault.store.retention import RetentionPolicy
from tests.builders import unique
from tests.sealed import KC, back_up, cluster, key_file, names_in, store_cli

pytestmark = pytest.mark.version_neutral(
    "Object Lock is the S3 server's; the one restore through the CLI is a plain one"
)

NAMES = ["kc-0", "kc-1", "kc-2"]
PREFIX = "team"
PATH_STYLE = Config(s3={"addressing_style": "path"})


@pytest.fixture
def s3(s3_server: str):
    return boto3.client("s3", endpoint_url=s3_server, region_name="us-east-1", config=PATH_STYLE)


@pytest.fixture
def locked_bucket(s3) -> str:
    name = unique("lock")
    s3.create_bucket(Bucket=name, ObjectLockEnabledForBucket=True)
    return name


def store_of(endpoint: str, bucket: str) -> S3Store:
    options = S3Options(endpoint_url=endpoint, region="us-east-1", addressing_style="path")
    return S3Store(bucket, PREFIX, options)


@pytest.fixture
def plain_bucket(s3) -> str:
    name = unique("plain")
    s3.create_bucket(Bucket=name)
    return name


@pytest.fixture
def store(s3_server: str, locked_bucket: str) -> S3Store:
    return store_of(s3_server, locked_bucket)


def lock(mode: str = "GOVERNANCE", seconds: float = 86400, legal_hold: bool = False) -> ObjectLock:
    until = (dt.datetime.now(dt.UTC) + dt.timedelta(seconds=seconds)).replace(microsecond=0)
    return ObjectLock(mode, until, legal_hold)


def versions(s3, bucket: str, key: str) -> list[str]:
    found = s3.list_object_versions(Bucket=bucket, Prefix=f"{PREFIX}/{key}").get("Versions") or []
    return [v["VersionId"] for v in found if v["Key"] == f"{PREFIX}/{key}"]


def test_a_locked_backup_survives_prune_and_a_direct_delete_and_still_restores(store, s3, tmp_path):
    kek = FileKek.from_file(key_file(tmp_path, "k"))
    kube = cluster()
    back_up(kube, store, "nightly-1", key=Keyring((kek,)), lock=lock())
    back_up(kube, store, "nightly-2", key=Keyring((kek,)))
    back_up(kube, store, "nightly-3", key=Keyring((kek,)))

    code, out, err = store_cli(store, "prune", "--keep-last", "1", "-o", "json")

    assert code == ExitStatus.SUCCESS, err
    decisions = {d["name"]: d for d in json.loads(out)["decisions"]}
    assert decisions["nightly-1"]["delete"] is False and decisions["nightly-1"]["reason"].startswith(
        "held by Object Lock: governance until "
    )
    assert decisions["nightly-1"]["heldUntil"] == store.lock_of(archive_key("nightly-1")).to_dict()["retainUntil"]
    assert decisions["nightly-2"]["delete"] is True and decisions["nightly-3"]["delete"] is False
    assert [b.name for b in catalog.list_backups(store)] == ["nightly-1", "nightly-3"]

    for key in (archive_key("nightly-1"), manifest_key("nightly-1")):
        (version,) = versions(s3, store.bucket, key)
        with pytest.raises(ClientError, match="AccessDenied"):
            s3.delete_object(Bucket=store.bucket, Key=f"{PREFIX}/{key}", VersionId=version)
    with pytest.raises(BackupHeldError, match=r"^backup 'nightly-1' is held by S3 Object Lock \(governance until"):
        BackupStore(store).delete("nightly-1")
    assert catalog.list_backups(store)[0].complete, "a refused delete leaves no delete marker behind"

    assert names_in(store, "nightly-1", Keyring((kek,))) == NAMES
    assert catalog.verify(store, "nightly-1", Keyring((kek,))).ok


def test_compliance_mode_is_not_bypassed_where_governance_is(store, s3):
    kube = cluster()
    back_up(kube, store, "gov", lock=lock("GOVERNANCE"))
    back_up(kube, store, "comp", lock=lock("COMPLIANCE"))
    for name, deleted in (("gov", True), ("comp", False)):
        (version,) = versions(s3, store.bucket, archive_key(name))
        attempt = {"Bucket": store.bucket, "Key": f"{PREFIX}/{archive_key(name)}", "VersionId": version}
        with contextlib.nullcontext() if deleted else pytest.raises(ClientError, match="AccessDenied"):
            s3.delete_object(**attempt, BypassGovernanceRetention=True)


def test_every_object_of_the_backup_is_locked_but_not_its_writer_lease(store, s3):
    big = cluster(0)
    for i in range(14):  # ~10.5 MB of incompressible status: a multipart upload, whose lock moto drops
        blob = base64.b64encode(os.urandom(750_000)).decode()
        meta = {"name": f"big-{i}", "namespace": "team-a"}
        body = {"apiVersion": "xyz.example.com/v1", "kind": KC.kind, "metadata": meta, "status": {"b": blob}}
        big.put(KC, body)
    wanted = lock("COMPLIANCE", legal_hold=True)
    back_up(big, store, "big", lock=wanted)
    assert store.lock_of(archive_key("big")).covers(wanted) and store.lock_of(manifest_key("big")).covers(wanted)
    lease = versions(s3, store.bucket, "backups/big/writer.json")
    assert lease, "the writer lease was written, then deleted (a delete marker hides its versions)"
    for version in lease:  # not locked: what a lifecycle rule for noncurrent versions removes
        s3.delete_object(Bucket=store.bucket, Key=f"{PREFIX}/backups/big/writer.json", VersionId=version)


def test_a_legal_hold_is_set_and_released_by_a_command(store):
    kube = cluster()
    for name in ("a", "b"):
        back_up(kube, store, name)

    code, out, err = store_cli(store, "hold", "set", "a")
    assert (code, err) == (0, "") and out == "Legal hold set on backup a (2 object versions)\n"
    assert catalog.prune(store, RetentionPolicy(keep_last=1), dry_run=True)[0].reason == (
        "held by Object Lock: legal hold"
    )
    assert store_cli(store, "delete", "a", "--yes")[0] == ExitStatus.ERROR

    code, out, err = store_cli(store, "hold", "release", "a")
    assert (code, out) == (0, "Legal hold released on backup a (2 object versions)\n"), err
    pruned = catalog.prune(store, RetentionPolicy(keep_last=1))
    assert [(d.name, d.delete) for d in pruned] == [("a", True), ("b", False)]


def test_a_retention_that_ended_no_longer_holds(store):
    kube = cluster()
    back_up(kube, store, "a-short", lock=lock(seconds=2))
    back_up(kube, store, "b-newer")
    assert catalog.prune(store, RetentionPolicy(keep_last=1), dry_run=True)[0].held
    time.sleep(2.5)
    assert [(d.name, d.delete) for d in catalog.prune(store, RetentionPolicy(keep_last=1))] == [
        ("a-short", True),
        ("b-newer", False),
    ]


def test_list_and_describe_show_the_lock(store):
    back_up(cluster(), store, "b", lock=lock(legal_hold=True))
    wanted = store.lock_of(archive_key("b")).to_dict()
    code, out, _ = store_cli(store, "list", "-o", "json")
    assert code == 0 and json.loads(out)[0]["lock"] == wanted and wanted["mode"] == "GOVERNANCE"
    code, out, _ = store_cli(store, "list")
    assert "governance until" in out and "legal hold" in out
    code, out, _ = store_cli(store, "describe", "b", "-o", "json")
    assert code == 0 and json.loads(out)["lock"] == wanted
    assert "Lock:       governance until " in store_cli(store, "describe", "b")[1]


def test_a_bucket_without_object_lock_and_a_directory_are_refused_before_anything_is_written(
    s3_server, plain_bucket, s3, tmp_path
):
    plain = store_of(s3_server, plain_bucket)
    with pytest.raises(ConfigError, match="the bucket does not have Object Lock enabled"):
        back_up(cluster(), plain, "b", lock=lock())
    assert s3.list_objects_v2(Bucket=plain_bucket).get("KeyCount") == 0
    with pytest.raises(ConfigError, match="cannot lock backups: Object Lock .* needs an S3 bucket"):
        back_up(cluster(), LocalStore(tmp_path / "dir"), "b", lock=lock())
    assert not (tmp_path / "dir").exists()
    code, _, err = store_cli(plain, "hold", "set", "b")
    assert code == ExitStatus.USAGE and err.count("\n") == 1 and "does not have Object Lock enabled" in err


def test_rotating_a_locked_backup_writes_a_new_manifest_version_with_the_same_lock(store, s3, tmp_path):
    old, new = (FileKek.from_file(key_file(tmp_path, n)) for n in ("old", "new"))
    wanted = lock("COMPLIANCE")
    back_up(cluster(), store, "b", key=Keyring((old,)), lock=wanted)

    rotation = keys.rotate(store, ["b"], old, new, retire=True)

    assert [r.action for r in rotation.results] == ["retired"], rotation.results
    assert store.lock_of(manifest_key("b")).covers(wanted)
    assert len(versions(s3, store.bucket, manifest_key("b"))) == 3, "added, then retired: two versions more"
    assert names_in(store, "b", Keyring((new,))) == NAMES


def test_the_cli_backs_up_under_a_lock_that_prune_keeps_and_restores_from_it(
    run, kube, crds, make, namespace, s3_server, locked_bucket, tmp_path
):
    """On the real API server: `backup --lock-mode --lock-for` (with --s3-checksum when_required, where S3 needs
    the Content-MD5 statusvault sends), then `prune` keeps the locked backup, and `restore` brings it back."""
    from tests.builders import cr, kc_status
    from tests.integration.crs.test_backup import s3_args
    from tests.integration.crs.test_restore import KC as KC_VERSION
    from tests.integration.crs.test_restore import delete_namespace

    make(cr(KC_VERSION, "KubernetesCluster", "prod", status=kc_status(4)), namespace)
    where = ["--storage", f"s3://{locked_bucket}/{PREFIX}", *s3_args(s3_server)]
    key = str(key_file(tmp_path, "k"))
    locked = run("backup", "b-1", "-n", namespace, *where, "--encryption-key-file", key,
                 "--lock-mode", "compliance", "--lock-for", "1d", "-o", "json")  # fmt: skip
    assert locked.code == 0, locked.err
    assert json.loads(locked.out)["lock"]["mode"] == "COMPLIANCE"
    assert run("backup", "b-2", "-n", namespace, *where).code == 0

    pruned = run("prune", "--keep-last", "1", *where, "-o", "json")
    assert pruned.code == 0 and [d["held"] for d in json.loads(pruned.out)["decisions"]] == [True, False]

    delete_namespace(kube, namespace)
    restored = run("restore", "b-1", *where, "--encryption-key-file", str(key_file(tmp_path, "other")),
                   "--encryption-key-file", key)  # fmt: skip
    assert restored.code == 0, restored.err
    assert kube.get(crds.resolve("kc"), namespace, "prod")["status"] == kc_status(4)


def test_a_backup_killed_before_its_manifest_was_locked_is_repaired_by_the_same_command(
    run, crds, make, namespace, s3_server, locked_bucket, s3
):
    """A store that drops lock headers on single PUTs, and a run killed between the manifest's upload and the
    PutObjectRetention after it: the manifest's current version has no lock while the archive has. The same
    command again locks it (it used to say only "already exists"); once whole, it says that again."""
    from tests.builders import cr, kc_status
    from tests.integration.crs.test_backup import s3_args
    from tests.integration.crs.test_restore import KC as KC_VERSION

    make(cr(KC_VERSION, "KubernetesCluster", "prod", status=kc_status(4)), namespace)
    where = ["--storage", f"s3://{locked_bucket}/{PREFIX}", *s3_args(s3_server)]
    command = ["backup", "b", "-n", namespace, *where, "--lock-mode", "governance", "--lock-for", "1d"]
    assert run(*command).code == 0
    manifest = f"{PREFIX}/{manifest_key('b')}"
    body = s3.get_object(Bucket=locked_bucket, Key=manifest)["Body"].read()
    s3.put_object(Bucket=locked_bucket, Key=manifest, Body=body)  # the killed run's version: no retention
    assert "ObjectLockMode" not in s3.head_object(Bucket=locked_bucket, Key=manifest)
    found = run("verify", "b", *where)
    assert found.code != 0 and "manifest.json lack(s) the Object Lock its other files hold" in found.out, found.out
    from statusvault import api

    options = S3Options(endpoint_url=s3_server, addressing_style="path", checksum="when_required")
    judged = api.verify("b", storage=f"s3://{locked_bucket}/{PREFIX}", s3=options)
    assert not judged.ok and judged.unlocked == [manifest_key("b")], "the API judges it as the command does"

    repaired = run(*command, "-o", "json")

    assert repaired.code == ExitStatus.SUCCESS, repaired.err
    assert json.loads(repaired.out)["relocked"] == [manifest_key("b")]
    assert s3.head_object(Bucket=locked_bucket, Key=manifest)["ObjectLockMode"] == "GOVERNANCE"
    again = run(*command)
    assert again.code != 0 and "already exists" in again.err
    assert run("verify", "b", *where).code == 0


def test_a_backup_resource_is_locked_as_the_cli_locks_and_refused_where_the_store_cannot_lock(
    run, kube, crds, make, namespace, s3_server, locked_bucket, store, s3
):
    """A Backup's lock-mode/lock-for/legal-hold lock its files as the CLI's flags do; on the controller's directory
    store the Backup fails before anything is read or written, naming why."""
    from statusvault.cli.specfields import crds as controller_crds
    from statusvault.testing.fixtures import ensure_namespace, install_crds
    from tests.builders import cr, kc_status
    from tests.integration.crs.test_backup import s3_args
    from tests.integration.crs.test_restore import KC as KC_VERSION

    backups = install_crds(kube, controller_crds()).by_qualified("backups.statusvault.dev")
    make(cr(KC_VERSION, "KubernetesCluster", "prod", status=kc_status(4)), namespace)
    spec = {"namespace": [namespace], "include-crds": False, "lock-mode": "governance", "lock-for": "1d",
            "legal-hold": True}  # fmt: skip
    on_s3, on_dir = unique("ctl-s3"), unique("ctl-dir")
    for ctl in (on_s3, on_dir):
        ensure_namespace(kube, ctl)
        kube.create(backups, ctl, {"apiVersion": "statusvault.dev/v1alpha1", "kind": "Backup",
                                   "metadata": {"name": "locked"}, "spec": spec})  # fmt: skip

    storage = ["--storage", f"s3://{locked_bucket}/{PREFIX}", *s3_args(s3_server)]
    assert run("controller", "run", "-n", on_s3, "--once", *storage).code == 0
    assert run("controller", "run", "-n", on_dir, "--once").code == 0

    done = kube.get(backups, on_s3, "locked")["status"]
    assert (done["phase"], done["objects"]) == ("Complete", 1), done
    held = store.lock_of(manifest_key("locked"))
    assert (held.mode, held.legal_hold) == ("GOVERNANCE", True) and held.until is not None, held
    refused = kube.get(backups, on_dir, "locked")["status"]
    assert refused["phase"] != "Complete" and "cannot lock backups" in refused["message"], refused
    assert not (run.storage / "backups" / "locked").exists(), "nothing written where it could not be locked"


def test_a_tenants_backup_asking_for_a_lock_the_controller_does_not_allow_is_refused_before_anything_is_written(
    run, kube, crds, make, namespace, s3_server, locked_bucket, store, s3
):
    """The administrator decides what a tenant may lock. With `controller run`'s defaults (governance only), a Backup
    asking for compliance, which nobody could lift before its date, is Invalid with an InvalidSpec Event and writes
    nothing, and a BackupSchedule asking for it gets no CronJob; under --max-lock-for, a governance Backup within it
    is locked as before and one beyond it refused."""
    from statusvault.cli.specfields import crds as controller_crds
    from statusvault.kube.discovery import discover
    from statusvault.testing.fixtures import ensure_namespace, install_crds
    from tests.builders import cr, kc_status
    from tests.integration.crs.test_backup import s3_args
    from tests.integration.crs.test_restore import KC as KC_VERSION
    from tests.integration.test_restore_resource import events_on

    served = install_crds(kube, controller_crds())
    backups, schedules = (served.by_qualified(f"{r}.statusvault.dev") for r in ("backups", "backupschedules"))
    make(cr(KC_VERSION, "KubernetesCluster", "prod", status=kc_status(4)), namespace)
    by_default, with_max = unique("ctl-lock"), unique("ctl-max")

    def create(rt, ctl: str, kind: str, name: str, **spec: object) -> None:
        body = {"namespace": [namespace], "include-crds": False, **spec}
        kube.create(rt, ctl, {"apiVersion": "statusvault.dev/v1alpha1", "kind": kind, "metadata": {"name": name},
                              "spec": body})  # fmt: skip

    ensure_namespace(kube, by_default)
    create(backups, by_default, "Backup", "comply", **{"lock-mode": "compliance", "lock-for": "1d"})
    create(schedules, by_default, "BackupSchedule", "nightly", schedule="0 2 * * *", **{"lock-mode": "compliance",
           "lock-for": "1d"})  # fmt: skip
    ensure_namespace(kube, with_max)
    create(backups, with_max, "Backup", "within", **{"lock-mode": "governance", "lock-for": "1d"})
    create(backups, with_max, "Backup", "beyond", **{"lock-mode": "governance", "lock-for": "30d"})

    storage = ["--storage", f"s3://{locked_bucket}/{PREFIX}", *s3_args(s3_server)]
    assert run("controller", "run", "-n", by_default, "--once", *storage).code == 0
    assert run("controller", "run", "-n", with_max, "--once", "--max-lock-for", "7d", *storage).code == 0

    refusals = {
        (by_default, "comply"): "spec.lock-mode compliance is not allowed by this controller (allowed: governance)",
        (with_max, "beyond"): "spec.lock-for 30d is longer than this controller allows (at most 7d)",
    }
    for (ctl, name), refusal in refusals.items():
        status = kube.get(backups, ctl, name)["status"]
        stalled = {c["type"]: (c["status"], c["reason"]) for c in status["conditions"]}
        assert (status["phase"], status["message"]) == ("Invalid", refusal), status
        assert stalled["Ready"] == ("False", "InvalidSpec") and stalled["Stalled"] == ("True", "InvalidSpec")
        assert events_on(kube, ctl, name, "Backup") == {"InvalidSpec": "Warning"}
    schedule = kube.get(schedules, by_default, "nightly")["status"]
    assert (schedule["reason"], schedule["message"]) == ("InvalidSpec", refusals[(by_default, "comply")]), schedule
    cronjobs = discover(kube).find("batch", "v1", "CronJob")
    assert kube.get(cronjobs, by_default, "statusvault-nightly") is None, "no CronJob to lock a backup every night"

    assert kube.get(backups, with_max, "within")["status"]["phase"] == "Complete"
    held = store.lock_of(manifest_key("within"))
    assert held.mode == "GOVERNANCE" and held.until is not None, held
    written = {v["Key"] for v in s3.list_object_versions(Bucket=locked_bucket).get("Versions") or []}
    assert written and all(k.startswith(f"{PREFIX}/backups/within/") for k in written), sorted(written)


def test_a_schedules_cronjob_made_before_the_limits_is_suspended_once_they_refuse_it(
    run, kube, crds, namespace, s3_server, locked_bucket
):
    """A BackupSchedule whose compliance CronJob a controller allowing compliance made: run with the default limits,
    the controller suspends that CronJob (it would go on locking a backup every night) and says so, pass after pass;
    allowed again, the CronJob runs again."""
    from statusvault.cli.specfields import crds as controller_crds
    from statusvault.controller.schedules import served_cronjobs
    from statusvault.kube.discovery import discover
    from statusvault.testing.fixtures import ensure_namespace, install_crds
    from tests.integration.crs.test_backup import s3_args
    from tests.integration.test_restore_resource import events_on

    schedules = install_crds(kube, controller_crds()).by_qualified("backupschedules.statusvault.dev")
    ctl = unique("ctl-was")
    ensure_namespace(kube, ctl)
    spec = {"namespace": [namespace], "schedule": "0 2 * * *", "lock-mode": "compliance", "lock-for": "1d"}
    kube.create(schedules, ctl, {"apiVersion": "statusvault.dev/v1alpha1", "kind": "BackupSchedule",
                                 "metadata": {"name": "nightly"}, "spec": spec})  # fmt: skip
    cronjobs = served_cronjobs(discover(kube))
    assert cronjobs is not None
    controller = ("controller", "run", "-n", ctl, "--once", "--storage", f"s3://{locked_bucket}/{PREFIX}",
                  *s3_args(s3_server))  # fmt: skip

    assert run(*controller, "--lock-modes", "governance,compliance").code == 0
    assert kube.get(cronjobs, ctl, "statusvault-nightly")["spec"]["suspend"] is False

    for _ in range(2):  # the administrator's default limits: refused, suspended, and the same on the next pass
        assert run(*controller).code == 0
    status = kube.get(schedules, ctl, "nightly")["status"]
    assert status["reason"] == "InvalidSpec", status
    assert status["message"] == (
        "spec.lock-mode compliance is not allowed by this controller (allowed: governance) "
        "(its CronJob statusvault-nightly is suspended until the spec is fixed)"
    )
    assert kube.get(cronjobs, ctl, "statusvault-nightly")["spec"]["suspend"] is True
    assert events_on(kube, ctl, "nightly", "BackupSchedule") == {"InvalidSpec": "Warning"}

    assert run(*controller, "--lock-modes", "governance,compliance").code == 0
    assert kube.get(cronjobs, ctl, "statusvault-nightly")["spec"]["suspend"] is False
    assert kube.get(schedules, ctl, "nightly")["status"]["reason"] == "Scheduled"
