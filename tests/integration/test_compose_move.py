"""Composition of `statusvault move`'s options: every pair of values, from this cluster to a second one, held to the
reference model's move (tests/refmodel.py): what is paused or deleted in the source, what arrives in the target
(unpaused, with its status), and the exit code; a move that stops part-way is fixed and run again; --fence scales
the target's operator down and back (or leaves it, excluded); -o json's verdict says what the exit code says,
--strict with --delete-source included. 18 rows, 50 s (the second cluster's start aside)."""

from __future__ import annotations

import dataclasses
import json
import os
from collections.abc import Iterator
from typing import Any

import pytest

from statusvault.errors import ExitStatus
from statusvault.kube.client import KubeClient
from statusvault.kube.discovery import discover
from statusvault.kube.transport import load_transport
from statusvault.testing.fixtures import ensure_namespace
from statusvault.vocabulary.kinds import CRDS, NAMESPACES
from tests import refmodel
from tests.builders import unique
from tests.compose import PHASES, World, create_all, fix, observe, reset, timer
from tests.composeopts import Allowed, Context, args_of, model_options
from tests.integration.test_compose import _operator, deployment, differences, fenced_by
from tests.pairwise import Row, pairwise, sampled

pytestmark = pytest.mark.version_neutral(
    "move's option combinations: no option asks the server anything version-specific"
)

PARAMS: dict[str, tuple[Any, ...]] = {
    "namespace": ("a", "a,b"),  # always given: a move of every namespace would take other tests' objects too
    "include": (None, "gizmos+pools", "relics"),  # resource.group: a Kind is ambiguous among the session's worlds
    "exclude": (None, "relics"),
    "selector": (None, "tier=gold"),
    "name": (None, "g-*,*1"),
    "cluster": (None, "on", "off"),
    "mapping": (None, "a"),
    "pause": ("auto", "annotation", "field"),  # --pause auto is move's default
    "modifiers": (False, True),
    "delete_source": (False, True),
    "fence": (None, "auto", "auto+exclude"),  # the target's operator may write the world's status (its RBAC)
    "target": ("all", "none", "strict"),  # the world's CRDs in the target cluster (tests/compose.py CRD_SETS)
    "strict": (False, True),  # with delete_source: judged before anything in the source is deleted
}


def own_types_only(row: Row) -> bool:
    """--include-cluster-resources only with the world's types named: else every cluster-scoped custom resource
    of the session cluster would move."""
    return row.get("cluster") != "on" or "include" not in row or row["include"] is not None


allowed = Allowed(PARAMS, own_types_only)
ROWS = pairwise(PARAMS, allowed)
if os.environ.get("STATUSVAULT_COMPOSE_SAMPLE"):  # N[:SEED]: N random rows instead, to look past pairs
    count, _, seed = os.environ["STATUSVAULT_COMPOSE_SAMPLE"].partition(":")
    ROWS = sampled(PARAMS, allowed, int(count), int(seed or 0))


@dataclasses.dataclass
class Sides:
    world: World
    source: KubeClient
    target: KubeClient
    modifiers: str
    operator: str  # NAMESPACE/deployment/NAME in the target


@pytest.fixture(scope="module")
def sides(kube, target, tmp_path_factory, request) -> Iterator[Sides]:
    timed = timer(request, f"move composition: {len(ROWS)} rows")
    world = World.new()
    modifiers = tmp_path_factory.mktemp("move") / "modifiers.yaml"
    modifiers.write_text(world.modifiers())
    target_kube = KubeClient(load_transport(str(target.kubeconfig)))
    for k in (kube, target_kube):
        reset(k, world)
        ensure_namespace(k, world.a)
        ensure_namespace(k, world.b)
    ops = _operator(target_kube, world.group)
    yield Sides(world, kube, target_kube, str(modifiers), f"{ops}/deployment/op")
    d, rbac = discover(target_kube), "rbac.authorization.k8s.io"
    target_kube.delete(d.resolve(f"clusterrolebindings.{rbac}"), None, ops)
    target_kube.delete(d.resolve(f"clusterroles.{rbac}"), None, ops)
    target_kube.delete(NAMESPACES, None, ops)
    for k in (kube, target_kube):
        for ns in (world.a, world.b):
            k.delete(NAMESPACES, None, ns)
        for q in world.qualified:  # no Kind of the world makes a later test's name ambiguous
            k.delete(CRDS, None, q)
    timed()


