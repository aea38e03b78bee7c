"""Composition as a tested property: every pair of restore option values, run on the real API server and held to
the reference model (tests/refmodel.py), which says from the backup, the options and the target as it was what
the restore must leave and count.

The world (tests/compose.py) is backed up once, four ways: a backup and a watch (restored `--at latest`), each
plain and encrypted. Each row then resets the target (objects already there; all, some or none of the CRDs; a
schema stricter than the backup's), restores with the row's options, reads the cluster back and compares it with
the model; a row that ends in a partial failure is fixed and run again with the same command. The rows come from
a pairwise generator (tests/pairwise.py) that never pairs options the option table (statusvault/flagtable.py)
says conflict; the last tests here show those pairs refused. The module prints how many rows ran and how long
they took (44 rows and 14 refusals: 35-50 s on two busy cores). STATUSVAULT_COMPOSE_SAMPLE=N[:SEED] runs N random
rows instead, to look past pairs."""

from __future__ import annotations

import base64
import contextlib
import dataclasses
import datetime as dt
import io
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from statusvault.archive import signing
from statusvault.cli.declared import command_options
from statusvault.cli.main import main
from statusvault.errors import ExitStatus
from statusvault.flagtable import CONFLICTS
from statusvault.kube.client import KubeClient
from statusvault.kube.discovery import discover
from statusvault.storage import open_store
from statusvault.storage.base import S3Options
from statusvault.testing.fixtures import ensure_namespace
from statusvault.vocabulary.kinds import CRDS, NAMESPACES, SECRETS
from statusvault.watch.chains import chains
from tests import refmodel
from tests.builders import unique
from tests.compose import PHASES, World, create_all, fix, observe, reset, timer
from tests.composeopts import SELECTION, Allowed, Context, args_of, mapping_of, model_options
from tests.pairwise import Row, pairwise, sampled

pytestmark = pytest.mark.version_neutral(
    "the options' combinations: what differs by server is guarded by crs/ on every version"
)
TARGETS = {"empty": "all", "existing": "all", "no-crds": "none", "some-crds": "gizmos", "strict": "strict"}  # CRDs
SCALED = "statusvault.io/replicas-before-restore"  # where releases before the restore's ledger kept the count

# Each parameter's values; the first is the default (no option given), which the generator prefers on a tie.
PARAMS: dict[str, tuple[Any, ...]] = {
    "namespace": (None, "b", "a,b"),
    "include": (None, "Gizmo,pool", "relics"),  # a Kind, a singular, a resource.group
    "exclude": (None, "Pool", "crds"),
    "selector": (None, "tier=gold", "tier notin (silver)"),
    "name": (None, "g-*,*1", "*2,p-3"),
    "cluster": (None, "on", "off"),
    "mapping": (None, "a", "a,b"),  # into namespaces that do not exist yet
    "no_status": (False, True),
    "status_include": (None, "Gizmo", "*"),
    "status_exclude": (None, "Pool"),
    "target": ("empty", "existing", "no-crds", "some-crds", "strict"),  # not an option: the cluster restored into
    "policy": (None, "update"),
    "modifiers": (False, True),
    "order": (False, True),  # groups: (relics), gizmos, a gate, pools
    # --stream: written as the archive is read (planned first with a dry run, fence or order); --no-stream:
    # planned first whatever the size (None: by the backup's size, which here plans first)
    "stream": (None, "on", "off"),
    "pause": (None, "auto", "annotation", "field", "auto+annotation"),
    "keep_paused": (None, "Gizmo", "relics"),
    "scale_down": (False, True),
    "fence": (None, "auto", "best-effort", "auto+exclude"),  # the operator may write the world's status (RBAC)
    "processes": (None, 2),
    "strict": (False, True),
    "dry_run": (None, "client", "server"),
    "at": (False, True),  # a watch, restored --at latest
    "encryption": (False, "key", "keys"),  # "keys": a key that opens nothing first, then the backup's
    "privileged": (None, "*"),  # the world holds custom resources only: it allows replacing a CRD (policy update)
    "signed": (False, True),  # the world's backups and watches are signed: given the public key, a restore checks
    "settle": (None, "0.5"),  # look again after the last write (the suite's default is 0): nothing else writes
}


