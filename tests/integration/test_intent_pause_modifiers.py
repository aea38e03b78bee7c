"""Restore intents take `restore --pause`'s options and a `modifiers` ConfigMap, reconciled by `controller run`
against the real API server. The controller's requests go through a proxy that records them, so a test sees
each create body (created paused?) and every write (nothing outside the controller's namespace?)."""

from __future__ import annotations

import datetime as dt
import json
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from statusvault.restore.core.pausemarkers import RECORD
from statusvault.testing.fixtures import ensure_namespace, install_crds
from statusvault.vocabulary.kinds import CONFIGMAPS, EVENTS, NAMESPACES
from tests.builders import REGION_URL, cr, crd, kc_status, region_move, unique

pytestmark = pytest.mark.version_neutral(
    "restore intents' options reuse the restore's, guarded by crs/ on every version"
)

GROUP = "rds.aws.upbound.io"  # a Crossplane provider's group: --pause auto picks the crossplane.io/paused annotation
INSTANCES = f"instances.{GROUP}"
PAUSED = "crossplane.io/paused"
WIDGET = "example.com/v1"
KC = "xyz.example.com/v1"
WRITES = ("POST", "PUT", "PATCH", "DELETE")


class Requests:
    """What the controller sent through the proxy."""

    def __init__(self) -> None:
        self.seen: list[tuple[str, str, bytes | None]] = []

    def __call__(self, method: str, path: str, body: bytes | None) -> None:
        self.seen.append((method, path.split("?")[0], body))

    def created(self, resource: str) -> dict[str, dict[str, Any]]:
        """The create bodies sent for a resource (its plural), by object name."""
        bodies = [json.loads(b or b"{}") for m, p, b in self.seen if m == "POST" and p.endswith("/" + resource)]
        return {b["metadata"]["name"]: b for b in bodies}

    def writes_outside(self, namespace: str) -> list[str]:
        return [f"{m} {p}" for m, p, _ in self.seen if m in WRITES and f"/namespaces/{namespace}/" not in p]


@pytest.fixture
def ctl(kube) -> Iterator[str]:
    """The controller's namespace: intents, their status ConfigMaps, modifiers ConfigMaps."""
    name = unique("ctl")
    ensure_namespace(kube, name)
    yield name
    kube.delete(NAMESPACES, None, name)


@pytest.fixture
def target(kube) -> Iterator[str]:
    name = unique("dst")
    yield name
    kube.delete(NAMESPACES, None, name)


@pytest.fixture
def reconcile(run, proxied, ctl) -> Callable[[], int]:
    """One `controller run --once` pass over `ctl`, through a recording proxy; returns the restores it ran."""
    proxy, kubeconfig = proxied(0.0)
    requests = Requests()
    proxy.before = requests

    def _once() -> int:
        result = run("controller", "run", "-n", ctl, "--once", kubeconfig=kubeconfig)
        assert result.code == 0, result.err
        return int(result.out.split(": ")[1].split()[0])

    _once.requests = requests  # type: ignore[attr-defined]
    return _once


@pytest.fixture(scope="module")
def instances(kube):
    return install_crds(kube, [crd(GROUP, "Instance")])


def intent(kube, ns: str, name: str, **data: str) -> None:
    body = {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": name, "labels": {"statusvault.io/restore-intent": "true"}},
        "data": data,
    }
    live = kube.get(CONFIGMAPS, ns, name)
    if live is None:
        kube.create(CONFIGMAPS, ns, body)
    else:
        kube.replace(CONFIGMAPS, ns, name, {**live, "data": data})


def status_of(kube, ns: str, name: str) -> dict[str, str]:
    return dict((kube.get(CONFIGMAPS, ns, f"{name}-status") or {}).get("data") or {})


def events(kube, ns: str, name: str) -> list[tuple[str, str]]:
    found = [e for page in kube.list_pages(EVENTS, ns) for e in page if e["involvedObject"]["name"] == name]
    return sorted((e["reason"], e["message"]) for e in found)


def saved(i: int) -> dict[str, str]:
    return {"externalID": f"db-{i:04d}", "endpoint": f"db{i}.rds.example.net"}


def managed(make, instances, namespace: str, n: int) -> None:
    """n managed resources with their external IDs; db-0 is paused by its owner in the backup."""
    for i in range(n):
        annotations = {"team": "a", **({PAUSED: "true"} if i == 0 else {})}
        body = cr(
            f"{GROUP}/v1", "Instance", f"db-{i}", spec={"forProvider": {}}, status=saved(i), annotations=annotations
        )
        make(body, namespace, discovery=instances)


