"""The world of the composition suites (tests/integration/test_compose*.py): three CRDs of a group of their own,
twelve objects in two namespaces and the cluster scope, a modifiers file with its Python twin for the reference
model (tests/refmodel.py), and what a row does to a cluster: reset it, read it back, fix what made a run fail."""

from __future__ import annotations

import base64
import copy
import dataclasses
import json
import time
from collections.abc import Callable
from typing import Any

from statusvault.errors import KubeApiError
from statusvault.kube.client import KubeClient
from statusvault.kube.discovery import discover
from statusvault.testing.fixtures import create_with_status, ensure_namespace, install_crds
from statusvault.vocabulary.kinds import CRDS, SECRETS
from tests import refmodel
from tests.builders import cr, crd, unique

RECORD = "statusvault.io/paused-by-restore"  # docs/how-to/fence-operators.md: what a pause added, on the object
HOLD = refmodel.Marker("annotation", "example.com/hold", "true")
HOLD_FIELD = refmodel.Marker("field", "/spec/hold", True)
PHASES = frozenset({"Ready", "Restored"})  # the only phases a strict Gizmo status may have
_OPEN = {"type": "object", "x-kubernetes-preserve-unknown-fields": True}
STRICT = {
    "type": "object",
    "properties": {
        "spec": _OPEN,
        "status": {**_OPEN, "properties": {"phase": {"type": "string", "enum": sorted(PHASES)}}},
    },
}


