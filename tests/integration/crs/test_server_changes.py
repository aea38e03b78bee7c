"""What the server changes behind the restore's back, on both servers: a CRD whose schema lost a spec and a status
field since the backup (the server prunes them), and Warning headers (a deprecated version, unknown fields). Each is
named per object and in the summary; the restore exits 0, or 3 with --strict, except that a saved status the server
did not keep is the object's failure (exit 3) whatever --strict says. Dry runs claim none of it."""

from __future__ import annotations

import json
import time
from typing import Any

import pytest

from statusvault.errors import ExitStatus
from statusvault.testing.fixtures import install_crds
from statusvault.vocabulary.kinds import CRDS
from tests.builders import cr, crd, unique
from tests.integration.crs.servers import delete_namespace

pytestmark = pytest.mark.version_sensitive(
    "schema pruning and Warning headers (unknown fields from 1.25, deprecations) differ by version"
)

DEPRECATED = "this version of Pool is deprecated: use v2"


def schema(*, zone: bool = True, secret: bool = True) -> dict[str, Any]:
    """Structural: the server prunes every field it does not name."""
    spec: dict[str, Any] = {"size": {"type": "integer"}}
    status: dict[str, Any] = {"poolID": {"type": "string"}}
    if zone:
        spec["zone"] = {"type": "string"}
    if secret:
        status["secret"] = {"type": "string"}
    part = {"spec": spec, "status": status}
    return {"type": "object", "properties": {k: {"type": "object", "properties": v} for k, v in part.items()}}


def backed_up_pools(run, kube, namespace: str, deprecated: bool = False) -> tuple[str, Any]:
    """Pools `touched` (spec.zone, status.secret) and `untouched` (neither) with their status, backed up (without
    their CRD), then deleted."""
    group = f"{unique('srv')}.example.com"
    definition = crd(group, "Pool", schema=schema())
    if deprecated:
        definition["spec"]["versions"][0].update(deprecated=True, deprecationWarning=DEPRECATED)
    rt = install_crds(kube, [definition]).resolve(f"pools.{group}")
    for name, spec, status in (
        ("touched", {"size": 3, "zone": "eu"}, {"poolID": "p-1", "secret": "s3cr3t"}),
        ("untouched", {"size": 1}, {"poolID": "p-2"}),
    ):
        obj = kube.create(rt, namespace, cr(f"{group}/v1", "Pool", name, spec=spec))
        obj["status"] = status
        kube.replace(rt, namespace, name, obj, sub="status")
    args = ("backup", "b", "-n", namespace, "--include-resources", f"pools.{group}", "--no-include-crds")
    assert run(*args).code == 0
    delete_namespace(kube, namespace)
    return group, rt


def lose_zone_and_secret(kube, group: str, rt: Any, secret: bool = False) -> None:
    """Replace the CRD's schema by one without spec.zone (and status.secret unless kept); wait until the server
    prunes."""
    live = kube.get(CRDS, None, f"pools.{group}")
    live["spec"]["versions"][0]["schema"]["openAPIV3Schema"] = schema(zone=False, secret=secret)
    kube.replace(CRDS, None, f"pools.{group}", live)
    probe = cr(f"{group}/v1", "Pool", unique("probe"), spec={"size": 1, "zone": "x"})
    deadline = time.monotonic() + 30
    while "zone" in kube.create(rt, "default", probe, dry_run=True)["spec"]:  # the handler swaps schemas async
        assert time.monotonic() < deadline, "the new schema never took effect"
        time.sleep(0.2)


def items(out: str) -> dict[str, dict[str, Any]]:
    """The report's Pools by name (on 1.20 the restore creates their Namespace too)."""
    return {i["name"]: i for i in json.loads(out)["items"] if i["resource"].startswith("pools.")}


