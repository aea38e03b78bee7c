"""The Flux Kustomization and the Argo CD health check shipped in docs/gitops/, against the status the controller
writes (ResourceTarget.write and controller/conditions.py). The Lua runs in Lua 5.1 (lupa), as Argo CD's
gopher-lua runs it: a global `obj` holding the resource, `hs` returned."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import lupa.lua51 as lua51
import pytest
import yaml

from statusvault.controller import crd
from statusvault.controller.conditions import PENDING, Reason
from statusvault.controller.intent import Phase
from statusvault.controller.restores import ResourceTarget
from statusvault.model import KubeObject, ResourceType

GITOPS = Path(__file__).resolve().parents[2] / "docs" / "gitops"


class StatusSink:
    """Just enough of KubeApi for ResourceTarget.write: the /status PUT answers with what was sent."""

    def replace(self, rt: ResourceType, namespace: str, name: str, body: KubeObject, sub: str = "") -> KubeObject:
        assert sub == "status"
        return body


def restore_with(phase: str | None, reason: str = "") -> dict[str, Any]:
    """A Restore (generation 1) with the status the controller writes for `phase` and `reason` (None: none yet)."""
    obj: dict[str, Any] = {"metadata": {"name": "r", "namespace": "ns", "uid": "u", "generation": 1}}
    if phase is None:
        return obj
    target = ResourceTarget(StatusSink(), "holder", obj)  # type: ignore[arg-type]
    target.write({"phase": phase, "reason": reason, "message": "msg"})
    return target.obj


def edited(obj: dict[str, Any]) -> dict[str, Any]:
    """`obj` after a spec change the controller has not seen yet (its status is for the previous generation)."""
    return {**obj, "metadata": {**obj["metadata"], "generation": obj["metadata"]["generation"] + 1}}


def argocd_health(obj: dict[str, Any]) -> dict[str, str]:
    """docs/gitops/argocd-health-restore.lua as Argo CD runs it: `obj` a global table, `hs` the answer."""
    lua = lua51.LuaRuntime()
    lua.globals().obj = lua.table_from(obj, recursive=True)
    hs = lua.execute((GITOPS / "argocd-health-restore.lua").read_text())
    return {"status": hs.status, "message": hs.message}


def kstatus(obj: dict[str, Any]) -> str:
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


WAITING = "waiting for the statusvault controller"
UNSEEN = "the controller has not seen this generation yet"
CASES = [
    (restore_with(None), "Progressing", WAITING, "InProgress"),
    (restore_with(Phase.IN_PROGRESS, Reason.RESTORING), "Progressing", "Restoring: msg", "InProgress"),
    (restore_with(PENDING, Reason.WAITING_FOR_LEASE), "Progressing", "WaitingForLease: msg", "InProgress"),
    (restore_with(Phase.COMPLETE, Reason.COMPLETED), "Healthy", "Completed: msg", "Current"),
    (edited(restore_with(Phase.COMPLETE, Reason.COMPLETED)), "Progressing", UNSEEN, "InProgress"),
    (restore_with(Phase.FAILED, Reason.PARTIALLY_RESTORED), "Degraded", "PartiallyRestored: msg", "Failed"),
    (restore_with(Phase.FAILED, Reason.BACKUP_NOT_FOUND), "Degraded", "BackupNotFound: msg", "Failed"),
    (restore_with(Phase.INVALID, Reason.INVALID_SPEC), "Degraded", "InvalidSpec: msg", "Failed"),
]


@pytest.mark.parametrize(("obj", "argo", "message", "flux"), CASES)
def test_argo_cd_and_flux_read_a_restore_as_its_conditions_say(obj, argo, message, flux):
    assert argocd_health(obj) == {"status": argo, "message": message}
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
