"""A row's options in the composition suites: its command-line arguments, the same options as the reference model
(tests/refmodel.py) takes them, and which rows the option table (statusvault/flagtable.py) allows."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from statusvault.flagtable import CONFLICTS, NEEDS
from tests import refmodel
from tests.compose import HOLD, HOLD_FIELD, World
from tests.pairwise import Row


@dataclasses.dataclass(frozen=True)
class Context:
    """What a row's options name: the world, the store and key, fresh namespaces to map to, the operator."""

    world: World
    store: str = "store"
    key: str = "key"
    other_key: str = "other-key"  # a key that opens none of the backups: listed first, a restore must pass it over
    modifiers: str = "modifiers.yaml"
    order: str = "order.yaml"  # gizmos, a gate that passes, then pools (relics, named by no group, first)
    operator: str = "ops/deployment/op"
    mapped: tuple[str, str] = ("new-a", "new-b")
    verify_key: str = "signing.pem.pub"  # the public key of the key every backup of the world is signed with


def mapping_of(value: str | None, ctx: Context) -> dict[str, str]:
    """--namespace-mapping's value "a" or "a,b": those namespaces into the row's fresh ones."""
    fresh = dict(zip("ab", ctx.mapped, strict=True))
    return {getattr(ctx.world, n): fresh[n] for n in (value or "").split(",") if n}


def resources(g: str) -> dict[str, tuple[str, tuple[str, ...]]]:
    """Each resource value a row may hold: as the command line spells it, and the qualified names it stands for."""
    gizmos, relics, pools = f"gizmos.{g}", f"relics.{g}", f"pools.{g}"
    return {
        "Gizmo,pool": ("Gizmo,pool", (gizmos, pools)),  # a Kind and a singular
        "gizmos+pools": (f"{gizmos},{pools}", (gizmos, pools)),
        "relics": (relics, (relics,)),
        "Gizmo": ("Gizmo", (gizmos,)),
        "Pool": ("Pool", (pools,)),
        "crds": (refmodel.CRD, (refmodel.CRD,)),
        "*": ("*", ("*",)),
    }


def pauses(g: str) -> dict[str, tuple[list[str], refmodel.Marker | None, tuple[str, ...]]]:
    """Each pause value: its arguments, and the generic marker with the resources it is for (--pause auto is the
    value's `auto` prefix)."""
    hold = ["--pause-annotation", "example.com/hold=true", "--pause-resources"]
    return {
        "auto": (["--pause", "auto"], None, ()),
        "annotation": ([*hold, f"relics.{g}"], HOLD, (f"relics.{g}",)),
        "field": (["--pause-field", "/spec/hold=true", "--pause-resources", f"*.{g}"], HOLD_FIELD, (f"*.{g}",)),
        "auto+annotation": (["--pause", "auto", *hold, f"pools.{g}"], HOLD, (f"pools.{g}",)),
    }


LISTS = {  # parameters whose value is a resource list
    "include": "--include-resources", "exclude": "--exclude-resources", "keep_paused": "--keep-paused",
    "status_include": "--status-include-resources", "status_exclude": "--status-exclude-resources",
}  # fmt: skip
VALUES = {  # parameters whose value is the option's
    "selector": "--selector", "name": "--name", "dry_run": "--dry-run", "policy": "--existing-resource-policy",
    "processes": "--processes", "privileged": "--allow-privileged-resources", "settle": "--settle-seconds",
}  # fmt: skip


def args_of(name: str, value: Any, ctx: Context) -> list[str]:
    """The command-line arguments of one parameter's value (none for a default)."""
    w = ctx.world
    if value in (None, False) or name == "target":
        return []
    if name in VALUES:
        return [VALUES[name], str(value)]
    if name in LISTS:
        return [LISTS[name], resources(w.group)[value][0]]
    flags = {
        "namespace": lambda: ["--namespace", ",".join(getattr(w, n) for n in value.split(","))],
        "mapping": lambda: ["--namespace-mapping", ",".join(f"{a}:{b}" for a, b in mapping_of(value, ctx).items())],
        "cluster": lambda: ["--include-cluster-resources" if value == "on" else "--no-include-cluster-resources"],
        "no_status": lambda: ["--no-status"],
        "modifiers": lambda: ["--modifiers", ctx.modifiers],
        "order": lambda: ["--order", ctx.order],
        "stream": lambda: ["--stream" if value == "on" else "--no-stream"],
        "pause": lambda: pauses(w.group)[value][0],
        "scale_down": lambda: ["--scale-down", ctx.operator],
        "fence": lambda: fences(ctx)[value],
        "at": lambda: ["--at", "latest"],
        "delete_source": lambda: ["--delete-source", "--yes"],
        "strict": lambda: ["--strict"],
        "encryption": lambda: [a for k in keys_of(value, ctx) for a in ("--encryption-key-file", k)],
        "signed": lambda: ["--verify-key-file", ctx.verify_key],
    }
    return flags[name]()


