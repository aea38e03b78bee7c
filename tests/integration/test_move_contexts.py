"""`statusvault move --from-context A --to-context B` with one kubeconfig holding both contexts. Each context
reaches the test cluster through a recording proxy of its own (two servers to the move, one cluster), and the
move goes from one namespace to another (--namespace-mapping), so a test sees which side each request took."""

from __future__ import annotations

import json
import textwrap
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from statusvault.errors import ExitStatus
from statusvault.testing.cluster import ADMIN_TOKEN
from statusvault.vocabulary.kinds import NAMESPACES
from tests.builders import REGION_URL, cr, kc_status, region_move, unique

pytestmark = pytest.mark.version_neutral("which kubeconfig context each side uses is the client's")

KC = "xyz.example.com/v1"
HOLD = "example.com/hold"
PAUSE = ("--pause-annotation", f"{HOLD}=true", "--pause-resources", "kubernetesclusters.xyz.example.com")
WRITES = ("POST", "PUT", "PATCH", "DELETE")


class Requests:
    def __init__(self) -> None:
        self.seen: list[tuple[str, str]] = []

    def __call__(self, method: str, path: str, body: bytes | None) -> None:
        self.seen.append((method, path.split("?")[0]))

    def writes(self) -> list[str]:
        return [f"{m} {p}" for m, p in self.seen if m in WRITES]


@pytest.fixture
def contexts(proxied, cluster, tmp_path) -> tuple[Path, dict[str, Requests]]:
    """A kubeconfig with contexts `old` and `new` (each through its own proxy, whose requests are recorded) and a
    current context `direct` that neither side of the move may use."""
    seen: dict[str, Requests] = {}
    servers = {"direct": cluster.server}
    for name in ("old", "new"):
        proxy, _ = proxied(0.0)
        proxy.before = seen.setdefault(name, Requests())
        servers[name] = proxy.url
    config = {
        "apiVersion": "v1",
        "kind": "Config",
        "current-context": "direct",
        "clusters": [
            {"name": n, "cluster": {"server": s, "insecure-skip-tls-verify": True}} for n, s in servers.items()
        ],
        "users": [{"name": "admin", "user": {"token": ADMIN_TOKEN}}],
        "contexts": [{"name": n, "context": {"cluster": n, "user": "admin"}} for n in servers],
    }
    path = tmp_path / "kubeconfig-two-contexts"
    path.write_text(yaml.safe_dump(config))
    return path, seen


@pytest.fixture
def target(kube) -> Iterator[str]:
    name = unique("dst")
    yield name
    kube.delete(NAMESPACES, None, name)


def modifiers(tmp_path: Path, text: str) -> str:
    path = tmp_path / "modifiers.yaml"
    path.write_text(textwrap.dedent(text))
    return str(path)


def in_namespace(requests: list[str], namespace: str) -> list[str]:
    return [r for r in requests if f"/namespaces/{namespace}/" in r]


def test_move_uses_each_sides_context_and_applies_its_modifiers(
    run, kube, crds, make, namespace, target, contexts, tmp_path
):
    kubeconfig, seen = contexts
    make(cr(KC, "KubernetesCluster", "prod", spec={"region": "eu-west-1"}, status=kc_status(1)), namespace)
    make(cr(KC, "KubernetesCluster", "us", spec={"region": "us-east-1"}, status=kc_status(2)), namespace)
    result = run(
        "move", "--from-context", "old", "--to-context", "new", "-n", namespace,
        "--namespace-mapping", f"{namespace}:{target}", *PAUSE,
        "--modifiers", modifiers(tmp_path, region_move(namespaces=namespace)), "-o", "json",
        kubeconfig=kubeconfig,
    )  # fmt: skip

    assert result.code == ExitStatus.SUCCESS, result.out + result.err
    report = json.loads(result.out)
    assert (report["sourcePaused"], report["verifyProblems"], report["restore"]["unpaused"]) == (2, [], 2)
    old, new = seen["old"].writes(), seen["new"].writes()
    assert sorted(old) == sorted(
        f"PATCH /apis/xyz.example.com/v1/namespaces/{namespace}/kubernetesclusters/{n}" for n in ("prod", "us")
    ), "the source's context paused the source, and wrote nothing else"
    created = [w for w in new if w.startswith("POST ") and w.endswith("/kubernetesclusters")]
    assert created == [f"POST /apis/xyz.example.com/v1/namespaces/{target}/kubernetesclusters"] * 2
    assert in_namespace(new, namespace) == [], "the target's context never wrote into the source"
    elsewhere = {w for w in new if f"/namespaces/{target}/" not in w}
    assert elsewhere <= {"POST /api/v1/namespaces"}, "the target's context wrote only into the target namespace"

    kc = crds.resolve("kc")
    moved_prod, moved_us = (kube.get(kc, target, n) for n in ("prod", "us"))
    assert moved_prod["spec"] == {"region": "eu-central-1"}, "--modifiers applied"
    assert moved_prod["status"] == {**kc_status(1), "apiServerURL": REGION_URL}
    assert (moved_us["spec"], moved_us["status"]) == ({"region": "us-east-1"}, kc_status(2))
    assert not moved_prod["metadata"].get("annotations"), "unpaused in the target"
    for name, region in (("prod", "eu-west-1"), ("us", "us-east-1")):
        source = kube.get(kc, namespace, name)
        assert source["metadata"]["annotations"][HOLD] == "true", "the source stays paused"
        assert source["spec"] == {"region": region}, "the modifiers changed only the target's copy"


def test_a_bad_modifiers_file_stops_the_move_before_either_side_is_touched(
    run, kube, crds, make, namespace, target, contexts, tmp_path
):
    kubeconfig, seen = contexts
    make(cr(KC, "KubernetesCluster", "prod", spec={"region": "eu-west-1"}, status=kc_status(1)), namespace)
    bad = region_move(namespaces=namespace).replace(
        "operation: replace\n    path: /spec/region", "operation: swap\n    path: /spec/region"
    )
    result = run(
        "move", "--from-context", "old", "--to-context", "new", "-n", namespace,
        "--namespace-mapping", f"{namespace}:{target}", *PAUSE, "--modifiers", modifiers(tmp_path, bad),
        kubeconfig=kubeconfig,
    )  # fmt: skip

    assert result.code == ExitStatus.USAGE
    assert "rule 1 (resourceModifierRules[0]).patches[0].operation: unknown operation 'swap'" in result.err
    assert seen["old"].writes() == [] and seen["new"].writes() == []
    assert not kube.get(crds.resolve("kc"), namespace, "prod")["metadata"].get("annotations"), "not paused"
    assert kube.get(NAMESPACES, None, target) is None


def test_a_context_the_kubeconfig_lacks_is_refused(run, namespace, contexts):
    kubeconfig, seen = contexts
    result = run("move", "--from-context", "old", "--to-context", "nowhere", "-n", namespace, kubeconfig=kubeconfig)
    assert result.code == ExitStatus.USAGE and "kubeconfig context 'nowhere' not found" in result.err
    assert seen["old"].writes() == []
