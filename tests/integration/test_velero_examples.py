"""Velero's documented resource-modifier examples (docs: restore-resource-modifiers), written again for the
fixture CRDs and run through `restore --modifiers` against the real API server: a Velero user's file means the
same here. PVC-like objects are Widgets (their schema keeps any field); Deployment-like ones KubernetesClusters."""

from __future__ import annotations

import json
import textwrap
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from statusvault.errors import ExitStatus
from statusvault.kube.discovery import Discovery
from statusvault.vocabulary.kinds import NAMESPACES
from tests.builders import cr, kc_status, unique

pytestmark = pytest.mark.version_neutral("modifiers are pure transforms of the saved objects; the writes are crs/'s")

WIDGET = "example.com/v1"
KC = "xyz.example.com/v1"
DB = "db.example.com/v1"
BOUND = {"phase": "Bound", "capacity": {"storage": "1Gi"}}


@pytest.fixture
def target(kube) -> Iterator[str]:
    """The namespace the backup is restored into (--namespace-mapping), removed afterwards."""
    name = unique("dst")
    yield name
    kube.delete(NAMESPACES, None, name)


@pytest.fixture
def restore(run, namespace: str, target: str, tmp_path: Path) -> Callable[..., Any]:
    """Back up the test's namespace, then restore it into `target` with the given modifiers file."""

    def _restore(modifiers: str, *args: str) -> Any:
        assert run("backup", "b", "-n", namespace).code == ExitStatus.SUCCESS
        path = tmp_path / "modifiers.yaml"
        path.write_text(textwrap.dedent(modifiers))
        return run("restore", "b", "--namespace-mapping", f"{namespace}:{target}", "--modifiers", str(path), *args)

    return _restore


def claim(name: str, storage_class: str, labels: dict[str, str] | None = None, **annotations: str) -> dict[str, Any]:
    """A PVC-like Widget, bound."""
    spec = {"storageClassName": storage_class, "resources": {"requests": {"storage": "1Gi"}}}
    return cr(WIDGET, "Widget", name, spec=spec, status=BOUND, labels=labels, annotations=annotations or None)


def get(kube, crds: Discovery, resource: str, namespace: str, name: str) -> dict[str, Any]:
    obj = kube.get(crds.resolve(resource), namespace, name)
    assert obj is not None, f"{resource} {namespace}/{name} was not restored"
    return dict(obj)


def test_the_yaml_template_matches_the_namespace_backed_up_from(run, kube, crds, make, namespace, target, restore):
    """The template: name regex, namespaces, labelSelector; replace storageClassName and remove a label. Its
    namespaces are the backup's, "not the new namespace where the resource is going to be restored"."""
    make(claim("mysql-0", "standard", {"foo": "bar", "test": "yes"}), namespace)
    make(claim("mysql-1", "standard", {"test": "yes"}), namespace)  # no foo=bar
    make(claim("web-0", "standard", {"foo": "bar", "test": "yes"}), namespace)  # not ^mysql
    result = restore(
        f"""
        version: v1
        resourceModifierRules:
        - conditions:
             groupResource: widgets.example.com
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
        - conditions:
            groupResource: widgets.example.com
            namespaces: [{target}]
          mergePatches:
          - patchData: '{{"metadata": {{"labels": {{"matched-the-target-namespace": "yes"}}}}}}'
        """,
        "-o",
        "json",
    )
    assert result.code == ExitStatus.SUCCESS, result.err
    mysql = get(kube, crds, "widgets.example.com", target, "mysql-0")
    assert (mysql["spec"]["storageClassName"], mysql["metadata"]["labels"]) == ("premium", {"foo": "bar"})
    assert mysql["status"] == BOUND
    for name, labels in (("mysql-1", {"test": "yes"}), ("web-0", {"foo": "bar", "test": "yes"})):
        other = get(kube, crds, "widgets.example.com", target, name)
        assert (other["spec"]["storageClassName"], other["metadata"]["labels"]) == ("standard", labels), name
    matched = {i["name"]: i["modifiers"] for i in json.loads(result.out)["items"] if "modifiers" in i}
    assert matched == {"mysql-0": {"applied": [1], "skippedByTest": []}}, "rule 2 names the target namespace: never"