def fences(ctx: Context) -> dict[str, list[str]]:
    """Each --fence value; "auto+exclude" leaves the operator running (it is the one workload fencing finds)."""
    ns, _, name = ctx.operator.split("/")
    return {
        "auto": ["--fence", "auto"],
        "best-effort": ["--fence", "best-effort"],
        "auto+exclude": ["--fence", "auto", "--fence-exclude", f"{ns}/{name}"],
    }


def keys_of(value: str, ctx: Context) -> list[str]:
    """The key files of an encryption value: the backup's, after one that opens nothing for "keys"."""
    return [ctx.other_key, ctx.key] if value == "keys" else [ctx.key]


DEFAULTS: Row = {  # what a row without the parameter means
    "namespace": None, "include": None, "exclude": None, "selector": None, "name": None, "cluster": None,
    "mapping": None, "no_status": False, "status_include": None, "status_exclude": None, "policy": None,
    "dry_run": None, "pause": None, "keep_paused": None, "modifiers": False,
    "order": False, "privileged": None,
}  # fmt: skip


def model_options(row: Row, ctx: Context) -> refmodel.Options:
    """The row's options as the reference model takes them (resource names qualified)."""
    w, row = ctx.world, {**DEFAULTS, **row}
    names = {value: qualified for value, (_, qualified) in resources(w.group).items()} | {None: ()}
    _, marker, paused = pauses(w.group).get(row["pause"], ([], None, ()))
    split = lambda v: tuple(v.split(",")) if v else ()  # noqa: E731
    return refmodel.Options(
        namespaces=tuple(getattr(w, n) for n in split(row["namespace"])),
        include=names[row["include"]],
        exclude=names[row["exclude"]],
        selector=row["selector"] or "",
        names=split(row["name"]),
        cluster_resources={None: None, "on": True, "off": False}[row["cluster"]],
        mapping=mapping_of(row["mapping"], ctx),
        status_include=names[row["status_include"]],
        status_exclude=names[row["status_exclude"]],
        no_status=row["no_status"],
        policy=row["policy"] or "none",
        dry_run=row["dry_run"] or "",
        pause_auto=(row["pause"] or "").startswith("auto"),
        marker=marker,
        pause_resources=paused,
        keep_paused=names[row["keep_paused"]],
        modify=w.modify if row["modifiers"] else None,
        gated=(f"gizmos.{w.group}",) if row["order"] else (),
        later=(f"pools.{w.group}",) if row["order"] else (),
        replace_crds=row["privileged"] is not None,
        streamed=row.get("stream") == "on" and not (row.get("dry_run") or row.get("fence") or row.get("order")),
    )


PROBE = Context(World("g.example.com", "a", "b"))  # names enough to compute flags and selections with
SELECTION = ("namespace", "include", "exclude", "selector", "name", "cluster")
_WIDEST = {"cluster": "on"}  # the value of a selection parameter that leaves out least (else its default)


def flags(partial: Row) -> set[str]:
    """The long options a (partial) row gives."""
    return {a for name, v in partial.items() for a in args_of(name, v, PROBE) if a.startswith("--")}


class Allowed:
    """Which rows over `params` may run: those the option table allows (no conflicting pair; an option's need
    met, once every parameter that could meet it has its value) whose selection matches something in the world
    (one that matches nothing is refused whatever else is asked: a test of its own shows it)."""

    def __init__(self, params: Mapping[str, Sequence[Any]], also: Callable[[Row], bool] = lambda row: True):
        self.params, self.also = params, also
        self.suppliers = {  # the parameters that can give a flag some option needs
            flag: {name for name, values in params.items() for v in values if flag in flags({name: v})}
            for need in NEEDS
            for flag in need.any_of
        }

    def __call__(self, partial: Row) -> bool:
        given = flags(partial)
        if any(c.first in given and c.second in given for c in CONFLICTS):
            return False
        for need in NEEDS:
            decided = all(s in partial for f in need.any_of for s in self.suppliers[f])
            if decided and need.option in given and not given & set(need.any_of):
                return False
        return self.also(partial) and bool(self.selected(partial))

    def selected(self, partial: Row) -> list[dict[str, Any]]:
        """The world's objects the row's selection takes, its unset selection parameters at their widest."""
        row = {n: partial.get(n, _WIDEST.get(n, self.params[n][0])) for n in self.params}
        opts = model_options(row, PROBE)
        return [o for o in PROBE.world.objects() if refmodel.selected(PROBE.world.types, o, opts)]