@dataclasses.dataclass(frozen=True)
class World:
    """Names that are this session's own, so the suites share a cluster with any other test."""

    group: str
    a: str  # the two namespaces backed up from
    b: str

    @classmethod
    def new(cls) -> World:
        return cls(f"{unique('cmp')}.example.com", unique("cmp-a"), unique("cmp-b"))

    @property
    def types(self) -> list[refmodel.Type]:
        """Gizmo: namespaced, with /status; Relic: namespaced, status in the body; Pool: cluster-scoped."""
        g = self.group
        return [
            refmodel.Type(f"gizmos.{g}", "Gizmo", True),
            refmodel.Type(f"relics.{g}", "Relic", True, subresource=False),
            refmodel.Type(f"pools.{g}", "Pool", False),
        ]

    @property
    def qualified(self) -> list[str]:
        return [t.qualified for t in self.types]

    def crds(self, strict: bool = False) -> list[dict[str, Any]]:
        """The CRDs; `strict`: Gizmo's schema admits only the phases Ready and Restored (a rule added after the
        backup, which some saved statuses break)."""
        g = self.group
        gizmo = crd(g, "Gizmo", schema=STRICT) if strict else crd(g, "Gizmo")
        return [gizmo, crd(g, "Relic", status=False), crd(g, "Pool", scope="Cluster")]

    def objects(self) -> list[dict[str, Any]]:
        """What is backed up: labels, statuses (some Ready, which the modifiers file rewrites), the opt-out and
        opt-in annotations, crossplane-shaped specs (--pause auto pauses those), one paused by its owner."""
        v, a, b = f"{self.group}/v1", self.a, self.b
        ready, pending, gold, silver = {"phase": "Ready"}, {"phase": "Pending"}, {"tier": "gold"}, {"tier": "silver"}
        provider = {"forProvider": {"region": "eu-west-1"}}
        creds, conn = self.secret_names  # what g-a1 and p-1 name (p-1 is cluster-scoped: its reference says where)
        out = [
            (a, cr(v, "Gizmo", "g-a1", spec={"size": 1, **provider, "credentialsSecretRef": {"name": creds}},
                   status={**ready, "id": "ga1"}, labels=gold)),
            (a, cr(v, "Gizmo", "g-a2", spec={"size": 2}, status={**ready, "id": "ga2"}, labels=silver,
                   annotations={"statusvault.io/restore-status": "false"})),
            (a, cr(v, "Gizmo", "g-a3", spec={"size": 3}, labels=gold)),
            (a, cr(v, "Gizmo", "g-a4", spec={"size": 4, **provider}, status={**pending, "id": "ga4"}, labels=gold,
                   annotations={"crossplane.io/paused": "true"})),
            (a, cr(v, "Relic", "r-a1", spec={"era": 1}, status={**ready, "id": "ra1"}, labels=gold)),
            (a, cr(v, "Relic", "r-a2", spec={"era": 2, **provider}, status={**pending, "id": "ra2"}, labels=silver)),
            (b, cr(v, "Gizmo", "g-b1", spec={"size": 5}, status={**ready, "id": "gb1"}, labels=gold)),
            (b, cr(v, "Gizmo", "g-b2", spec={"size": 6, **provider}, status={**ready, "id": "gb2"}, labels=silver)),
            (b, cr(v, "Relic", "r-b1", spec={"era": 3}, status={**ready, "id": "rb1"},
                   annotations={"statusvault.io/restore-status": "true"})),
            ("", cr(v, "Pool", "p-1", spec={"cap": 1, "connectionSecretRef": {"name": conn, "namespace": b}},
                    status={**ready, "id": "p1"}, labels=gold)),
            ("", cr(v, "Pool", "p-2", spec={"cap": 2}, status={**pending, "id": "p2"}, labels=silver)),
            ("", cr(v, "Pool", "p-3", spec={"cap": 3, **provider})),
        ]  # fmt: skip
        for ns, obj in out:
            if ns:
                obj["metadata"]["namespace"] = ns
        return [obj for _, obj in out]

    @property
    def secret_names(self) -> tuple[str, str]:
        """The Secrets the world's objects name (a backup --with-dependencies takes them): g-a1's, in a, and p-1's
        (cluster-scoped: its reference names namespace b)."""
        return f"{self.a}-creds", f"{self.b}-conn"

    def secrets(self) -> list[tuple[dict[str, Any], refmodel.Key]]:
        """Each Secret, with the object (as archived) whose reference brings it."""

        def secret(name: str, ns: str) -> dict[str, Any]:
            data = {"password": base64.b64encode(name.encode()).decode()}
            return {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": name, "namespace": ns}, "data": data}

        creds, conn = self.secret_names
        return [(secret(creds, self.a), (f"gizmos.{self.group}", self.a, "g-a1")),
                (secret(conn, self.b), (f"pools.{self.group}", "", "p-1"))]  # fmt: skip

    def existing(self, mapping: dict[str, str]) -> list[dict[str, Any]]:
        """Objects already in the target, where the restore would put theirs: four drifted from the backup and
        one the backup does not know."""
        v, a, b = f"{self.group}/v1", mapping.get(self.a, self.a), mapping.get(self.b, self.b)
        drift = {"tier": "bronze", "drift": "yes"}
        out = [
            (a, cr(v, "Gizmo", "g-a1", spec={"size": 99}, status={"phase": "Drifted"}, labels=drift)),
            (a, cr(v, "Relic", "r-a2", spec={"era": 99}, status={"phase": "Drifted"}, labels=drift)),
            (b, cr(v, "Relic", "r-b1", spec={"era": 99}, status={"phase": "Drifted"}, labels=drift)),
            ("", cr(v, "Pool", "p-2", spec={"cap": 99}, status={"phase": "Drifted"}, labels=drift)),
            (a, cr(v, "Gizmo", "g-other", spec={"size": 0}, status={"phase": "Mine"})),
        ]
        for ns, obj in out:
            if ns:
                obj["metadata"]["namespace"] = ns
        return [obj for _, obj in out]

    def order(self) -> str:
        """An --order file: relics (named by no group) first, then gizmos and a gate every restored object passes, then
        pools (tests/refmodel.py: a gated group's paused objects are unpaused before its gate)."""
        return f"""version: v1
groups:
- name: gizmos
  resources: [gizmos.{self.group}]
  gate: {{expression: .metadata.name, timeout: 60s}}
- name: pools
  resources: [pools.{self.group}]
"""

    def modifiers(self) -> str:
        """A Velero resource-modifier file; `modify` is the same in Python, for the model."""
        return f"""version: v1
resourceModifierRules:
- conditions:
    groupResource: "*.{self.group}"
    matches:
    - path: /status/phase
      value: Ready
  patches:
  - operation: add
    path: /spec/restored
    value: "true"
  statusPatches:
  - operation: replace
    path: /status/phase
    value: Restored
- conditions:
    groupResource: gizmos.{self.group}
    namespaces: [{self.a}]
  mergePatches:
  - patchData: |
      {{"metadata": {{"labels": {{"tier": null, "moved": "yes"}}}}}}
"""

    def modify(self, obj: dict[str, Any], source_ns: str) -> dict[str, Any]:
        """The modifiers file, by hand: Ready objects get spec.restored and phase Restored; Gizmos backed up
        from namespace a lose their tier label and are labelled moved."""
        if (obj.get("status") or {}).get("phase") == "Ready":
            obj["spec"]["restored"] = True
            obj["status"]["phase"] = "Restored"
        if obj["kind"] == "Gizmo" and source_ns == self.a:
            labels = obj["metadata"].setdefault("labels", {})
            labels.pop("tier", None)
            labels["moved"] = "yes"
        return obj


def create_all(kube: KubeClient, objects: list[dict[str, Any]]) -> None:
    """Create objects with their status, as their operator would have left them."""
    d = discover(kube)
    for obj in objects:
        ns = obj["metadata"].get("namespace")
        if ns:
            ensure_namespace(kube, ns)
        create_with_status(kube, d, obj)


def observe(kube: KubeClient, world: World) -> refmodel.Target:
    """The world's types the cluster serves, and every object of them, as the reference model describes them."""
    d = discover(kube)
    served = {q for q in world.qualified if d.by_qualified(q) is not None}
    objects = {}
    for q in sorted(served):
        rt = d.by_qualified(q)
        assert rt is not None
        for page in kube.list_pages(rt):
            for obj in page:
                meta = obj["metadata"]
                objects[(q, meta.get("namespace", ""), meta["name"])] = _live(obj)
    for secret in _secrets(kube, world):
        meta = secret["metadata"]
        objects[(SECRETS.qualified, meta["namespace"], meta["name"])] = refmodel.secret_live(secret)
    return refmodel.Target(served, objects)


def _secrets(kube: KubeClient, world: World) -> list[dict[str, Any]]:
    """The world's Secrets, wherever a restore put them."""
    return [o for page in kube.list_pages(SECRETS) for o in page if o["metadata"]["name"] in world.secret_names]


def _live(obj: dict[str, Any]) -> refmodel.Live:
    """An object as the model sees it; a pause the restore left is taken off the annotations or the spec (the
    record says which) and reported as `paused_with`."""
    meta = obj["metadata"]
    annotations, spec = dict(meta.get("annotations") or {}), copy.deepcopy(obj.get("spec"))
    paused = None
    if RECORD in annotations:
        record = json.loads(annotations.pop(RECORD))
        if record["kind"] == "annotation":
            paused = refmodel.Marker("annotation", record["key"], annotations.pop(record["key"], None))
        else:  # a field one level under spec, as the suites use
            paused = refmodel.Marker("field", record["key"], spec.pop(record["key"].split("/")[-1], None))
    return refmodel.Live(spec, obj.get("status"), meta.get("labels") or {}, annotations, paused)


CRD_SETS = ("all", "none", "gizmos", "strict")  # what a target serves: strict is all, Gizmo's status stricter


def reset(kube: KubeClient, world: World, crds: str = "all") -> None:
    """No object of the world's types anywhere; its CRDs as `crds` (one of CRD_SETS) says, and discovery too."""
    wanted = {c["metadata"]["name"]: c for c in world.crds(strict=crds == "strict")}
    keep = {"all": set(wanted), "strict": set(wanted), "gizmos": set(world.qualified[:1]), "none": set()}[crds]
    gone = [
        n for n, body in wanted.items() if (live := kube.get(CRDS, None, n)) and (n not in keep or _differs(live, body))
    ]
    for name in gone:
        kube.delete(CRDS, None, name)
    _wait(lambda: all(kube.get(CRDS, None, n) is None for n in gone), "CRDs deleted")
    _wait(lambda: not observe(kube, world).served & set(gone), "CRDs out of discovery")
    d = install_crds(kube, [wanted[n] for n in sorted(keep)]) if keep else discover(kube)
    for q in keep:
        rt = d.by_qualified(q)
        assert rt is not None
        for page in kube.list_pages(rt):
            for obj in page:
                kube.delete(rt, obj["metadata"].get("namespace"), obj["metadata"]["name"])
    for secret in _secrets(kube, world):
        kube.delete(SECRETS, secret["metadata"]["namespace"], secret["metadata"]["name"])
    _wait(lambda: not observe(kube, world).objects, "objects gone")


def fix(kube: KubeClient, world: World) -> None:
    """What a user does after a restore that could not finish: install the CRDs the target lacked and take back
    the rule its statuses broke (Gizmo's schema opened in place), keeping the objects there."""
    d = install_crds(kube, world.crds())
    gizmos = world.qualified[0]
    live = kube.get(CRDS, None, gizmos)
    opened = world.crds()[0]["spec"]["versions"][0]["schema"]
    if live["spec"]["versions"][0]["schema"] != opened:
        live["spec"]["versions"][0]["schema"] = opened
        kube.replace(CRDS, None, gizmos, live)
    rt = d.by_qualified(gizmos)
    assert rt is not None
    probe = kube.create(rt, world.a, {"apiVersion": rt.api_version, "kind": "Gizmo", "metadata": {"name": "probe"}})
    try:  # the server takes a schema change in a moment: until then it still refuses another phase
        _wait(lambda: _admits(kube, rt, world.a, probe, {"phase": "Pending"}), "the opened schema in force")
    finally:
        kube.delete(rt, world.a, "probe")
        _wait(lambda: kube.get(rt, world.a, "probe") is None, "probe gone")


def _admits(kube: KubeClient, rt: Any, ns: str, obj: dict[str, Any], status: dict[str, Any]) -> bool:
    try:
        kube.replace(rt, ns, obj["metadata"]["name"], {**obj, "status": status}, dry_run=True, sub="status")
    except KubeApiError as e:
        if e.code != 422:
            raise
        return False
    return True


def _differs(live: dict[str, Any], body: dict[str, Any]) -> bool:
    """Whether a live CRD's schema is not the one wanted."""
    return bool(live["spec"]["versions"][0]["schema"] != body["spec"]["versions"][0]["schema"])


def timer(request: Any, what: str) -> Callable[[], None]:
    """Started now; called at the end of a module, it prints what ran and how long it took (not captured)."""
    start = time.monotonic()

    def done() -> None:
        plugins = request.config.pluginmanager
        terminal, capture = plugins.get_plugin("terminalreporter"), plugins.get_plugin("capturemanager")
        if terminal is not None and capture is not None:
            with capture.global_and_fixture_disabled():
                terminal.write_line(f"\n{what} in {time.monotonic() - start:.0f}s (set-up included)")

    return done


def _wait(done: Any, what: str, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while not done():
        assert time.monotonic() < deadline, f"timed out waiting: {what}"
        time.sleep(0.1)