def test_a_test_operation_changes_the_storage_class_only_where_it_holds(kube, crds, make, namespace, target, restore):
    make(claim("fast", "premium"), namespace)
    make(claim("slow", "gold"), namespace)
    result = restore(
        f"""
        version: v1
        resourceModifierRules:
        - conditions:
            groupResource: widgets.example.com
            resourceNameRegex: ".*"
            namespaces:
            - bar
            - {namespace}
          patches:
          - operation: test
            path: "/spec/storageClassName"
            value: "premium"
          - operation: replace
            path: "/spec/storageClassName"
            value: "standard"
        """,
        "-o",
        "json",
    )
    assert result.code == ExitStatus.SUCCESS, result.err
    assert get(kube, crds, "widgets.example.com", target, "fast")["spec"]["storageClassName"] == "standard"
    assert get(kube, crds, "widgets.example.com", target, "slow")["spec"]["storageClassName"] == "gold"
    report = json.loads(result.out)
    assert report["summary"]["modifiers"] == {"modified": 1, "skipped": 1}
    slow = next(i for i in report["items"] if i["name"] == "slow")
    assert slow["modifiers"] == {"applied": [], "skippedByTest": [1]} and slow["status"] == "written"


def test_a_label_and_an_annotation_go_only_where_a_test_guard_holds(kube, crds, make, namespace, target, restore):
    owner = {"example.com/owner": "team-a"}
    make(claim("old", "standard", {"tier": "legacy", "app": "db"}, **owner), namespace)
    make(claim("new", "standard", {"tier": "gold", "app": "db"}, **owner), namespace)
    result = restore(
        """
        version: v1
        resourceModifierRules:
        - conditions:
            groupResource: widgets.example.com
          patches:
          - operation: test
            path: "/metadata/labels/tier"
            value: "legacy"
          - operation: remove
            path: "/metadata/labels/tier"
          - operation: remove
            path: "/metadata/annotations/example.com~1owner"
        """
    )
    assert result.code == ExitStatus.SUCCESS, result.err
    old = get(kube, crds, "widgets.example.com", target, "old")
    assert old["metadata"]["labels"] == {"app": "db"} and "annotations" not in old["metadata"]
    new = get(kube, crds, "widgets.example.com", target, "new")
    assert new["metadata"]["labels"] == {"tier": "gold", "app": "db"} and new["metadata"]["annotations"] == owner
    assert "modifiers: 1 object(s) patched; 1 rule application(s) skipped by a failed test" in result.out


def test_escaped_json_values_add_and_copy_as_in_the_other_examples(kube, crds, make, namespace, target, restore):
    """ "Dealing with complex values by escaping the yaml", then the copy operator; a string that is a JSON
    number is that number, and "\\"...\\"" keeps a string a string (the schema would refuse the wrong type)."""
    pools = [{"name": "default", "size": 3}]
    make(cr(KC, "KubernetesCluster", "test-a", spec={"nodePools": pools}, status=kc_status(1)), namespace)
    make(cr(KC, "KubernetesCluster", "prod-a", spec={"nodePools": pools}, status=kc_status(2)), namespace)
    result = restore(
        f"""
        version: v1
        resourceModifierRules:
        - conditions:
            groupResource: kubernetesclusters.xyz.example.com
            resourceNameRegex: "^test-.*$"
            namespaces:
            - bar
            - {namespace}
          patches:
            # Dealing with complex values by escaping the yaml
          - operation: add
            path: "/spec/nodePools/0"
            value: "{{\\"name\\": \\"gpu\\", \\"size\\": 2}}"
            # Copy Operator
          - operation: copy
            from: "/spec/nodePools/0"
            path: "/spec/nodePools/1"
          - operation: replace
            path: "/spec/nodePools/2/size"
            value: "5"
          - operation: add
            path: "/spec/version"
            value: "\\"1.30\\""
        """
    )
    assert result.code == ExitStatus.SUCCESS, result.err
    test_a = get(kube, crds, "kc", target, "test-a")
    gpu = {"name": "gpu", "size": 2}
    assert test_a["spec"] == {"nodePools": [gpu, gpu, {"name": "default", "size": 5}], "version": "1.30"}
    assert test_a["status"] == kc_status(1)
    assert get(kube, crds, "kc", target, "prod-a")["spec"] == {"nodePools": pools}


def test_merge_patches_in_json_and_yaml_with_group_wildcards(kube, crds, make, namespace, target, restore):
    """JSON Merge Patch removes an annotation (null); patchData may be YAML; `*.group` picks one group's
    resources, `*` all of them."""
    foo = {"foo": "x", "keep": "y"}
    make(claim("claim", "standard", **foo), namespace)
    make(cr(KC, "KubernetesCluster", "kc", status=kc_status(1), annotations=foo), namespace)
    make(cr(DB, "Database", "db", spec={"engine": "postgres"}, status={"externalID": "d"}, annotations=foo), namespace)
    result = restore(
        f"""
        version: v1
        resourceModifierRules:
        - conditions:
            groupResource: "*"
            namespaces:
            - {namespace}
          mergePatches:
          - patchData: |
              {{
                "metadata": {{
                  "annotations": {{
                    "foo": null
                  }}
                }}
              }}
        - conditions:
            groupResource: "*.db.example.com"
          mergePatches:
          - patchData: |
              metadata:
                labels:
                  tier: data
              spec:
                sizeGB: 20
        """
    )
    assert result.code == ExitStatus.SUCCESS, result.err
    for resource, name in (("widgets.example.com", "claim"), ("kc", "kc"), ("databases.db.example.com", "db")):
        obj = get(kube, crds, resource, target, name)
        assert obj["metadata"]["annotations"] == {"keep": "y"}, resource
        assert ("tier" in (obj["metadata"].get("labels") or {})) == (name == "db"), resource
    db = get(kube, crds, "databases.db.example.com", target, "db")
    assert db["spec"] == {"engine": "postgres", "sizeGB": 20} and db["status"] == {"externalID": "d"}