# Every pair in rows that write; then each dry run with every other value (a dry run leaves the state as it was,
# so a pair met only in a dry run would be a pair never seen to work).
allowed = Allowed(PARAMS)
ROWS = pairwise({**PARAMS, "dry_run": (None,)}, allowed) + pairwise(
    {**PARAMS, "dry_run": ("client", "server")}, allowed, focus="dry_run"
)
# --stream only streams without a dry run, fence or order (it plans first then): every pair of the other
# parameters, selections among them, once more in rows that really stream.
_PLANNED_FIRST = ("fence", "order", "dry_run")
ROWS += pairwise({**PARAMS, **{k: (PARAMS[k][0],) for k in _PLANNED_FIRST}, "stream": ("on",)}, allowed)
if os.environ.get("STATUSVAULT_COMPOSE_SAMPLE"):  # N[:SEED]: N random rows instead, to look past pairs
    count, _, seed = os.environ["STATUSVAULT_COMPOSE_SAMPLE"].partition(":")
    ROWS = sampled(PARAMS, allowed, int(count), int(seed or 0))


# --- the world, backed up four ways ---


def cli(kubeconfig: Path, *args: str) -> tuple[int, str, str]:
    """The CLI in-process, for the module's set-up (the `run` fixture is per test)."""
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main(["--kubeconfig", str(kubeconfig), *args])
    return int(code), out.getvalue(), err.getvalue()


def record_watch(cluster: Any, storage: str, name: str, lease_ns: str, include: str, *extra: str) -> None:
    """Run `watch run` until its record reaches past now, then stop it (SIGTERM flushes)."""
    args = [sys.executable, "-m", "statusvault", "--kubeconfig", str(cluster.kubeconfig), "watch", "run", name,
            "--include-resources", include, "--storage", storage, "--lease-namespace", lease_ns,
            "--lease-seconds", "3", "--flush-interval", "0.3", *extra]  # fmt: skip
    proc = subprocess.Popen(args, stderr=subprocess.PIPE)
    start = dt.datetime.now(dt.UTC)
    deadline = time.monotonic() + 60
    try:
        while not (found := chains(open_store(storage, S3Options()), name)) or found[-1].until <= start:
            assert proc.poll() is None and time.monotonic() < deadline, f"watch {name} never flushed"
            time.sleep(0.2)
    finally:
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=30)
    assert proc.returncode == 0, err.decode()


@dataclasses.dataclass
class Backed:
    ctx: Context
    objects: list[dict[str, Any]]  # as the server held them when backed up
    dependencies: list[refmodel.Dependency]  # the Secrets the backups (not the watches) took with the objects

    def expected(self, row: Row, ctx: Context, before: refmodel.Target) -> refmodel.Expected:
        """What the model says the row's restore must do: a backup's dependencies come from an authenticated one
        (encrypted, or signed and verified); a watch has none."""
        deps = [] if row["at"] else self.dependencies
        authenticated = bool(row["encryption"]) or bool(row["signed"])
        return refmodel.restore(self.objects, ctx.world.types, model_options(row, ctx), before, deps, authenticated)


