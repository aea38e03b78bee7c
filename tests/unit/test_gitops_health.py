"""The Flux Kustomization and the Argo CD health check shipped in docs/gitops/, against the status shapes the
controller writes (controller/conditions.py). No Lua interpreter is installable offline (PyPI lupa is not in
uv's cache), so the Lua's rules table is read from the file and its control flow is mirrored here."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml

from statusvault.controller import crd
from statusvault.controller.conditions import PENDING, Reason, conditions
from statusvault.controller.intent import Phase

GITOPS = Path(__file__).resolve().parents[2] / "docs" / "gitops"
RULE = re.compile(r'\{type = "(\w+)", status = "(\w+)", health = "(\w+)"\}')


def restore_with(phase: str | None, reason: str = "", generation: int = 1, observed: int = 1) -> dict:
    obj: dict = {"metadata": {"generation": generation}}
    if phase is not None:
        conds = conditions(phase, reason, "m", observed, "2026-11-25T12:00:00Z", [])
        obj["status"] = {"observedGeneration": observed, "conditions": conds}
    return obj


def argocd_health(obj: dict) -> str:
    """docs/gitops/argocd-health-restore.lua, step for step, with the rules read from the file."""
    source = (GITOPS / "argocd-health-restore.lua").read_text()
    rules = RULE.findall(source)
    assert len(rules) == source.count("health = "), "every rule in the file is read"
    status = obj.get("status")
    if status is None or status.get("conditions") is None:
        return "Progressing"
    if status.get("observedGeneration") != obj["metadata"]["generation"]:
        return "Progressing"
    for kind, value, health in rules:
        if any(c["type"] == kind and c["status"] == value for c in status["conditions"]):
            return health
    return "Progressing"


def kstatus(obj: dict) -> str:
    """What Flux's health check (kstatus) computes from these conditions: Current, InProgress or Failed."""
    status = obj.get("status") or {}
    conds = {c["type"]: c["status"] for c in status.get("conditions") or []}
    if not conds or status.get("observedGeneration") != obj["metadata"]["generation"]:
        return "InProgress"
    if conds.get("Reconciling") == "True":
        return "InProgress"
    if conds.get("Stalled") == "True":
        return "Failed"
    return "Current" if conds.get("Ready") == "True" else "InProgress"


CASES = [
    (restore_with(None), "Progressing", "InProgress"),
    (restore_with(Phase.IN_PROGRESS, Reason.RESTORING), "Progressing", "InProgress"),
    (restore_with(PENDING, Reason.WAITING_FOR_LEASE), "Progressing", "InProgress"),
    (restore_with(Phase.COMPLETE, Reason.COMPLETED), "Healthy", "Current"),
    (restore_with(Phase.COMPLETE, Reason.COMPLETED, generation=2, observed=1), "Progressing", "InProgress"),
    (restore_with(Phase.FAILED, Reason.PARTIALLY_RESTORED), "Degraded", "Failed"),
    (restore_with(Phase.FAILED, Reason.BACKUP_NOT_FOUND), "Degraded", "Failed"),
    (restore_with(Phase.INVALID, Reason.INVALID_SPEC), "Degraded", "Failed"),
]


@pytest.mark.parametrize(("obj", "argo", "flux"), CASES)
def test_argo_cd_and_flux_read_a_restore_as_its_conditions_say(obj, argo, flux):
    assert argocd_health(obj) == argo
    assert kstatus(obj) == flux


def test_the_flux_kustomization_waits_on_the_example_restore():
    restore = yaml.safe_load((GITOPS / "restore.yaml").read_text())
    first, apps = yaml.safe_load_all((GITOPS / "flux-kustomization.yaml").read_text())
    check = first["spec"]["healthChecks"][0]
    assert (check["apiVersion"], check["kind"]) == (crd.API_VERSION, crd.KIND) == (restore["apiVersion"],
                                                                                    restore["kind"])  # fmt: skip
    assert (check["name"], check["namespace"]) == (restore["metadata"]["name"], restore["metadata"]["namespace"])
    assert first["spec"]["prune"] is False, "a prune would delete the Restore, which stops it"
    assert apps["spec"]["dependsOn"] == [{"name": first["metadata"]["name"]}]


def test_the_example_restore_names_only_spec_fields():
    from statusvault.cli.specfields import crds

    spec = crds()[0]["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]["properties"]
    restore = yaml.safe_load((GITOPS / "restore.yaml").read_text())
    assert set(restore["spec"]) <= set(spec)
