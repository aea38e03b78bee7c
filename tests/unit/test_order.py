"""--order's file, its profiles, the JSONPath expressions of gates and the gates' verdicts (pure)."""

from __future__ import annotations

import codecs
import pickle

import pytest

from statusvault.cli.restore import read_modifiers
from statusvault.errors import ConfigError
from statusvault.restore.ordering.expr import parse_expression
from statusvault.restore.ordering.gates import LIST_OVER, GateWaiter, why_not
from statusvault.restore.ordering.order import Gate, Group, load_order, profile_names, read_order

OBJ = {
    "kind": "Cluster",
    "metadata": {"generation": 2},
    "status": {
        "phase": "Ready",
        "replicas": 3,
        "ready": True,
        "conditions": [{"type": "Synced", "status": "True"}, {"type": "Ready", "status": "False", "reason": "Wait"}],
    },
}


@pytest.mark.parametrize(
    ("text", "holds"),
    [
        ('.status.phase == "Ready"', True),
        ('.status.phase != "Ready"', False),
        ('.status.phase == "ready"', False),
        (".status.replicas == 3", True),
        ('.status.replicas == "3"', False),
        (".status.ready == true", True),
        (".status.replicas == true", False),
        (".status.missing == null", False),
        (".status.missing != 1", True),
        (".status.ready", True),
        (".status.missing", False),
        ('.status.conditions[?(@.type=="Synced")].status == "True"', True),
        ('.status.conditions[?(@.type == "Ready")].status == "True"', False),
        ('.status.conditions[1].reason == "Wait"', True),
        (".status.conditions[5].reason", False),
        ('.kind == "Cluster" && .status.phase == "Ready" && .metadata.generation == 2', True),
        ('.kind == "Cluster" && .status.phase == "Failed"', False),
    ],
)
def test_expressions(text, holds):
    assert parse_expression(text).holds(OBJ) is holds


@pytest.mark.parametrize(
    "text",
    ["", "status.phase", '.status.phase = "x"', ".status.phase == Ready", ".a[?(@.x)]", ".a || .b", "__import__"],
)
def test_bad_expressions_are_refused(text):
    with pytest.raises(ConfigError):
        parse_expression(text)


@pytest.mark.parametrize(
    ("gate", "obj", "why"),
    [
        (Gate(), None, "not found"),
        (Gate(), OBJ, "Ready is False (Wait)"),
        (Gate("Synced"), OBJ, ""),
        (Gate("Healthy"), OBJ, "no Healthy condition"),
        (Gate("Current"), OBJ, "Ready is False (Wait)"),
        (Gate("Current"), {"metadata": {}, "status": {}}, ""),
        (Gate("Current"), {"metadata": {"generation": 1}, "status": {"observedGeneration": 4}}, "status."
         "observedGeneration 4 is not metadata.generation 1"),
        (Gate(expression=parse_expression(".status.replicas == 3")), OBJ, ""),
    ],
)  # fmt: skip
def test_gate_verdicts(gate, obj, why):
    assert why_not(gate, obj) == why


def test_an_order_file():
    order = load_order(
        "version: v1\ngroups:\n"
        "  - name: a\n    resources: ['*.infra.io']\n    selector: tier=db\n    gate: {timeout: 90s}\n"
        "  - name: b\n    resources: [widgets.app.io]\n    gate: {expression: '.status.phase == \"Ready\"', "
        "timeout: 2m, onTimeout: continue}\n"
    )
    assert order.group_of("dbs.infra.io", {"tier": "db"}) == 1
    assert order.group_of("dbs.infra.io", {}) == 0, "the selector"
    assert order.group_of("widgets.app.io", {}) == 2
    assert order.groups[0].gate == Gate("Ready", None, 90.0, "fail")
    assert order.groups[1].gate is not None and order.groups[1].gate.timeout == 120.0
    assert pickle.loads(pickle.dumps(order)).group_of("dbs.infra.io", {"tier": "db"}) == 1


def test_only_membership_keys_a_restore():
    """A gate's settings may change between a run and its re-run; its groups may not."""
    base = "version: v1\ngroups:\n  - name: a\n    resources: [x.io]\n"
    assert repr(load_order(base + "    gate: {timeout: 1s}\n")) == repr(load_order(base + "    gate: {timeout: 9s}\n"))
    assert repr(load_order(base)) != repr(load_order(base.replace("x.io", "y.io")))


