"""Pause markers: profiles by group and shape, what statusvault records, and the patches that undo exactly it."""

from __future__ import annotations

import copy

import jsonpatch
import pytest

from statusvault.errors import ConfigError
from statusvault.restore.core.pausemarkers import (
    RECORD,
    Marker,
    PauseOptions,
    pause_lost,
    pause_options,
    pause_patch,
    unmarked_warning,
    unpause_patch,
    without_record,
)
from statusvault.restore.results.report import ItemResult, Outcome, RestoreReport, StatusOutcome
from tests.builders import cr, resource_type


def obj(api: str, kind: str, **kw):
    o = cr(api, kind, "x", **kw)
    o["metadata"]["resourceVersion"] = "7"
    return o


@pytest.mark.parametrize(
    ("group", "kind", "spec", "marker"),
    [
        ("rds.aws.upbound.io", "Instance", {}, "crossplane.io/paused=true"),
        ("platform.example.com", "XDatabase", {"compositionRef": {"name": "c"}}, "crossplane.io/paused=true"),
        ("cluster.x-k8s.io", "Cluster", {}, "/spec/paused=true"),
        ("cluster.x-k8s.io", "Machine", {}, "cluster.x-k8s.io/paused=true"),
        ("infrastructure.cluster.x-k8s.io", "AWSCluster", {}, "cluster.x-k8s.io/paused=true"),
        ("kustomize.toolkit.fluxcd.io", "Kustomization", {}, "/spec/suspend=true"),
        ("argoproj.io", "Rollout", {}, "/spec/paused=true"),
    ],
)
def test_auto_picks_the_operators_own_marker(group, kind, spec, marker):
    rt = resource_type(group, kind)
    found = PauseOptions(auto=True).marker_for(rt, obj(f"{group}/v1", kind, spec=spec))
    assert found is not None and found.describe() == marker


def test_auto_leaves_unknown_operators_builtins_and_crds_alone():
    assert (
        PauseOptions(auto=True).marker_for(
            resource_type("db.example.com", "Database"), obj("db.example.com/v1", "Database")
        )
        is None
    )
    assert (
        PauseOptions(auto=True).marker_for(
            resource_type("argoproj.io", "Application"), obj("argoproj.io/v1", "Application")
        )
        is None
    )
    svc = resource_type("", "Service", custom=False)
    assert (
        PauseOptions(auto=True, annotation=("a", "b"), resources=("*",)).marker_for(svc, obj("v1", "Service")) is None
    )


def test_a_created_paused_object_is_unpaused_to_exactly_what_it_was():
    rt = resource_type("kustomize.toolkit.fluxcd.io", "Kustomization")
    original = obj("kustomize.toolkit.fluxcd.io/v1", "Kustomization", spec={"path": "./"}, annotations={"keep": "me"})
    body = copy.deepcopy(original)
    marker = PauseOptions(auto=True).marker_for(rt, body)
    marker.apply(body)
    assert body["spec"]["suspend"] is True and RECORD in body["metadata"]["annotations"]
    body["metadata"]["annotations"]["operator"] = "wrote this meanwhile"
    undone = jsonpatch.apply_patch(body, unpause_patch(body))
    assert undone["spec"] == original["spec"]
    assert undone["metadata"]["annotations"] == {"keep": "me", "operator": "wrote this meanwhile"}


def test_a_field_that_was_set_gets_its_old_value_back():
    original = obj("argoproj.io/v1alpha1", "Rollout", spec={"paused": False})
    body = copy.deepcopy(original)
    PauseOptions(auto=True).marker_for(resource_type("argoproj.io", "Rollout"), body).apply(body)
    assert jsonpatch.apply_patch(body, unpause_patch(body))["spec"] == {"paused": False}


def test_the_unpause_is_guarded_by_resource_version_and_needs_our_record():
    paused_by_owner = obj("rds.aws.upbound.io/v1", "Instance", annotations={"crossplane.io/paused": "true"})
    assert unpause_patch(paused_by_owner) is None, "not ours: left paused"
    body = obj("rds.aws.upbound.io/v1", "Instance")
    PauseOptions(auto=True).marker_for(resource_type("rds.aws.upbound.io", "Instance"), body).apply(body)
    assert unpause_patch(body)[0] == {"op": "test", "path": "/metadata/resourceVersion", "value": "7"}


def test_a_moved_source_pause_is_undone_in_the_restored_body():
    rt = resource_type("rds.aws.upbound.io", "Instance")
    live = obj("rds.aws.upbound.io/v1", "Instance", spec={"forProvider": {}})
    marker = PauseOptions(auto=True).marker_for(rt, live)
    patched = jsonpatch.apply_patch(live, pause_patch(live, marker))
    assert patched["metadata"]["annotations"]["crossplane.io/paused"] == "true"
    assert pause_patch(patched, marker) is None, "paused already: nothing to do"
    without_record(patched)
    assert "annotations" not in patched["metadata"]


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (("sometimes", "", "", (), ()), "--pause must be auto or none"),
        (("none", "novalue", "", ("x",), ()), "expected KEY=VALUE"),
        (("none", "", "spec/x=1", ("x",), ()), "JSON pointer"),
        (("none", "a=b", "", (), ()), "need --pause-resources"),
        (("none", "", "", ("x",), ()), "needs --pause-annotation or --pause-field"),
        (("none", "", "", (), ("x",)), "--keep-paused needs --pause"),
        (("none", "a=b", "/spec/x=1", ("x",), ()), "not both"),
    ],
)
def test_bad_pause_flags_are_refused(args, message):
    with pytest.raises(ConfigError, match=message):
        pause_options(*args)


def test_generic_field_values_are_json():
    opts = pause_options("none", "", "/spec/suspend=true", ("gadgets.example.com",), ())
    assert opts.marker_for(resource_type("example.com", "Gadget"), obj("example.com/v1", "Gadget")).value is True


@pytest.mark.parametrize(
    ("marker", "cause"),
    [
        (Marker("field", "/spec/paused", True), "dropped the field /spec/paused (its CRD's schema"),
        (Marker("annotation", "example.com/hold", "yes"), "dropped the annotation example.com/hold (a mutating"),
    ],
)
def test_a_lost_pause_names_the_marker_and_the_likely_cause(marker, cause):
    message = pause_lost(marker)
    assert message.startswith(f"created WITHOUT its pause marker {marker.describe()}: the server {cause}")


def test_the_report_warns_once_per_type_without_a_marker():
    report = RestoreReport("b", "none", warnings=["from the plan"])
    for name in ("a", "b"):
        report.add(ItemResult("dbs.example.com", "ns", name, Outcome.CREATED, StatusOutcome.WRITTEN, unmarked=True))
    report.add(ItemResult("x.upbound.io", "ns", "c", Outcome.CREATED, StatusOutcome.WRITTEN, paused="p=true"))
    assert report.warnings == ["from the plan", unmarked_warning("dbs.example.com")]
    assert report.counts()["pause"] == {"no-marker": 2, "paused": 1}
    report.close()