@pytest.fixture(scope="module")
def backed(cluster, kube: KubeClient, tmp_path_factory: pytest.TempPathFactory, request) -> Iterator[Backed]:
    timed = timer(request, f"restore composition: {len(ROWS)} rows, {len(EMPTY) + len(CONFLICTING)} refusals")
    world, tmp = World.new(), tmp_path_factory.mktemp("compose")
    reset(kube, world)
    for ns in (world.a, world.b):
        ensure_namespace(kube, ns)
    create_all(kube, world.objects())
    for secret, _ in world.secrets():
        kube.create(SECRETS, secret["metadata"]["namespace"], secret)
    objects = [o for ns in (world.a, world.b, None) for o in _listed(kube, world, ns)]
    ops = _operator(kube, world.group)
    key, other, modifiers = tmp / "key", tmp / "other-key", tmp / "modifiers.yaml"
    for path in (key, other):
        path.write_text(base64.b64encode(os.urandom(32)).decode())
    modifiers.write_text(world.modifiers())
    order = tmp / "order.yaml"
    order.write_text(world.order())
    public, _ = signing.generate(tmp / "signing.pem")
    ctx = Context(world, str(tmp / "store"), str(key), str(other), str(modifiers), str(order), f"{ops}/deployment/op",
                  verify_key=str(public))  # fmt: skip
    include = ",".join(world.qualified)
    for name, sealed in (("plain", ()), ("sealed", ("--encryption-key-file", str(key)))):
        sealed = (*sealed, "--signing-key-file", str(tmp / "signing.pem"))
        deps = ("--with-dependencies", *(("--allow-plaintext-secrets",) if name == "plain" else ()))
        code, _, err = cli(cluster.kubeconfig, "backup", name, "--include-resources", include, "--storage", ctx.store,
                           *sealed, *deps)  # fmt: skip
        assert code == 0, err
        record_watch(cluster, ctx.store, f"w-{name}", world.a, include, *sealed)
    reset(kube, world)
    yield Backed(ctx, objects, world.secrets())
    for ns in (world.a, world.b, ops):
        kube.delete(NAMESPACES, None, ns)
    d = discover(kube)
    kube.delete(d.resolve("clusterrolebindings.rbac.authorization.k8s.io"), None, ops)
    kube.delete(d.resolve("clusterroles.rbac.authorization.k8s.io"), None, ops)
    for q in world.qualified:  # no Kind of the world makes a later test's name ambiguous
        kube.delete(CRDS, None, q)
    timed()


def _listed(kube: KubeClient, world: World, namespace: str | None) -> list[dict[str, Any]]:
    d = discover(kube)
    out = []
    for t in world.types:
        rt = d.by_qualified(t.qualified)
        if rt is not None and rt.namespaced == (namespace is not None):
            out += [o for page in kube.list_pages(rt, namespace) for o in page]
    return out


def _operator(kube: KubeClient, group: str) -> str:
    """An operator's Deployment (one replica) for --scale-down, whose default ServiceAccount may write the status of
    every resource of the world's group (for --fence); returns its namespace (the name of its RBAC objects too)."""
    ns = unique("cmp-ops")
    ensure_namespace(kube, ns)
    d, rbac = discover(kube), "rbac.authorization.k8s.io"
    rule = {"apiGroups": [group], "resources": ["*/status"], "verbs": ["update", "patch"]}
    kube.create(
        d.resolve(f"clusterroles.{rbac}"),
        None,
        {"apiVersion": f"{rbac}/v1", "kind": "ClusterRole", "metadata": {"name": ns}, "rules": [rule]},
    )
    binding = {
        "apiVersion": f"{rbac}/v1",
        "kind": "ClusterRoleBinding",
        "metadata": {"name": ns},
        "roleRef": {"apiGroup": rbac, "kind": "ClusterRole", "name": ns},
        "subjects": [{"kind": "ServiceAccount", "name": "default", "namespace": ns}],
    }
    kube.create(d.resolve(f"clusterrolebindings.{rbac}"), None, binding)
    labels = {"app": "op"}
    template = {"metadata": {"labels": labels}, "spec": {"containers": [{"name": "c", "image": "op:1"}]}}
    spec = {"replicas": 1, "selector": {"matchLabels": labels}, "template": template}
    body = {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "op"}, "spec": spec}
    kube.create(discover(kube).resolve("deployments.apps"), ns, body)
    return ns


# --- the rows ---


def describe(row: Row) -> str:
    return " ".join(f"{k}={v}" for k, v in row.items() if v != PARAMS[k][0])


