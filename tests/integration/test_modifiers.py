"""`restore --modifiers` against the real API server: Velero-format rules rewrite spec, labels and status."""

from __future__ import annotations

import json
import textwrap

import pytest

from statusvault.errors import ExitStatus
from statusvault.kube.discovery import discover
from statusvault.testing.fixtures import create_with_status, ensure_namespace
from statusvault.vocabulary.kinds import NAMESPACES
from tests.builders import REGION_URL, cr, kc_status, region_move, unique

pytestmark = pytest.mark.version_neutral("modifiers are pure transforms of the saved objects; the writes are crs/'s")

KC = "xyz.example.com/v1"
DB = "db.example.com/v1"


def modifiers_file(tmp_path, text: str):
    path = tmp_path / "modifiers.yaml"
    path.write_text(textwrap.dedent(text))
    return str(path)


MOVE_REGION = region_move(
    more_rules="""- conditions:
    groupResource: databases.db.example.com
  patches:
  - operation: test
    path: /spec/engine
    value: postgres
  - operation: replace
    path: /spec/engine
    value: aurora-postgres
- conditions:
    groupResource: "*"
    labelSelector:
      matchExpressions:
      - {key: legacy, operator: Exists}
  mergePatches:
  - patchData: |
      {"metadata": {"labels": {"legacy": null}}}
"""
)


def test_rules_rewrite_region_storage_class_labels_and_the_status_endpoint(run, kube, crds, namespace, tmp_path):
    kc, db = crds.resolve("kc"), crds.resolve("databases.db.example.com")
    prod = cr(
        KC, "KubernetesCluster", "prod", spec={"region": "eu-west-1"}, status=kc_status(1), labels={"legacy": "1"}
    )
    create_with_status(kube, crds, prod, namespace)
    create_with_status(
        kube, crds, cr(KC, "KubernetesCluster", "us", spec={"region": "us-east-1"}, status=kc_status(2)), namespace
    )
    create_with_status(
        kube,
        crds,
        cr(DB, "Database", "orders", spec={"engine": "postgres"}, status={"externalID": "o"}),
        namespace,
    )
    create_with_status(
        kube, crds, cr(DB, "Database", "fast", spec={"engine": "mysql"}, status={"externalID": "f"}), namespace
    )
    assert run("backup", "b", "-n", namespace).code == 0
    target = unique("dst")

    result = run(
        "restore", "b", "--namespace-mapping", f"{namespace}:{target}",
        "--modifiers", modifiers_file(tmp_path, MOVE_REGION), "-o", "json",
    )  # fmt: skip

    assert result.code == ExitStatus.SUCCESS, result.err
    moved = kube.get(kc, target, "prod")
    assert moved["spec"] == {"region": "eu-central-1"}
    assert moved["status"] == {**kc_status(1), "apiServerURL": REGION_URL}
    assert "legacy" not in (moved["metadata"].get("labels") or {})
    assert kube.get(kc, target, "us")["spec"] == {"region": "us-east-1"}, "its condition did not match"
    assert kube.get(kc, target, "us")["status"] == kc_status(2)
    assert kube.get(db, target, "orders")["spec"]["engine"] == "aurora-postgres"
    assert kube.get(db, target, "fast")["spec"]["engine"] == "mysql", "its test op failed: rule skipped"
    report = json.loads(result.out)
    assert report["summary"]["modifiers"] == {"modified": 2, "skipped": 1}
    by_name = {i["name"]: i for i in report["items"]}
    assert by_name["prod"]["modifiers"] == {"applied": [1, 3], "skippedByTest": []}
    assert by_name["fast"]["modifiers"] == {"applied": [], "skippedByTest": [2]}
    kube.delete(NAMESPACES, None, target)


def test_velero_documented_example_on_persistent_volume_claims(run, kube, namespace, tmp_path):
    """The example from Velero's resource-modifier docs, unchanged but for the namespace names."""
    pvcs = discover(kube).resolve("persistentvolumeclaims")
    spec = {
        "accessModes": ["ReadWriteOnce"],
        "resources": {"requests": {"storage": "1Gi"}},
        "storageClassName": "standard",
    }
    for name in ("mysql-0", "web-0"):
        body = {"apiVersion": "v1", "kind": "PersistentVolumeClaim", "metadata": {"name": name}, "spec": spec}
        body["metadata"]["labels"] = {"foo": "bar", "test": "yes"}
        kube.create(pvcs, namespace, body)
    assert run("backup", "b", "-n", namespace, "--include-resources", "persistentvolumeclaims").code == 0
    target = unique("foo")
    velero = f"""
    version: v1
    resourceModifierRules:
    - conditions:
         groupResource: persistentvolumeclaims
         resourceNameRegex: "^mysql.*$"
         namespaces:
         - bar
         - {namespace}
         labelSelector:
            matchLabels:
               foo: bar
      patches:
      - operation: replace
        path: "/spec/storageClassName"
        value: "premium"
      - operation: remove
        path: "/metadata/labels/test"
    """
    mapping = f"{namespace}:{target}"
    result = run(
        "restore", "b", "--include-resources", "persistentvolumeclaims",  # a built-in type: named
        "--namespace-mapping", mapping, "--modifiers", modifiers_file(tmp_path, velero),
    )  # fmt: skip
    assert result.code == ExitStatus.SUCCESS, result.err
    mysql, web = kube.get(pvcs, target, "mysql-0"), kube.get(pvcs, target, "web-0")
    assert (mysql["spec"]["storageClassName"], mysql["metadata"]["labels"]) == ("premium", {"foo": "bar"})
    assert (web["spec"]["storageClassName"], web["metadata"]["labels"]) == ("standard", {"foo": "bar", "test": "yes"})
    kube.delete(NAMESPACES, None, target)