def test_pause_auto_creates_every_object_paused_and_releases_exactly_what_it_paused(
    run, kube, instances, make, namespace, ctl, target, reconcile
):
    managed(make, instances, namespace, 4)
    make(cr(WIDGET, "Widget", "w", status={"ready": True}), namespace)  # no profile knows it: not paused
    assert run("backup", "b", "-n", namespace).code == 0
    intent(
        kube, ctl, "r", backup="b", namespaces=namespace, pause="auto", **{"namespace-mapping": f"{namespace}:{target}"}
    )

    assert reconcile() == 1
    status = status_of(kube, ctl, "r")
    assert status["phase"] == "Complete", status["message"]
    assert (status["unpaused"], status["leftPaused"], status["withoutStatus"]) == ("3", "0", "0")
    created = reconcile.requests.created("instances")
    assert sorted(created) == ["db-0", "db-1", "db-2", "db-3"]
    for name, body in created.items():
        assert body["metadata"]["annotations"][PAUSED] == "true", f"{name} was created paused"
        assert (RECORD in body["metadata"]["annotations"]) == (name != "db-0"), "db-0 was paused by its owner"
    assert RECORD not in (reconcile.requests.created("widgets")["w"]["metadata"].get("annotations") or {})
    rt = instances.by_qualified(INSTANCES)
    for i in range(4):
        live = kube.get(rt, target, f"db-{i}")
        assert live["status"] == saved(i)
        expected = {"team": "a", PAUSED: "true"} if i == 0 else {"team": "a"}
        assert live["metadata"]["annotations"] == expected, "only what the restore added was taken away"


def test_keep_paused_keeps_them_until_the_intent_drops_it(
    run, kube, instances, make, namespace, ctl, target, reconcile
):
    managed(make, instances, namespace, 3)
    assert run("backup", "b", "-n", namespace).code == 0
    data = {"backup": "b", "namespaces": namespace, "pause": "auto", "namespace-mapping": f"{namespace}:{target}"}
    intent(kube, ctl, "r", **data, **{"keep-paused": INSTANCES})

    assert reconcile() == 1
    status = status_of(kube, ctl, "r")
    assert (status["phase"], status["unpaused"], status["leftPaused"]) == ("Complete", "0", "2")
    assert "2 left paused as asked (drop keep-paused from the intent to release them)" in status["message"]
    rt = instances.by_qualified(INSTANCES)
    for i in (1, 2):
        live = kube.get(rt, target, f"db-{i}")
        assert live["status"] == saved(i) and live["metadata"]["annotations"][PAUSED] == "true"
        assert RECORD in live["metadata"]["annotations"]
    assert reconcile() == 0, "restored: nothing to do while the intent is unchanged"

    intent(kube, ctl, "r", **data)  # the phased resume: release what was kept
    reconcile.requests.seen.clear()
    assert reconcile() == 1
    status = status_of(kube, ctl, "r")
    assert (status["phase"], status["unpaused"], status["leftPaused"]) == ("Complete", "2", "0"), status["message"]
    assert reconcile.requests.created("instances") == {}, "the same restore, finished: nothing created again"
    for i in range(3):
        live = kube.get(rt, target, f"db-{i}")
        assert live["status"] == saved(i)
        assert live["metadata"]["annotations"] == ({"team": "a", PAUSED: "true"} if i == 0 else {"team": "a"})


def test_a_generic_pause_field_is_set_on_create_and_put_back_as_it_was(
    run, kube, crds, make, namespace, ctl, target, reconcile
):
    make(cr(WIDGET, "Widget", "a", spec={"size": 1}, status={"ready": True}), namespace)
    make(cr(WIDGET, "Widget", "b", spec={"suspend": False}, status={"ready": True}), namespace)
    make(cr(WIDGET, "Widget", "c", spec={"suspend": True}, status={"ready": True}), namespace)  # its owner's
    assert run("backup", "b", "-n", namespace).code == 0
    intent(
        kube, ctl, "r", backup="b", namespaces=namespace, **{"namespace-mapping": f"{namespace}:{target}"},
        **{"pause-field": "/spec/suspend=true", "pause-resources": "widgets.example.com"},
    )  # fmt: skip

    assert reconcile() == 1
    status = status_of(kube, ctl, "r")
    assert (status["phase"], status["unpaused"], status["leftPaused"]) == ("Complete", "2", "0"), status["message"]
    created = reconcile.requests.created("widgets")
    assert {n: b["spec"]["suspend"] for n, b in created.items()} == {"a": True, "b": True, "c": True}
    widgets = crds.resolve("widgets.example.com")
    live = {n: kube.get(widgets, target, n) for n in "abc"}
    assert {n: o["spec"] for n, o in live.items()} == {
        "a": {"size": 1},
        "b": {"suspend": False},
        "c": {"suspend": True},
    }
    assert all(o["status"] == {"ready": True} and not o["metadata"].get("annotations") for o in live.values())