def describe(row: Row) -> str:
    return " ".join(f"{k}={v}" for k, v in row.items() if v != PARAMS[k][0] or k == "namespace")


@pytest.mark.parametrize("row", ROWS, ids=[f"m{i:02d}" for i in range(len(ROWS))])
def test_a_move_with_each_pair_of_option_values_does_what_the_model_says(row, sides, run, cluster, target):
    world = sides.world
    ctx = Context(
        world, modifiers=sides.modifiers, operator=sides.operator, mapped=(unique("cmp-ma"), unique("cmp-mb"))
    )
    reset(sides.source, world)
    create_all(sides.source, world.objects())
    reset(sides.target, world, row["target"])
    source_objects = listed(sides.source, world)
    before, operator = observe(sides.target, world), deployment(sides.target, ctx)
    if row["target"] == "strict":
        before.phases = {world.qualified[0]: PHASES}
    args = [
        "move", "--from-kubeconfig", str(cluster.kubeconfig), "--to-kubeconfig", str(target.kubeconfig),
        "--storage", str(run.storage / unique("move")), "-o", "json",
        *(a for param, value in row.items() for a in args_of(param, value, ctx)),
    ]  # fmt: skip

    result = run(*args)

    opts = model_options(row, ctx)
    expected = refmodel.move(source_objects, world.types, opts, before, delete_source=row["delete_source"])
    where = f"row: {describe(row)}\nstderr: {result.err}"
    assert result.code == expected.code, where
    assert differences(expected.source.objects, observe(sides.source, world).objects) == {}, where
    moved = observe(sides.target, world)
    assert moved.served == expected.target.served, where
    assert differences(expected.target.objects, moved.objects) == {}, where
    report = json.loads(result.out)
    assert report["verdict"]["outcome"] == OUTCOMES[result.code], where  # -o json says what the exit code says
    assert fence_action(report["restore"]["fence"], ctx) == FENCED[row["fence"]], where
    scaled = fenced_by(json.dumps(report["restore"]), ctx)
    assert (deployment(sides.target, ctx) == operator) is not scaled, "scaled down and back only when fenced so"
    assert deployment(sides.target, ctx)[1:] == (1, None), "the operator is scaled back, its annotation gone"
    items = {(i["resource"], i["namespace"], i["name"]): i["result"] for i in report["restore"]["items"]}
    assert {k: v for k, v in items.items() if k[0] in world.qualified} == expected.results, where
    assert report["sourcePaused"] == expected.source_paused, where
    if expected.code == ExitStatus.SUCCESS:
        assert report["verifyProblems"] == [], where
        return
    fix(sides.target, world)  # docs/move.md: a move that stops part-way resumes with the same command
    again = run(*args)
    right = dataclasses.replace(before, served=set(world.qualified), phases={})
    expected = refmodel.move(source_objects, world.types, opts, right, delete_source=row["delete_source"])
    where = f"run again after the fix: {describe(row)}\nstderr: {again.err}"
    assert again.code == expected.code == ExitStatus.SUCCESS, where
    assert differences(expected.source.objects, observe(sides.source, world).objects) == {}, where
    assert differences(expected.target.objects, observe(sides.target, world).objects) == {}, where


FENCED = {None: None, "auto": "fenced", "auto+exclude": "excluded"}
OUTCOMES = {ExitStatus.SUCCESS: "done", ExitStatus.ERROR: "failed", ExitStatus.PARTIAL_FAILURE: "partial"}


def fence_action(lines: list[str], ctx: Context) -> str | None:
    """What the move's fence plan does to the target's operator: fenced (scaled or its objects paused), excluded,
    or None when there is no plan."""
    ns, _, name = ctx.operator.split("/")
    mine = [line for line in lines if line.startswith(f"fence Deployment {ns}/{name} ")]
    if not mine:
        return None
    return "excluded" if ": excluded: " in mine[0] else "fenced"


def listed(kube: KubeClient, world: World) -> list[dict[str, Any]]:
    """Every object of the world's types, as the server holds it."""
    d = discover(kube)
    out = []
    for q in world.qualified:
        rt = d.by_qualified(q)
        assert rt is not None
        out += [o for page in kube.list_pages(rt) for o in page]
    return out