def test_matches_condition_a_merge_patch(kube, crds, make, namespace, target, restore):
    """Conditional patches in all patch types: every `matches` entry must hold."""
    make(claim("premium-a", "premium", **{"foo": "x"}), namespace)
    make(cr(WIDGET, "Widget", "premium-big", spec={"storageClassName": "premium", "size": 10}), namespace)
    make(claim("standard-a", "standard", **{"foo": "x"}), namespace)
    result = restore(
        """
        version: v1
        resourceModifierRules:
        - conditions:
            groupResource: widgets.example.com
            matches:
            - path: "/spec/storageClassName"
              value: "premium"
            - path: "/spec/resources/requests/storage"
              value: "1Gi"
          mergePatches:
          - patchData: |
              {"metadata": {"annotations": {"foo": null}}, "spec": {"reviewed": true}}
        """
    )
    assert result.code == ExitStatus.SUCCESS, result.err
    assert get(kube, crds, "widgets.example.com", target, "premium-a")["spec"]["reviewed"] is True
    assert "annotations" not in get(kube, crds, "widgets.example.com", target, "premium-a")["metadata"]
    assert "reviewed" not in get(kube, crds, "widgets.example.com", target, "premium-big")["spec"], "one match fails"
    standard = get(kube, crds, "widgets.example.com", target, "standard-a")
    assert "reviewed" not in standard["spec"] and standard["metadata"]["annotations"] == {"foo": "x"}


def test_label_selector_expressions_pick_the_objects(kube, crds, make, namespace, target, restore):
    make(claim("prod", "standard", {"env": "prod"}), namespace)
    make(claim("frozen", "standard", {"env": "prod", "frozen": "y"}), namespace)
    make(claim("dev", "standard", {"env": "dev"}), namespace)
    result = restore(
        """
        version: v1
        resourceModifierRules:
        - conditions:
            groupResource: widgets.example.com
            labelSelector:
              matchExpressions:
              - {key: env, operator: In, values: [prod, stage]}
              - {key: frozen, operator: DoesNotExist}
          patches:
          - operation: replace
            path: /spec/storageClassName
            value: premium
        """
    )
    assert result.code == ExitStatus.SUCCESS, result.err
    classes = {
        n: get(kube, crds, "widgets.example.com", target, n)["spec"]["storageClassName"] for n in ("prod", "dev")
    }
    assert classes == {"prod": "premium", "dev": "standard"}
    assert get(kube, crds, "widgets.example.com", target, "frozen")["spec"]["storageClassName"] == "standard"


def test_strategic_merge_patches_are_refused_in_one_line_naming_the_rule(kube, make, namespace, target, restore):
    """Velero's strategic merge patch example: statusvault does not apply strategicPatches (custom resources have
    no patch strategy); the file is refused before the first write, never half-applied or silently ignored."""
    make(claim("my-pod", "standard"), namespace)
    result = restore(
        f"""
        version: v1
        resourceModifierRules:
        - conditions:
            groupResource: widgets.example.com
            namespaces: [{namespace}]
          mergePatches:
          - patchData: '{{"metadata": {{"labels": {{"a": "b"}}}}}}'
        - conditions:
            groupResource: widgets.example.com
            resourceNameRegex: "^my-pod$"
            namespaces:
            - {namespace}
          strategicPatches:
          - patchData: |
              {{
                "spec": {{
                  "containers": [
                    {{
                      "name": "nginx",
                      "image": "repo2/nginx"
                    }}
                  ]
                }}
              }}
        """
    )
    assert result.code == ExitStatus.USAGE
    assert len(result.err.strip().splitlines()) == 1, result.err
    assert result.err.startswith("error: ") and "rule 2 (resourceModifierRules[1]).strategicPatches" in result.err
    assert "not supported" in result.err and result.out == ""
    assert kube.get(NAMESPACES, None, target) is None, "nothing was written"