@pytest.mark.parametrize("row", ROWS, ids=[f"r{i:02d}" for i in range(len(ROWS))])
def test_a_restore_with_each_pair_of_option_values_leaves_what_the_model_says(row, backed, run, kube):
    ctx = dataclasses.replace(backed.ctx, mapped=(unique("cmp-ma"), unique("cmp-mb")))
    world = ctx.world
    reset(kube, world, TARGETS[row["target"]])
    if row["target"] == "existing":
        create_all(kube, world.existing(mapping_of(row["mapping"], ctx)))
    before, operator = observe(kube, world), deployment(kube, ctx)
    if row["target"] == "strict":
        before.phases = {world.qualified[0]: PHASES}
    name = ("w-" if row["at"] else "") + ("sealed" if row["encryption"] else "plain")
    args = [a for param, value in row.items() for a in args_of(param, value, ctx)]

    result = run("restore", name, "--storage", ctx.store, "-o", "json", *args)

    expected = backed.expected(row, ctx, before)
    where = f"row: {describe(row)}\nstderr: {result.err}"
    assert result.code == expected.code, where
    after = observe(kube, world)
    assert after.served == expected.target.served, where
    assert differences(expected.target.objects, after.objects) == {}, where
    fenced = fenced_by(result.out, ctx) if expected.code != 2 else False
    scaled = (row["scale_down"] or fenced) and not row["dry_run"] and expected.code != 2
    assert (deployment(kube, ctx) == operator) is not scaled, "scaled down and back only by a restore that writes"
    assert deployment(kube, ctx)[1:] == (1, None), "the operator is scaled back, its annotation gone"
    if expected.code == 2:
        errors = [line for line in result.err.splitlines() if line.startswith("error:")]
        assert len(errors) == 1 and "nothing to restore" in errors[0] and "Traceback" not in result.err, where
        return
    report = json.loads(result.out)
    assert report["verdict"]["outcome"] == {0: "done", 1: "failed", 3: "partial"}[result.code], where  # as its code
    items = {(i["resource"], i["namespace"], i["name"]): i["result"] for i in report["items"]}
    assert {k: v for k, v in items.items() if k[0] in world.qualified} == expected.results, where
    assert report["withoutSavedStatus"] == len(expected.without_status), where
    assert (report["unpaused"], report["leftPaused"]) == (expected.unpaused, expected.left_paused), where
    assert report["statusesOverwritten"]["count"] == 0, where
    if row.get("settle") and not row["dry_run"] and expected.code == ExitStatus.SUCCESS:
        written = [i for i in report["items"] if i["status"] in ("written", "in-body", "mismatch")]
        assert report["statusesOverwritten"]["checked"] == len(written), where
    if expected.code == ExitStatus.PARTIAL_FAILURE and not row["dry_run"]:
        fixed_and_run_again(row, backed, ctx, before, run, kube, args, name)
    elif expected.left_paused and expected.code == ExitStatus.SUCCESS:  # kept paused as asked
        unpaused(expected.target, run("unpause", name, "--storage", ctx.store, *args), kube, ctx, where)


def fenced_by(out: str, ctx: Context) -> bool:
    """Whether the report says --fence scaled the operator (found by its ClusterRole on the world's status)."""
    ns, _, name = ctx.operator.split("/")
    return any(
        line.startswith(f"fence Deployment {ns}/{name} ") and ": scale to 0 and back:" in line
        for line in json.loads(out).get("fence", ())
    )


def unpaused(target: refmodel.Target, result: Any, kube: KubeClient, ctx: Context, where: str) -> None:
    """docs/how-to/fence-operators.md: `statusvault unpause` with the same options releases what --keep-paused left
    paused."""
    assert result.code == ExitStatus.SUCCESS, where + result.err
    released = {k: dataclasses.replace(live, paused_with=None) for k, live in target.objects.items()}
    assert differences(released, observe(kube, ctx.world).objects) == {}, where


def fixed_and_run_again(row: Row, backed: Backed, ctx: Context, before, run, kube, args: list[str], name: str) -> None:
    """docs/how-to/resume-a-restore.md: fix the cause and run the same command again; it finishes what is left (statuses
    the server refused, objects whose CRD was missing), and the cluster ends as if it had been right the first time."""
    fix(kube, ctx.world)
    result = run("restore", name, "--storage", ctx.store, "-o", "json", *args)
    right = dataclasses.replace(before, served=set(ctx.world.qualified), phases={})
    expected = backed.expected(row, ctx, right)
    where = f"run again after the fix: {describe(row)}\nstderr: {result.err}"
    assert result.code == expected.code == ExitStatus.SUCCESS, where
    assert differences(expected.target.objects, observe(kube, ctx.world).objects) == {}, where