def test_a_generic_pause_annotation_replaces_a_value_and_restores_it(
    run, kube, crds, make, namespace, ctl, target, reconcile
):
    hold = "example.com/hold"
    make(cr(KC, "KubernetesCluster", "on", status=kc_status(1), annotations={hold: "false"}), namespace)
    make(cr(KC, "KubernetesCluster", "off", status=kc_status(2)), namespace)
    assert run("backup", "b", "-n", namespace, "--include-resources", "kc").code == 0
    intent(
        kube, ctl, "r", backup="b", **{"namespace-mapping": f"{namespace}:{target}"},
        **{"pause-annotation": f"{hold}=true", "pause-resources": "kubernetesclusters.xyz.example.com"},
    )  # fmt: skip

    assert reconcile() == 1
    assert status_of(kube, ctl, "r")["phase"] == "Complete"
    created = reconcile.requests.created("kubernetesclusters")
    assert {n: b["metadata"]["annotations"][hold] for n, b in created.items()} == {"on": "true", "off": "true"}
    on, off = (kube.get(crds.resolve("kc"), target, n) for n in ("on", "off"))
    assert on["metadata"]["annotations"] == {hold: "false"} and not off["metadata"].get("annotations")
    assert (on["status"], off["status"]) == (kc_status(1), kc_status(2))


RULES = region_move()


def modifiers_configmap(kube, ns: str, name: str, **data: str) -> None:
    kube.create(CONFIGMAPS, ns, {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name}, "data": data})


def test_an_intent_applies_the_modifiers_its_configmap_holds(run, kube, crds, make, namespace, ctl, target, reconcile):
    make(cr(KC, "KubernetesCluster", "prod", spec={"region": "eu-west-1"}, status=kc_status(1)), namespace)
    make(cr(KC, "KubernetesCluster", "us", spec={"region": "us-east-1"}, status=kc_status(2)), namespace)
    assert run("backup", "b", "-n", namespace).code == 0
    modifiers_configmap(kube, ctl, "rules", **{"modifiers.yaml": RULES, "README": "the key modifiers.yaml is read"})
    intent(kube, ctl, "r", backup="b", modifiers="rules", **{"namespace-mapping": f"{namespace}:{target}"})

    assert reconcile() == 1
    assert status_of(kube, ctl, "r")["phase"] == "Complete"
    prod, us = (kube.get(crds.resolve("kc"), target, n) for n in ("prod", "us"))
    assert prod["spec"] == {"region": "eu-central-1"}
    assert prod["status"] == {**kc_status(1), "apiServerURL": REGION_URL}
    assert (us["spec"], us["status"]) == ({"region": "us-east-1"}, kc_status(2)), "its condition did not match"


def test_a_missing_or_bad_modifiers_configmap_fails_the_intent_and_writes_nothing(
    run, kube, crds, make, namespace, ctl, target, reconcile
):
    make(cr(KC, "KubernetesCluster", "prod", spec={"region": "eu-west-1"}, status=kc_status(1)), namespace)
    assert run("backup", "b", "-n", namespace).code == 0
    mapping = {"namespace-mapping": f"{namespace}:{target}"}
    strategic = RULES.replace("  statusPatches:", "  strategicPatches:\n  - patchData: '{}'\n  statusPatches:")
    modifiers_configmap(kube, ctl, "strategic", rules=strategic)
    modifiers_configmap(kube, ctl, "two-keys", a=RULES, b=RULES)
    for cm in ("no-such", "strategic", "two-keys"):
        intent(kube, ctl, f"r-{cm}", backup="b", modifiers=cm, **mapping)

    assert reconcile() == 3
    expected = {
        "r-no-such": f"modifiers ConfigMap {ctl}/no-such does not exist: create it",
        "r-strategic": "rule 1 (resourceModifierRules[0]).strategicPatches: not supported",
        "r-two-keys": f"modifiers ConfigMap {ctl}/two-keys must hold one key (or modifiers.yaml), not 2",
    }
    for name, why in expected.items():
        status = status_of(kube, ctl, name)
        assert status["phase"] == "Failed" and status["message"].startswith("restore of b failed: "), status
        assert why in status["message"] and "\n" not in status["message"]
        assert "nextAttemptAt" in status and "objects" not in status, "no restore ran"
        assert ("RestoreFailed", f"{status['message']}; next attempt at {status['nextAttemptAt']}") in events(
            kube, ctl, name
        )
    assert reconcile.requests.writes_outside(ctl) == [], "nothing but the controller's own records was written"
    assert kube.get(NAMESPACES, None, target) is None
    assert reconcile() == 0, "backing off"

    # A Failed intent is retried (an Invalid one would wait for the intent to change): once the ConfigMap
    # exists and the backoff is over, the same intent restores.
    modifiers_configmap(kube, ctl, "no-such", **{"rules.yaml": RULES})
    status_cm = kube.get(CONFIGMAPS, ctl, "r-no-such-status")
    past = (dt.datetime.now(dt.UTC) - dt.timedelta(seconds=1)).strftime("%Y-%m-%dT%H:%M:%SZ")
    kube.replace(
        CONFIGMAPS, ctl, "r-no-such-status", {**status_cm, "data": {**status_cm["data"], "nextAttemptAt": past}}
    )
    assert reconcile() == 1
    assert status_of(kube, ctl, "r-no-such")["phase"] == "Complete"
    assert kube.get(crds.resolve("kc"), target, "prod")["spec"] == {"region": "eu-central-1"}
