"""The Restore resource (statusvault.dev/v1alpha1) on the real API server: its CRD refuses a bad spec at
admission, and the controller reconciles it into a restore with kstatus conditions, Events and annotations."""

from __future__ import annotations

import pytest

from statusvault.cli.specfields import crds as restore_crds
from statusvault.errors import KubeApiError
from statusvault.kube.transport import APPLY_PATCH
from statusvault.testing.fixtures import ensure_namespace, install_crds
from tests.builders import unique


@pytest.fixture(scope="module")
def restores(kube):
    return install_crds(kube, restore_crds()).by_qualified("restores.statusvault.dev")


@pytest.fixture
def ctl_ns(kube):
    ns = unique("rctl")
    ensure_namespace(kube, ns)
    return ns


def restore_body(name: str, **spec) -> dict:
    return {"apiVersion": "statusvault.dev/v1alpha1", "kind": "Restore", "metadata": {"name": name}, "spec": spec}


@pytest.mark.parametrize(
    ("spec", "refusal"),
    [
        ({"backup": "b", "parallel": "eight"}, "spec.parallel"),
        ({"backup": "b", "parallel": 0}, "spec.parallel"),
        ({"backup": "b", "existing-resource-policy": "replace"}, "spec.existing-resource-policy"),
        ({"namespace": ["a"]}, "spec.backup"),
        ({"backup": "b", "no-status": True, "status-include-resources": ["kc"]}, "spec"),
        ({"backup": "b", "pause-annotation": "x/paused"}, "spec"),
    ],
    ids=["wrong-type", "out-of-range", "not-a-choice", "no-backup", "no-status-and-a-status-filter", "needs"],
)
def test_a_bad_spec_is_refused_at_admission(kube, restores, ctl_ns, spec, refusal):
    with pytest.raises(KubeApiError) as refused:
        kube.create(restores, ctl_ns, restore_body("bad", **spec))
    assert refused.value.code == 422 and refusal in str(refused.value), refused.value
    assert kube.get(restores, ctl_ns, "bad") is None


def test_no_status_alone_and_filters_alone_are_accepted(kube, restores, ctl_ns):
    kube.create(restores, ctl_ns, restore_body("a", backup="b", **{"no-status": True}))
    kube.create(
        restores, ctl_ns, restore_body("b", backup="b", **{"no-status": False, "status-include-resources": ["kc"]})
    )


def test_an_unknown_field_is_refused_by_an_apply(kube, restores, ctl_ns):
    """Server-side apply (`kubectl apply --server-side`; plain kubectl apply validates fields strictly too) refuses
    a field the schema does not declare: 1.20 in building the typed patch, 1.25 on by strict field validation.
    A create without validation would have it pruned, so the controller never sees it."""
    body = restore_body("u", backup="b", paralel=4)
    strict = (("fieldValidation", "Strict"), ("fieldManager", "kubectl"))
    with pytest.raises(KubeApiError) as refused:
        kube.patch(restores, ctl_ns, "u", body, APPLY_PATCH, params=strict)
    assert "paralel" in str(refused.value)
    assert kube.get(restores, ctl_ns, "u") is None


def test_install_dry_run_prints_the_crd_first(run, crds):
    result = run("controller", "install", "--dry-run", "--storage", "s3://b/p", "--include-resources", "kc")
    assert result.code == 0, result.err
    first = result.out.split("\n---")[0]
    assert "kind: CustomResourceDefinition" in first and "name: restores.statusvault.dev" in first
    assert "kind: Deployment" in result.out
