"""What only a current server does (Kubernetes 1.25+: CEL validation rules), on the 1.36 control plane: a rule added
to a CRD after the backup that the saved spec or status breaks fails that object clearly, never silently."""

from __future__ import annotations

import json
from typing import Any

import pytest

from statusvault.errors import ExitStatus
from statusvault.kube.discovery import discover
from statusvault.testing.fixtures import install_crds
from tests.builders import cr, crd, unique
from tests.integration.crs.servers import delete_namespace, replace_schema_and_wait

pytestmark = pytest.mark.current_only("CEL validation rules (x-kubernetes-validations) are served from 1.25")


def schema(spec_rule: str = "", status_rule: str = "") -> dict[str, Any]:
    def part(rule: str, message: str) -> dict[str, Any]:
        body: dict[str, Any] = {"type": "object", "properties": {"replicas": {"type": "integer"}}}
        if rule:
            body["x-kubernetes-validations"] = [{"rule": rule, "message": message}]
        return body

    spec = part(spec_rule, "spec.replicas must be at most 3")
    status = part(status_rule, "status.replicas may not exceed 3")
    return {"type": "object", "properties": {"spec": spec, "status": status}}


def with_rules(kube, group: str, **rules: str) -> None:
    """Replace the CRD's schema by one with these CEL rules, and wait until the server enforces them."""
    rt = discover(kube).resolve(f"pools.{group}")
    probe = cr(f"{group}/v1", "Pool", "rules-probe", spec={"replicas": 5 if "spec_rule" in rules else 1})
    status = {"replicas": 5} if "status_rule" in rules else None
    replace_schema_and_wait(kube, rt, schema(**rules), probe, status)


def backed_up_pools(run, kube, namespace: str) -> tuple[str, Any]:
    """Two Pools, small (replicas 2) and big (replicas 5), with their status; backed up, then deleted."""
    group = f"{unique('cel')}.example.com"
    rt = install_crds(kube, [crd(group, "Pool", schema=schema())]).resolve(f"pools.{group}")
    for name, replicas in (("small", 2), ("big", 5)):
        obj = kube.create(rt, namespace, cr(f"{group}/v1", "Pool", name, spec={"replicas": replicas}))
        obj["status"] = {"replicas": replicas}
        kube.replace(rt, namespace, name, obj, sub="status")
    args = ("backup", "b", "-n", namespace, "--include-resources", f"pools.{group}", "--no-include-crds")
    assert run(*args).code == 0
    delete_namespace(kube, namespace)
    return group, rt


def test_a_status_breaking_a_cel_rule_added_after_the_backup_fails_that_object_clearly(run, kube, namespace):
    group, rt = backed_up_pools(run, kube, namespace)
    with_rules(kube, group, status_rule="self.replicas <= 3")
    result = run("restore", "b", "-o", "json")
    assert result.code == ExitStatus.PARTIAL_FAILURE, result.out
    items = {i["name"]: i for i in json.loads(result.out)["items"]}
    assert (items["small"]["result"], items["small"]["status"]) == ("created", "written")
    assert (items["big"]["result"], items["big"]["status"]) == ("created", "failed")
    assert "status.replicas may not exceed 3" in items["big"]["message"]
    assert kube.get(rt, namespace, "small")["status"] == {"replicas": 2}
    assert "status" not in kube.get(rt, namespace, "big"), "the rejected status was not written in part"
    last = result.err.strip().splitlines()[-1]
    assert last.startswith("error: restore of b: 1 object(s) failed (") and f"{namespace}/big)" in last, last
    assert last.endswith(
        "1 object(s) lack their saved status (" + last.split("failed (")[1].split(")")[0] + "): "
        "run the same command again to retry only those"
    ), last


def test_a_spec_breaking_a_cel_rule_added_after_the_backup_is_not_created(run, kube, namespace):
    group, rt = backed_up_pools(run, kube, namespace)
    with_rules(kube, group, spec_rule="self.replicas <= 3")
    result = run("restore", "b", "-o", "json")
    assert result.code == ExitStatus.PARTIAL_FAILURE, result.out
    big = {i["name"]: i for i in json.loads(result.out)["items"]}["big"]
    assert big["result"] == "failed" and "spec.replicas must be at most 3" in big["message"]
    assert kube.get(rt, namespace, "big") is None
    assert kube.get(rt, namespace, "small")["status"] == {"replicas": 2}
    assert "1 object(s) lack their saved status" in result.err, "a failed create leaves a status unrestored"


def test_validation_ratcheting_lets_an_unchanged_status_through_but_not_a_changed_one(run, kube, namespace):
    """--existing-resource-policy update into objects whose status breaks a newer rule: a status equal to the live one
    passes (validation ratcheting, on by default from 1.30); one that changes the value to a breaking one is
    refused, counted and named."""
    group, rt = backed_up_pools(run, kube, namespace)
    assert run("restore", "b").code == 0
    with_rules(kube, group, status_rule="self.replicas <= 3")
    unchanged = run("restore", "b", "--existing-resource-policy", "update", "-o", "json")
    assert unchanged.code == 0, unchanged.out
    assert kube.get(rt, namespace, "big")["status"] == {"replicas": 5}
    live = kube.get(rt, namespace, "big")
    live["status"] = {"replicas": 1}  # the operator scaled it down since
    kube.replace(rt, namespace, "big", live, sub="status")
    changed = run("restore", "b", "--existing-resource-policy", "update", "-o", "json")
    assert changed.code == ExitStatus.PARTIAL_FAILURE, changed.out
    big = {i["name"]: i for i in json.loads(changed.out)["items"]}["big"]
    assert big["status"] == "failed" and "status.replicas may not exceed 3" in big["message"]
    assert kube.get(rt, namespace, "big")["status"] == {"replicas": 1}
