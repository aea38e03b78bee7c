"""Restore intents: parsing a ConfigMap, and what a reconcile decides from the intent, its status and the time."""

from __future__ import annotations

import datetime as dt

import pytest

from statusvault.controller.intent import Phase, digest_of, next_step, parse_intent, retry_delay
from statusvault.controller.lease import held_by_other
from statusvault.controller.loop import Breaker
from statusvault.errors import ConfigError
from statusvault.rfc3339 import format_micro, format_seconds

NOW = dt.datetime(2026, 11, 22, 6, 0, tzinfo=dt.UTC)


def cm(**data):
    return {"metadata": {"name": "restore-team-a", "namespace": "statusvault", "uid": "u1"}, "data": data}


def test_an_intent_carries_the_restore_options_by_their_long_names():
    intent = parse_intent(
        cm(
            backup="nightly-1",
            storage="s3://b/p",
            namespaces="team-a, team-b",
            **{
                "status-include-resources": "kubernetesclusters.xyz.example.com",
                "namespace-mapping": "team-a:team-a-copy",
                "existing-resource-policy": "update",
                "include-cluster-resources": "false",
            },
            parallel="4",
        )
    )
    assert (intent.backup, intent.storage, intent.parallel) == ("nightly-1", "s3://b/p", 4)
    assert intent.processes == 0, "auto: the controller's CPUs, for large waves"
    assert parse_intent(cm(backup="b", processes="3")).processes == 3
    assert intent.options.selection.namespaces == ("team-a", "team-b")
    assert intent.options.status_include == ("kubernetesclusters.xyz.example.com",)
    assert intent.options.namespace_mapping == (("team-a", "team-a-copy"),)
    assert intent.options.existing_policy == "update"
    assert intent.options.selection.include_cluster_resources is False
    assert intent.options.dry_run == "none"
    assert intent.status_name == "restore-team-a-status"


@pytest.mark.parametrize(
    ("data", "message"),
    [
        ({}, "data.backup is missing"),
        ({"backup": "../etc"}, "invalid backup name"),
        ({"backup": "b", "dry-run": "client"}, "not taken by an intent: dry-run: an intent restores"),
        ({"backup": "b", "existing-resource-policy": "replace"}, "must be one of none, update"),
        ({"backup": "b", "no-status": "yes"}, "no-status must be true or false"),
        ({"backup": "b", "namespace-mapping": "a"}, "expected OLD:NEW"),
        ({"backup": "b", "parallel": "0"}, "between 1 and 128"),
        ({"backup": "b", "processes": "0"}, "processes must be auto or a number from 1 to 64"),
        ({"backup": "b", "processes": "many"}, "processes must be auto"),
        ({"backup": "b", "order": "nope"}, "unknown order profile 'nope'"),
    ],
)
def test_a_bad_intent_is_a_clear_error(data, message):
    with pytest.raises(ConfigError, match=message):
        parse_intent(cm(**data))


def test_an_intent_restores_in_the_order_it_names_as_a_restore_resource_does():
    from statusvault.controller.restores import parse_restore

    intent = parse_intent(cm(backup="b", order="crossplane"))
    restore = parse_restore({"metadata": {"name": "r"}, "spec": {"backup": "b", "order": "crossplane"}})
    assert intent.options.order is not None and intent.options.order == restore.options.order
    assert parse_intent(cm(backup="b")).options.order is None


def test_changing_request_asks_for_the_same_backup_again():
    first, again = parse_intent(cm(backup="b", request="1")), parse_intent(cm(backup="b", request="2"))
    assert first.options == again.options and first.digest != again.digest


def test_the_digest_changes_with_any_data_and_not_with_key_order():
    assert digest_of({"a": "1", "b": "2"}) == digest_of({"b": "2", "a": "1"})
    assert digest_of({"a": "1"}) != digest_of({"a": "2"})


def test_decisions():
    d = "abc"
    assert next_step(d, {}, NOW).act and next_step(d, {}, NOW).attempt == 1
    assert not next_step(d, {"appliedDigest": d, "phase": Phase.COMPLETE}, NOW).act
    newer = next_step("new", {"appliedDigest": d, "digest": d, "attempts": "3"}, NOW)
    assert newer.act and newer.attempt == 1, "a changed intent starts over"
    later = format_seconds(NOW + dt.timedelta(seconds=30))
    waiting = next_step(d, {"digest": d, "phase": Phase.FAILED, "attempts": "2", "nextAttemptAt": later}, NOW)
    assert not waiting.act and "retrying after" in waiting.reason
    due = next_step(d, {"digest": d, "phase": Phase.FAILED, "attempts": "2", "nextAttemptAt": format_seconds(NOW)}, NOW)
    assert due.act and due.attempt == 3
    crashed = next_step(d, {"digest": d, "phase": Phase.IN_PROGRESS, "attempts": "1"}, NOW)
    assert crashed.act and crashed.reason == "resuming" and crashed.attempt == 2
    assert not next_step(d, {"digest": d, "phase": Phase.INVALID}, NOW).act