def deployment(kube: KubeClient, ctx: Context) -> tuple[int, int, str | None]:
    """The operator's generation (its spec's changes: a scaling), replicas and the annotation older releases kept
    its count in (never written now: only /scale is)."""
    ns, _, name = ctx.operator.split("/")
    obj = kube.get(discover(kube).resolve("deployments.apps"), ns, name)
    annotations = obj["metadata"].get("annotations") or {}
    return obj["metadata"]["generation"], obj["spec"]["replicas"], annotations.get(SCALED)


def differences(expected: dict, actual: dict) -> dict:
    """Per object the model and the cluster disagree on: what each says."""
    out = {}
    for key in sorted(set(expected) | set(actual)):
        want, got = expected.get(key), actual.get(key)
        if want != got:
            out[key] = {"model": want, "cluster": got}
    return out


EMPTY = [  # selections that match nothing in the backup, with options that would otherwise write
    {"namespace": "b", "selector": "tier=gold", "name": "*2,p-3", "pause": "auto", "target": "no-crds"},
    {"include": "relics", "name": "g-*", "exclude": "Pool", "policy": "update", "modifiers": True, "at": True},
]


@pytest.mark.parametrize("given", EMPTY, ids=["no-crds", "existing-at"])
def test_a_selection_that_matches_nothing_is_refused_and_changes_nothing(given, backed, run, kube):
    row = {n: given.get(n, values[0]) for n, values in PARAMS.items()}
    assert allowed({n: v for n, v in row.items() if n not in SELECTION}) and not allowed.selected(row)
    test_a_restore_with_each_pair_of_option_values_leaves_what_the_model_says(row, backed, run, kube)


# --- the pairs the option table says conflict ---

GIVEN = {  # a value for each option a conflict names, as a user would give it
    "--no-status": ["--no-status"],
    "--status-include-resources": ["--status-include-resources", "Gizmo"],
    "--status-exclude-resources": ["--status-exclude-resources", "Gizmo"],
    "--pause-annotation": ["--pause-annotation", "example.com/hold=true", "--pause-resources", "Gizmo"],
    "--pause-field": ["--pause-field", "/spec/hold=true"],
    "--all-namespaces": ["--all-namespaces"],
    "--dry-run": ["--dry-run", "client"],
    "--restart": ["--restart"],
    "--abort": ["--abort"],
    "--delete-source": ["--delete-source", "--yes"],
    "--signing-key-file": ["--signing-key-file", "signing.pem"],
    "--signing-kms-key-id": ["--signing-kms-key-id", "alias/backups"],
    "--at": ["--at", "latest"],
    "--from-velero": ["--from-velero"],
}
CONFLICTING = [(c, command) for c in CONFLICTS for command in c.commands(command_options())]


@pytest.mark.parametrize(
    ("conflict", "command"), CONFLICTING, ids=[f"{cmd}:{c.first}+{c.second}" for c, cmd in CONFLICTING]
)
def test_a_conflicting_pair_is_refused_in_one_line_and_nothing_is_written(
    conflict, command, backed, run, kube, cluster
):
    ctx, world = backed.ctx, backed.ctx.world
    given = {**GIVEN, "--namespace": ["--namespace", world.a]}
    before, stored = observe(kube, world), sorted(Path(ctx.store).rglob("*"))
    target = ["--from-kubeconfig", str(cluster.kubeconfig), "--to-kubeconfig", str(cluster.kubeconfig)]
    head = {"restore": ["restore", "plain"], "unpause": ["unpause", "plain"], "backup": ["backup", "b"],
            "move": ["move", *target], "watch run": ["watch", "run", "w"]}[command]  # fmt: skip

    result = run(*head, "--storage", ctx.store, *given[conflict.first], *given[conflict.second])

    assert result.code == ExitStatus.USAGE, result.err
    assert result.err == f"error: {conflict.first} and {conflict.second} cannot be combined: {conflict.why}\n"
    assert result.out == ""
    assert sorted(Path(ctx.store).rglob("*")) == stored and not run.state.exists(), "nothing written"
    assert observe(kube, world) == before
