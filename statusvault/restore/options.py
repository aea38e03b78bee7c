"""What a restore is asked to do: the options shared by the CLI and restore intents."""

from __future__ import annotations

import dataclasses
import datetime as dt
import enum
from collections.abc import Mapping
from typing import Any, TypeVar

from statusvault import rfc3339
from statusvault.errors import ConfigError
from statusvault.flagtable import check_options, flag_value
from statusvault.model import DryRun, Selection, split_csv
from statusvault.restore.core.pausemarkers import PauseOptions, pause_options
from statusvault.restore.modifiers import Modifiers
from statusvault.restore.ordering.order import Order, read_order

PARALLEL = 16  # --parallel's default, for every front end: requests in flight per process


class ExistingPolicy(enum.StrEnum):
    """--existing-resource-policy: what becomes of an object the cluster has already."""

    NONE = "none"  # kept as it is (its status too), counted
    UPDATE = "update"  # patched to the backup's content, then its status written


class FenceMode(enum.StrEnum):
    """--fence: the controllers that may write the restored statuses, found from RBAC, and what is done to them."""

    NONE = "none"  # not looked for
    AUTO = "auto"  # each fenced: its objects paused, or it is scaled to 0 and back
    REPORT = "report"  # the fence plan printed, nothing written
    BEST_EFFORT = "best-effort"  # as auto, going on without fencing when RBAC cannot be read


@dataclasses.dataclass(frozen=True)
class RestoreOptions:
    selection: Selection = dataclasses.field(default_factory=Selection)  # names: not for CRDs, Namespaces
    namespace_mapping: tuple[tuple[str, str], ...] = ()
    status_include: tuple[str, ...] = ()  # empty: every custom resource; ("*",): everything
    status_exclude: tuple[str, ...] = ()
    no_status: bool = False
    existing_policy: ExistingPolicy = ExistingPolicy.NONE
    dry_run: DryRun = DryRun.NONE
    scale_down: tuple[str, ...] = ()  # NAMESPACE/KIND/NAME of operators to stop while restoring
    pause: PauseOptions = dataclasses.field(default_factory=PauseOptions)  # objects created paused
    fence: FenceMode = FenceMode.NONE
    fence_exclude: tuple[str, ...] = ()  # NAMESPACE/NAME of workloads never fenced
    modifiers: Modifiers | None = None  # restore-time patches (only their digest is in the repr, the state key)
    order: Order | None = None  # --order: groups and gates (only the groups' digest is in the repr)
    allow_privileged: tuple[
        str, ...
    ] = ()  # privileged types the restore may write when named (restore/planning/trust.py)
    # fields of objects (as archived: resource.group, namespace, name) that name a dependency in another namespace:
    # moved with --namespace-mapping (dependencies.py); the backup's, not the user's: not part of the state key
    references: Mapping[tuple[str, str, str], tuple[str, ...]] = dataclasses.field(
        default_factory=dict, repr=False, compare=False
    )

    @property
    def mapping(self) -> dict[str, str]:
        return dict(self.namespace_mapping)


E = TypeVar("E", bound=enum.StrEnum)

# the values restore_options reads (a flag's long name, dashes as underscores, as click names them): a front end
# that is given any other restore option must honour it itself or refuse it (controller/restores.py)
RESTORE_VALUES = frozenset({
    "namespaces", "include_resources", "exclude_resources", "selector", "names", "include_cluster_resources",
    "namespace_mapping", "status_include_resources", "status_exclude_resources", "no_status",
    "existing_resource_policy", "dry_run", "scale_down", "fence", "fence_exclude", "pause", "pause_annotation",
    "pause_field", "pause_resources", "keep_paused", "order", "allow_privileged_resources",
})  # fmt: skip


def restore_options(values: Mapping[str, Any], files: bool = True) -> RestoreOptions:
    """Options from the CLI's flag values or an intent's data, by the flags' long names (dashes as underscores).

    Lists are comma-separated strings (or tuples of them); booleans are bools or "true"/"false". `files`: the values
    may name local files to read (the CLI's); a Restore's or an intent's may not (the controller's disk is not its
    author's)."""

    def csv(key: str) -> tuple[str, ...]:
        return split_csv(values.get(key) or ())

    def flag(key: str) -> bool | None:
        return flag_value(values.get(key), key.replace("_", "-"))

    def choice(key: str, kind: type[E]) -> E:
        allowed = [str(m) for m in kind]
        raw = str(values.get(key) or allowed[0])
        if raw not in allowed:
            raise ConfigError(f"{key.replace('_', '-')} must be one of {', '.join(allowed)}, not {raw!r}")
        return kind(raw)

    check_options({**values, "no_status": flag("no_status"), "restart": flag("restart")})
    mapping = []
    for entry in csv("namespace_mapping"):
        old, sep, new = entry.partition(":")
        if not sep or not old or not new:
            raise ConfigError(f"invalid namespace-mapping entry {entry!r}: expected OLD:NEW")
        mapping.append((old, new))
    return RestoreOptions(
        selection=Selection.from_options(
            namespaces=csv("namespaces"),
            include_resources=csv("include_resources"),
            exclude_resources=csv("exclude_resources"),
            selector=str(values.get("selector") or ""),
            names=csv("names"),
            include_cluster_resources=flag("include_cluster_resources"),
        ),
        namespace_mapping=tuple(mapping),
        status_include=csv("status_include_resources"),
        status_exclude=csv("status_exclude_resources"),
        no_status=bool(flag("no_status")),
        existing_policy=choice("existing_resource_policy", ExistingPolicy),
        dry_run=choice("dry_run", DryRun),
        scale_down=csv("scale_down"),
        fence=choice("fence", FenceMode),
        fence_exclude=_fence_exclude(csv("fence_exclude")),
        pause=pause_options(
            str(values.get("pause") or "none"),
            str(values.get("pause_annotation") or ""),
            str(values.get("pause_field") or ""),
            csv("pause_resources"),
            csv("keep_paused"),
        ),
        order=read_order(str(values["order"]), files) if values.get("order") else None,
        allow_privileged=csv("allow_privileged_resources"),
    )


def _fence_exclude(entries: tuple[str, ...]) -> tuple[str, ...]:
    for entry in entries:
        ns, sep, name = entry.partition("/")
        if not sep or not ns or not name or "/" in name:
            raise ConfigError(f"invalid --fence-exclude entry {entry!r}: expected NAMESPACE/NAME")
    return entries


def parse_at(text: str) -> dt.datetime | None:
    """`latest` (None) or an RFC 3339 time with its zone, e.g. 2026-11-22T10:15:00Z."""
    if text.strip().lower() == "latest":
        return None
    try:
        rfc3339.parse(text, naive_as_utc=True)
    except ValueError:
        raise ConfigError(f"invalid --at {text!r}: use an RFC 3339 time (2026-11-22T10:15:00Z) or latest") from None
    try:
        return rfc3339.parse(text, naive_as_utc=False)
    except ValueError:
        raise ConfigError(f"--at {text!r} has no time zone: add Z (UTC) or an offset") from None