@pytest.mark.parametrize(
    ("text", "error"),
    [
        ("[]", "expected a mapping"),
        ("version: v2\ngroups: [{name: a, resources: [x]}]", "version must be v1"),
        ("version: v1\ngroups: [{name: a}]", "group 1 (groups[0]): resources must be a non-empty list"),
        ("version: v1\ngroups: [{name: a, resources: [x], order: 1}]", "unknown field 'order'"),
        ("version: v1\ngroups: [{name: a, resources: [x]}, {name: a, resources: [y]}]", "names must be unique"),
        ("version: v1\ngroups: [{name: a, resources: [x], gate: {timeout: soon}}]", "positive duration"),
        ("version: v1\ngroups: [{name: a, resources: [x], gate: {onTimeout: retry}}]", "fail or continue"),
        ("version: v1\ngroups: [{name: a, resources: [x], gate: {condition: Ready, expression: .a}}]", "not both"),
        ("version: v1\ngroups: [{name: a, resources: [x], selector: 'a in b'}]", "label selector"),
    ],
)
def test_bad_order_files(text, error):
    with pytest.raises(ConfigError, match=error.replace("(", r"\(").replace(")", r"\)").replace("[", r"\[")):
        load_order(text)


def test_profiles_are_shipped_files():
    assert {"crossplane", "cluster-api", "cnpg", "flux", "argo-rollouts"} <= set(profile_names())
    for name in [*profile_names(), "capi"]:
        assert read_order(name).profile
    with pytest.raises(ConfigError, match="unknown --order profile 'nope'"):
        read_order("nope")


class _Cluster:
    """get and list_pages over a dict of objects, counting requests; `late` appears once it was looked for."""

    def __init__(self, objects, late):
        self.objects, self.late, self.gets, self.lists = objects, late, 0, 0

    def get(self, rt, namespace, name):
        self.gets += 1
        return self._arrive(self.objects.get(name)) if name == self.late["metadata"]["name"] else self.objects.get(name)

    def list_pages(self, rt, namespace=None):
        self.lists += 1
        yield self._arrive(list(self.objects.values()))

    def _arrive(self, answer):
        self.objects.setdefault(self.late["metadata"]["name"], self.late)
        return answer


@pytest.mark.parametrize(("count", "gets", "lists"), [(LIST_OVER, LIST_OVER + 1, 0), (LIST_OVER + 1, 1, 1)])
def test_a_gate_looks_with_gets_or_one_list_then_again_only_at_what_did_not_pass(count, gets, lists):
    from statusvault.restore.core.plan import Action, Category, PlanItem, StatusMode
    from tests.builders import resource_type

    rt = resource_type("x.example.com", "Thing")
    items = [PlanItem(rt, "ns", "ns", f"t-{i}", "", Category.NAMESPACED, Action.CREATE, StatusMode.NONE, seq=i)
             for i in range(count)]  # fmt: skip
    ready = {"status": {"conditions": [{"type": "Ready", "status": "True"}]}}
    objects = {f"t-{i}": {"metadata": {"name": f"t-{i}"}, **ready} for i in range(count)}
    late = objects.pop(f"t-{count - 1}")
    cluster = _Cluster(objects, late)
    group = Group("g", ("x.example.com",), gate=Gate(timeout=30))
    result = GateWaiter(cluster, lambda item: item, None).wait(1, group, items)  # type: ignore[arg-type]
    assert (result.outcome, result.objects, result.not_passed_count) == ("passed", count, 0)
    assert (cluster.gets, cluster.lists) == (gets, lists)


ORDER = "version: v1\ngroups:\n  - name: a\n    resources: [x.io]\n"


@pytest.mark.parametrize(
    "encoded",
    [
        ORDER.encode(),
        codecs.BOM_UTF8 + ORDER.encode(),
        ORDER.encode("utf-16"),  # PowerShell's `>`: UTF-16LE with its byte-order mark
        codecs.BOM_UTF16_BE + ORDER.encode("utf-16-be"),
    ],
    ids=["utf-8", "utf-8-bom", "utf-16-le", "utf-16-be"],
)
def test_an_order_file_in_utf8_or_utf16_with_its_bom_is_read(tmp_path, encoded):
    path = tmp_path / "order.yaml"
    path.write_bytes(encoded)
    assert read_order(str(path)).groups[0].name == "a"


def test_an_order_or_modifiers_file_that_is_not_text_is_one_line_naming_it(tmp_path):
    path = tmp_path / "order.yaml"
    path.write_bytes(b"version: v1\ngroups: [\xff\xfe]\n")
    with pytest.raises(ConfigError, match=r"^order file .*order.yaml is not UTF-8 text \(byte 21\): save it as UTF-8$"):
        read_order(str(path))
    with pytest.raises(ConfigError, match=r"^modifiers file .* is not UTF-8 text"):
        read_modifiers(str(path))
    with pytest.raises(ConfigError, match=r"^cannot read order file .*missing.yaml: No such file"):
        read_order(str(tmp_path / "missing.yaml"))