def test_retries_back_off_exponentially_up_to_an_hour():
    assert [retry_delay(n) for n in (1, 2, 3, 4)] == [30, 60, 120, 240]
    assert retry_delay(20) == 3600


def test_a_lease_is_held_by_another_only_while_renewed():
    def lease(holder, renewed, duration=60):
        return {
            "spec": {"holderIdentity": holder, "renewTime": format_micro(renewed), "leaseDurationSeconds": duration}
        }

    assert held_by_other(lease("other", NOW - dt.timedelta(seconds=10)), "me", NOW)
    assert not held_by_other(lease("other", NOW - dt.timedelta(seconds=61)), "me", NOW), "expired"
    assert not held_by_other(lease("me", NOW), "me", NOW)
    assert not held_by_other(lease(None, NOW), "me", NOW), "released"
    assert not held_by_other(None, "me", NOW)


def test_the_breaker_opens_after_run_wide_failures_in_a_row_and_closes_after_cooldown():
    b = Breaker(threshold=2, cooldown=100)
    b.record(False, 0)
    b.record(True, 1)
    b.record(False, 2)
    assert b.allows(3), "successes reset the count"
    b.record(False, 3)
    assert not b.allows(50)
    assert b.allows(103)


def test_the_rendered_controller_is_least_privilege_and_non_root():
    from statusvault.controller.install import NAME, ControllerSpec, render
    from statusvault.schedule import DEFAULT_IMAGE
    from tests.builders import resource_type

    kc = resource_type("xyz.example.com", "KubernetesCluster")
    crd = {"apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition", "metadata": {"name": "x"}}
    rendered = render(ControllerSpec("sv", "s3://b/p", credentials_secret="s3"), [kc], [crd])
    assert rendered[0] is crd, "the controller's CRDs come first"
    manifests = {m["kind"]: m for m in rendered if m["metadata"]["name"] in (NAME, f"{NAME}-sv", "sv")}
    cluster_rules = {r["apiGroups"][0]: r for r in manifests["ClusterRole"]["rules"]}
    assert cluster_rules["xyz.example.com"]["resources"] == ["kubernetesclusters", "kubernetesclusters/status"]
    assert "delete" not in cluster_rules["xyz.example.com"]["verbs"], "a restore never deletes"
    assert set(cluster_rules) == {"", "apiextensions.k8s.io", "xyz.example.com", "apps", "rbac.authorization.k8s.io"}
    apps: dict[str, list[str]] = {}
    for rule in (r for r in manifests["ClusterRole"]["rules"] if r["apiGroups"] == ["apps"]):
        for verb in rule["verbs"]:
            apps[verb] = sorted({*apps.get(verb, []), *rule["resources"]})
    assert apps == {
        "get": ["deployments", "deployments/scale", "statefulsets", "statefulsets/scale"],
        "patch": ["deployments/scale", "statefulsets/scale"],  # scale down and back: never another team's spec
        "list": ["daemonsets", "deployments", "statefulsets"],  # which workloads --fence finds
    }
    rbac = cluster_rules["rbac.authorization.k8s.io"]
    assert rbac["verbs"] == ["get", "list"], "RBAC is only read (to find who may write a status)"
    assert rbac["resources"] == ["clusterrolebindings", "clusterroles", "rolebindings", "roles"]
    assert manifests["Role"]["metadata"]["namespace"] == "sv"
    own = {r: rule["verbs"] for rule in manifests["Role"]["rules"] for r in rule["resources"]}
    assert set(own) == {"restores", "restores/status", "backups", "backups/status", "backupschedules",
                        "backupschedules/status", "cronjobs", "configmaps", "leases", "events",
                        "serviceaccounts"}  # fmt: skip
    assert own["serviceaccounts"] == ["impersonate"], "it acts as a ServiceAccount of its namespace a Restore names"
    for kind in ("restores", "backups", "backupschedules"):
        assert own[kind] == ["get", "list"] and own[f"{kind}/status"] == ["get", "update"], "it never edits a spec"
    assert own["cronjobs"] == ["get", "list", "create", "update"], "owned CronJobs go with their BackupSchedule"
    pod = manifests["Deployment"]["spec"]["template"]["spec"]
    container = pod["containers"][0]
    assert container["command"][:5] == ["statusvault", "--log-format", "json", "controller", "run"]
    assert container["command"][5:] == ["--interval", "10", "--state-dir", "/var/lib/statusvault", "--storage", "s3://b/p",
                                        "--image", DEFAULT_IMAGE, "--credentials-secret", "s3"]  # fmt: skip
    assert {"name": "POD_NAME", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}} in container["env"]
    assert container["securityContext"]["readOnlyRootFilesystem"] and pod["securityContext"]["runAsNonRoot"]
    assert container["envFrom"] == [{"secretRef": {"name": "s3"}}]


