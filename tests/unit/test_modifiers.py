"""Restore-time modifiers: Velero's file format, validation that names the rule and field, and application."""

from __future__ import annotations

import textwrap

import pytest

from statusvault.errors import ConfigError
from statusvault.restore.modifiers import ModifierError, load_modifiers, merge_patch, velero_value
from tests.builders import cr, with_meta

KC = "kubernetesclusters.xyz.example.com"


def rules(body: str):
    return load_modifiers(textwrap.dedent(body), "m.yaml")


def kc(name="prod", ns="team-a", **kw):
    return with_meta(cr("xyz.example.com/v1", "KubernetesCluster", name, **kw), ns)


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ("premium", "premium"),
        ("3", 3),
        ("2.5", 2.5),
        ("true", True),
        ("False", False),
        ("null", None),
        ('{"a": 1}', {"a": 1}),
        ("[1, 2]", [1, 2]),
        ('"true"', "true"),  # quoted: the string, as Velero does
        ('"3"', "3"),
        ("{not json", "{not json"),
        (7, 7),  # a YAML number is taken as it is
        ({"a": 1}, {"a": 1}),
    ],
)
def test_values_are_read_as_velero_reads_them(value, expected):
    assert velero_value(value) == expected


VELERO_EXAMPLE = """
version: v1
resourceModifierRules:
- conditions:
    groupResource: persistentvolumeclaims
    resourceNameRegex: "^mysql.*$"
    namespaces:
    - bar
    - foo
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


def pvc(name, ns, labels):
    obj = with_meta(cr("v1", "PersistentVolumeClaim", name, spec={"storageClassName": "standard"}), ns)
    obj["metadata"]["labels"] = labels
    return obj


def test_velero_documented_example_applies_unchanged():
    m = rules(VELERO_EXAMPLE)
    out, done = m.apply("persistentvolumeclaims", pvc("mysql-0", "foo", {"foo": "bar", "test": "x"}))
    assert out["spec"]["storageClassName"] == "premium" and out["metadata"]["labels"] == {"foo": "bar"}
    assert done.applied == (1,)
    for name, ns, labels in [("web-0", "foo", {"foo": "bar", "test": "x"}), ("mysql-0", "baz", {"foo": "bar"})]:
        unchanged, done = m.apply("persistentvolumeclaims", pvc(name, ns, labels))
        assert unchanged["spec"]["storageClassName"] == "standard" and done.applied == ()


def test_rules_apply_in_order_with_wildcards_matches_and_status_patches():
    m = rules(
        """
        version: v1
        resourceModifierRules:
        - conditions:
            groupResource: "*.xyz.example.com"
            names: ["prod*"]
            matches:
            - path: /spec/region
              value: eu-west-1
          patches:
          - operation: replace
            path: /spec/region
            value: eu-central-1
          statusPatches:
          - operation: replace
            path: /status/apiServerURL
            value: https://prod.eu-central-1.example.net
        - conditions:
            groupResource: kubernetesclusters.xyz.example.com
            matches:
            - path: /spec/region
              value: eu-central-1
          mergePatches:
          - patchData: '{"metadata": {"labels": {"legacy": null}}}'
        """
    )
    obj = kc(spec={"region": "eu-west-1"}, status={"apiServerURL": "https://old"}, labels={"legacy": "1", "a": "b"})
    out, done = m.apply(KC, obj)
    assert out["spec"] == {"region": "eu-central-1"}
    assert out["status"] == {"apiServerURL": "https://prod.eu-central-1.example.net"}
    assert out["metadata"]["labels"] == {"a": "b"}, "rule 2 sees rule 1's result"
    assert done.applied == (1, 2)
    assert obj["spec"] == {"region": "eu-west-1"}, "the input is not changed"


def test_a_failed_test_op_skips_the_whole_rule_and_is_counted():
    m = rules(
        """
        version: v1
        resourceModifierRules:
        - conditions: {groupResource: "*"}
          patches:
          - {operation: test, path: /spec/tier, value: gold}
          - {operation: replace, path: /spec/size, value: "10"}
          mergePatches:
          - patchData: '{"spec": {"touched": true}}'
        """
    )
    out, done = m.apply(KC, kc(spec={"tier": "silver", "size": 1}))
    assert out["spec"] == {"tier": "silver", "size": 1} and done.skipped == (1,) and done.applied == ()
    out, done = m.apply(KC, kc(spec={"tier": "gold", "size": 1}))
    assert out["spec"] == {"tier": "gold", "size": 10, "touched": True} and done.applied == (1,)


def test_a_patch_that_cannot_apply_fails_that_object():
    m = rules(
        """
        version: v1
        resourceModifierRules:
        - conditions: {groupResource: "*"}
          patches: [{operation: replace, path: /spec/missing, value: x}]
        """
    )
    with pytest.raises(ModifierError, match="modifier rule 1 cannot be applied"):
        m.apply(KC, kc(spec={}))


def test_label_selector_expressions():
    m = rules(
        """
        version: v1
        resourceModifierRules:
        - conditions:
            groupResource: "*"
            labelSelector:
              matchExpressions:
              - {key: env, operator: In, values: [prod, stage]}
              - {key: frozen, operator: DoesNotExist}
          patches: [{operation: add, path: /spec/x, value: "1"}]
        """
    )
    assert m.apply(KC, kc(spec={}, labels={"env": "prod"}))[1].applied == (1,)
    assert m.apply(KC, kc(spec={}, labels={"env": "dev"}))[1].applied == ()
    assert m.apply(KC, kc(spec={}, labels={"env": "prod", "frozen": "y"}))[1].applied == ()


HEAD = "version: v1\nresourceModifierRules:\n"
ANY = "- conditions: {groupResource: x}\n"


@pytest.mark.parametrize(
    ("body", "message"),
    [
        ("version: v1\nresourceModifierRules: [", "not valid YAML"),
        ("version: v2\nresourceModifierRules: []", "version must be v1"),
        ("version: v1\nresourceModifierRules: []", "must be a non-empty list"),
        ("version: v1\nrules: []", "unknown key 'rules'"),
        (
            HEAD + ANY + "  patches: [{operation: replac, path: /a}]",
            r"rule 1 \(resourceModifierRules\[0\]\)\.patches\[0\]\.operation: unknown operation 'replac'",
        ),
        (
            HEAD + ANY + "  patches: [{operation: add, path: a}]",
            r"patches\[0\]\.path: a JSON pointer starting with '/'",
        ),
        (
            HEAD + ANY + "  patches: [{operation: add, path: /a}]",
            r"patches\[0\]\.value: required for add",
        ),
        (
            HEAD + "- conditions: {groupResource: x, resourceNameRegex: '('}\n"
            "  patches: [{operation: remove, path: /a}]",
            r"conditions\.resourceNameRegex: invalid regular expression",
        ),
        (
            HEAD + "- conditions: {}\n  patches: [{operation: remove, path: /a}]",
            r"conditions\.groupResource: required",
        ),
        (
            HEAD
            + ANY
            + "  patches: [{operation: remove, path: /a}]\n"
            + ANY
            + "  strategicPatches: [{patchData: '{}'}]",
            r"rule 2 \(resourceModifierRules\[1\]\)\.strategicPatches: not supported",
        ),
        (
            HEAD + ANY + "  statusPatches: [{operation: remove, path: /spec/a}]",
            r"statusPatches\[0\]\.path: a status patch path starts with /status",
        ),
        (
            "version: v1\nresourceModifierRules:\n- conditions: {groupResource: x}",
            "no patches",
        ),
        (
            HEAD + "- conditions: {groupResource: x, labelSelector: {matchExpressions: [{key: a, operator: Near}]}}\n"
            "  patches: [{operation: remove, path: /a}]",
            r"labelSelector\.matchExpressions\[0\]",
        ),
    ],
)
def test_a_bad_file_is_refused_naming_the_rule_and_field(body, message):
    with pytest.raises(ConfigError, match=message):
        load_modifiers(body, "m.yaml")


def test_the_digest_follows_the_content_and_is_all_the_repr_shows():
    a, b = rules(VELERO_EXAMPLE), rules(VELERO_EXAMPLE.replace("premium", "gold"))
    assert a.digest != b.digest and repr(a) == f"Modifiers(digest='{a.digest}')"


def test_merge_patch_is_rfc7386():
    assert merge_patch({"a": {"b": 1, "c": 2}, "l": [1]}, {"a": {"b": None, "d": 3}, "l": [2]}) == {
        "a": {"c": 2, "d": 3},
        "l": [2],
    }