def test_a_patch_that_cannot_apply_fails_that_object_only(run, kube, crds, namespace, tmp_path):
    for name in ("a", "b"):
        create_with_status(
            kube, crds, cr(KC, "KubernetesCluster", name, spec={"region": name}, status=kc_status(1)), namespace
        )
    assert run("backup", "b", "-n", namespace).code == 0
    target = unique("dst")
    broken = """
    version: v1
    resourceModifierRules:
    - conditions: {groupResource: kubernetesclusters.xyz.example.com, names: [a]}
      patches: [{operation: replace, path: /spec/zone, value: z1}]
    """
    result = run(
        "restore", "b", "--namespace-mapping", f"{namespace}:{target}", "--modifiers", modifiers_file(tmp_path, broken)
    )
    assert result.code == ExitStatus.PARTIAL_FAILURE
    assert (
        "FAILED: kubernetesclusters.xyz.example.com" in result.out and "modifier rule 1 cannot be applied" in result.out
    )
    assert kube.get(crds.resolve("kc"), target, "a") is None
    assert kube.get(crds.resolve("kc"), target, "b")["status"] == kc_status(1)
    kube.delete(NAMESPACES, None, target)


def test_a_bad_file_exits_2_naming_the_rule_and_writes_nothing(run, kube, crds, namespace, tmp_path):
    create_with_status(kube, crds, cr(KC, "KubernetesCluster", "a", status=kc_status(1)), namespace)
    assert run("backup", "b", "-n", namespace).code == 0
    target = unique("dst")
    bad = """
    version: v1
    resourceModifierRules:
    - conditions: {groupResource: "*"}
      patches: [{operation: remove, path: /metadata/labels/x}]
    - conditions: {groupResource: "*", resourceNameRegex: "(unclosed"}
      patches: [{operation: remove, path: /metadata/labels/x}]
    """
    result = run(
        "restore", "b", "--namespace-mapping", f"{namespace}:{target}", "--modifiers", modifiers_file(tmp_path, bad)
    )
    assert result.code == ExitStatus.USAGE
    assert (
        result.err.startswith("error: ")
        and "rule 2 (resourceModifierRules[1]).conditions.resourceNameRegex" in result.err
    )
    assert len(result.err.strip().splitlines()) == 1
    missing = run("restore", "b", "--modifiers", str(tmp_path / "nope.yaml"))
    assert missing.code == ExitStatus.USAGE and "cannot read modifiers file" in missing.err
    assert kube.get(NAMESPACES, None, target) is None


def test_a_client_dry_run_lists_the_rules_and_diffs_the_patched_object(run, kube, crds, namespace, tmp_path):
    create_with_status(
        kube, crds, cr(KC, "KubernetesCluster", "prod", spec={"region": "eu-west-1"}, status=kc_status(1)), namespace
    )
    assert run("backup", "b", "-n", namespace).code == 0
    result = run(
        "restore", "b", "--existing-resource-policy", "update", "--dry-run", "client",
        "--modifiers", modifiers_file(tmp_path, MOVE_REGION),
    )  # fmt: skip
    assert result.code == ExitStatus.SUCCESS, result.err
    line = next(x for x in result.out.splitlines() if f"{namespace}/prod" in x)
    assert "would-update" in line and "rules: 1" in line
    assert '~ /spec/region: "eu-west-1" -> "eu-central-1"' in result.out
    assert (
        '~ /status/apiServerURL: "https://c1.k8s.example.net:6443" -> "https://prod.eu-central-1.example.net:6443"'
        in result.out
    )


def test_an_intent_takes_its_modifiers_from_a_configmap(run, kube, crds, namespace):
    """GitOps: the restore intent names a ConfigMap in the controller's namespace holding the file."""
    from statusvault.vocabulary.kinds import CONFIGMAPS
    from tests.integration.test_controller import intent, once, status_of

    ctl = unique("ctl")
    ensure_namespace(kube, ctl)
    prod = cr(
        KC, "KubernetesCluster", "prod", spec={"region": "eu-west-1"}, status=kc_status(1), labels={"legacy": "1"}
    )
    create_with_status(kube, crds, prod, namespace)
    assert run("backup", "nightly", "-n", namespace).code == 0
    target = unique("dst")
    cm = {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": "move-region"},
        "data": {"rules.yaml": MOVE_REGION},
    }
    kube.create(CONFIGMAPS, ctl, cm)
    intent(
        kube,
        ctl,
        "restore-m",
        backup="nightly",
        modifiers="move-region",
        **{"namespace-mapping": f"{namespace}:{target}"},
    )

    assert once(run, ctl) == 1
    assert status_of(kube, ctl, "restore-m")["phase"] == "Complete"
    moved = kube.get(crds.resolve("kc"), target, "prod")
    assert moved["spec"] == {"region": "eu-central-1"} and "legacy" not in (moved["metadata"].get("labels") or {})

    intent(kube, ctl, "restore-bad", backup="nightly", modifiers="no-such-configmap")
    once(run, ctl)
    assert "modifiers ConfigMap" in status_of(kube, ctl, "restore-bad")["message"]
    for ns in (ctl, target):
        kube.delete(NAMESPACES, None, ns)