def test_backup_schedules_run_as_one_read_only_account():
    from statusvault.controller.install import ControllerSpec, render
    from statusvault.controller.schedules import BACKUP_ACCOUNT
    from tests.builders import resource_type

    kc = resource_type("xyz.example.com", "KubernetesCluster")
    rendered = render(ControllerSpec("sv", "s3://b/p"), [kc], [])
    mine = {m["kind"]: m for m in rendered if m["metadata"]["name"] in (BACKUP_ACCOUNT, f"{BACKUP_ACCOUNT}-sv")}
    assert set(mine) == {"ServiceAccount", "ClusterRole", "ClusterRoleBinding"}, "no Role: it writes nothing"
    assert mine["ClusterRole"]["rules"] == [
        {"apiGroups": ["apiextensions.k8s.io"], "resources": ["customresourcedefinitions"], "verbs": ["get", "list"]},
        {"apiGroups": ["xyz.example.com"], "resources": ["kubernetesclusters"], "verbs": ["get", "list"]},
    ]
    assert mine["ClusterRoleBinding"]["subjects"] == [{"kind": "ServiceAccount", "name": BACKUP_ACCOUNT,
                                                      "namespace": "sv"}]  # fmt: skip


def test_a_locked_down_install_has_no_cluster_rights_of_its_own():
    """--require-service-account: the controller acts only as each resource's ServiceAccount, so it needs (and
    gets) no ClusterRole; its Deployment refuses resources that name none."""
    from statusvault.controller.install import NAME, ControllerSpec, render

    rendered = render(ControllerSpec("sv", "s3://b/p", require_service_account=True), [], [])
    mine = {(m["kind"], m["metadata"]["name"]) for m in rendered}
    assert ("ClusterRole", f"{NAME}-sv") not in mine and ("ClusterRoleBinding", f"{NAME}-sv") not in mine
    assert ("Role", NAME) in mine
    (deployment,) = [m for m in rendered if m["kind"] == "Deployment"]
    assert "--require-service-account" in deployment["spec"]["template"]["spec"]["containers"][0]["command"]


def test_two_installs_never_share_a_cluster_scoped_object():
    """A second install (another namespace) used to rebind the first one's ClusterRoles to its ServiceAccounts:
    the first controller lost every cluster permission, without a word."""
    from statusvault.controller.install import ControllerSpec, render

    def cluster_scoped(ns: str) -> dict[tuple[str, str], dict]:
        rendered = render(ControllerSpec(ns, "s3://b/p"), [], [])
        return {(m["kind"], m["metadata"]["name"]): m for m in rendered if "namespace" not in m["metadata"]}

    a, b = cluster_scoped("team-a"), cluster_scoped("team-b")
    assert set(a) & set(b) == set(), "no ClusterRole or ClusterRoleBinding of one install is the other's"
    for (kind, _), binding in a.items():
        if kind == "ClusterRoleBinding":
            assert {s["namespace"] for s in binding["subjects"]} == {"team-a"}
            assert (("ClusterRole", binding["roleRef"]["name"])) in a


def test_an_encryption_key_secret_is_mounted_read_only_and_passed():
    from statusvault.controller.install import ControllerSpec, render

    spec = ControllerSpec("sv", "s3://b/p", encryption_secret="backup-key")
    deploy = next(m for m in render(spec, [], []) if m["kind"] == "Deployment")
    pod = deploy["spec"]["template"]["spec"]
    assert {"name": "encryption-key", "secret": {"secretName": "backup-key", "defaultMode": 0o400}} in pod["volumes"]
    mount = next(m for m in pod["containers"][0]["volumeMounts"] if m["name"] == "encryption-key")
    assert mount["readOnly"] and pod["containers"][0]["command"][-4:] == [
        "--encryption-key-file",
        f"{mount['mountPath']}/key",
        "--encryption-key-secret",  # for the BackupSchedules' CronJobs
        "backup-key",
    ]