def test_fields_a_schema_lost_since_the_backup_are_named_and_strict_fails(run, kube, namespace, kube_version):
    group, rt = backed_up_pools(run, kube, namespace)
    lose_zone_and_secret(kube, group, rt)

    dry = run("restore", "b", "--dry-run", "server", "-o", "json")
    assert dry.code == 0, dry.err
    assert not any("serverChanges" in i or "serverWarnings" in i for i in items(dry.out).values())
    assert json.loads(dry.out)["serverChanges"] == []

    result = run("restore", "b", "-o", "json")
    assert result.code == ExitStatus.PARTIAL_FAILURE, result.err  # a saved status not kept: never a success
    report = json.loads(result.out)
    touched, untouched = items(result.out)["touched"], items(result.out)["untouched"]
    assert touched["serverChanges"] == [
        {"path": "spec.zone", "change": "pruned"},
        {"path": "status.secret", "change": "pruned"},
    ]
    assert (touched["result"], touched["status"]) == ("created", "mismatch")
    assert "status.secret pruned" in touched["message"] and "A re-run cannot bring them back" in touched["message"]
    assert "serverChanges" not in untouched and "serverWarnings" not in untouched
    assert untouched["status"] == "written"
    assert report["serverChanges"] == [
        {"resource": f"pools.{group}", "path": "spec.zone", "change": "pruned", "objects": 1},
        {"resource": f"pools.{group}", "path": "status.secret", "change": "pruned", "objects": 1},
    ]
    assert report["summary"]["server"]["changed"] == 1
    live = kube.get(rt, namespace, "touched")
    assert (live["spec"], live["status"]) == ({"size": 3}, {"poolID": "p-1"})
    if kube_version == "1.36":  # fieldValidation=Warn, the default since 1.27, names each field it dropped
        assert touched["serverWarnings"] == ['unknown field "spec.zone"', 'unknown field "status.secret"']


def test_a_spec_field_a_schema_lost_is_named_and_only_strict_fails(run, kube, namespace):
    group, rt = backed_up_pools(run, kube, namespace)
    lose_zone_and_secret(kube, group, rt, secret=True)

    result = run("restore", "b", "-o", "json")
    assert result.code == 0, result.err
    touched = items(result.out)["touched"]
    assert touched["serverChanges"] == [{"path": "spec.zone", "change": "pruned"}]
    assert (touched["result"], touched["status"]) == ("created", "written")
    assert kube.get(rt, namespace, "touched")["status"] == {"poolID": "p-1", "secret": "s3cr3t"}

    delete_namespace(kube, namespace)
    strict = run("restore", "b", "--strict")
    assert strict.code == ExitStatus.PARTIAL_FAILURE, strict.out
    lines = strict.out.splitlines()
    assert f"changed by the server: pools.{group} {namespace}/touched: spec.zone pruned" in lines
    assert f"pools.{group}: 1 object(s) changed by the server: spec.zone pruned (1)" in lines
    assert not any("/untouched" in line for line in lines)
    assert " 0 failed, 0 without their saved status, 1 changed by the server" in lines[-1], lines[-1]
    last = strict.err.strip().splitlines()[-1]  # 1.25+ also warns of the unknown field it pruned
    assert last.startswith("error: restore of b: 1 object(s) changed by the server"), last
    assert last.endswith("the report names each (--strict)"), last


def test_a_deprecated_version_s_warning_is_named_per_object_and_strict_fails(run, kube, namespace):
    group, rt = backed_up_pools(run, kube, namespace, deprecated=True)
    result = run("restore", "b", "-o", "json")
    assert result.code == 0, result.err
    assert {name: i.get("serverWarnings") for name, i in items(result.out).items()} == {
        "touched": [DEPRECATED],
        "untouched": [DEPRECATED],
    }, "the create's and the status write's warning, once per object"
    assert json.loads(result.out)["serverWarnings"] == [
        {"resource": f"pools.{group}", "warning": DEPRECATED, "objects": 2}
    ]
    assert not any("serverChanges" in i for i in items(result.out).values()), "the schema kept every field"

    delete_namespace(kube, namespace)
    strict = run("restore", "b", "--strict")
    assert strict.code == ExitStatus.PARTIAL_FAILURE, strict.out
    assert f"server warning: pools.{group} {namespace}/touched: {DEPRECATED}" in strict.out.splitlines()
    assert f"pools.{group}: 2 object(s) with server warnings: {DEPRECATED} (2)" in strict.out.splitlines()
    assert strict.err.strip().splitlines()[-1] == (
        "error: restore of b: 2 object(s) drew server warnings: the report names each (--strict)"
    )
