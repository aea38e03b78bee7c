"""After its last write, a restore looks again: once the cluster settles, every status it wrote that another writer
has written since (an operator that was not fenced or paused, re-provisioning) is named and counted, with who.

The restore cannot stop an unfenced operator, but it can see one: the API server records in managedFields who
wrote which fields and when (a status write through /status is an entry of its own from Kubernetes 1.22; on
1.20 the status fields join the writer's entry). A status this restore wrote is overwritten when another field
manager has written status fields at or after this restore's own status write, or now owns every status field
this restore set. One metadata-only LIST per resource and namespace reads it; nothing is compared by content,
which the server's defaults and pruning change."""

from __future__ import annotations

import dataclasses
import os
import threading
from collections.abc import Iterable, Mapping
from typing import Any

from statusvault import rfc3339
from statusvault.errors import ConfigError
from statusvault.kube.api import KubeApi
from statusvault.kube.discovery import Discovery
from statusvault.model import display

SETTLE_SECONDS = 2.0  # the default wait before looking (--settle-seconds; 0: do not look)
SETTLE_ENV = "STATUSVAULT_SETTLE_SECONDS"  # the same for every restore of a process: CLI, controller, move
MAX_CHECKED = 100_000  # objects looked at again; a larger restore checks the first ones and says so
NAMED = 20


def default_settle() -> float:
    """SETTLE_SECONDS, or the environment's STATUSVAULT_SETTLE_SECONDS (the controller's and move's restores too)."""
    raw = os.environ.get(SETTLE_ENV, "")
    try:
        value = float(raw) if raw else SETTLE_SECONDS
    except ValueError:
        raise ConfigError(f"{SETTLE_ENV} must be a number of seconds, not {raw!r}") from None
    if not 0 <= value <= 600:
        raise ConfigError(f"{SETTLE_ENV} must be between 0 and 600 seconds, not {raw!r}")
    return value


@dataclasses.dataclass
class Overwritten:
    checked: int = 0
    count: int = 0
    named: list[str] = dataclasses.field(default_factory=list)  # "<object>: <what> by <managers>", the first NAMED
    unchecked: int = 0  # written but not looked at (above MAX_CHECKED)

    def add(self, line: str) -> None:
        self.count += 1
        if len(self.named) < NAMED:
            self.named.append(line)


def look_again(
    client: KubeApi,
    served: Discovery,
    written: Iterable[tuple[str, str, str]],
    manager: str,
    wait: float,
    cancel: threading.Event | None = None,
) -> Overwritten:
    """After `wait` seconds, which of the `written` objects (resource, namespace, name) had their status written
    since by another writer than `manager`, or are gone."""
    out = Overwritten()
    places: dict[tuple[str, str], list[str]] = {}
    for resource, namespace, name in written:
        if out.checked >= MAX_CHECKED:
            out.unchecked += 1
            continue
        places.setdefault((resource, namespace), []).append(name)
        out.checked += 1
    if not places:
        return out
    if (cancel or threading.Event()).wait(wait):
        return Overwritten(unchecked=out.checked + out.unchecked)
    for (resource, namespace), names in sorted(places.items()):
        rt = served.by_qualified(resource)
        if rt is None:
            continue
        metas = {m.get("name", ""): m for m in client.list_metadata(rt, namespace or None)}
        for name in names:
            meta = metas.get(name)
            where = display(resource, namespace, name)
            if meta is None:
                out.add(f"{where}: deleted since the restore")
                continue
            writers = status_writers_since(meta, manager)
            if writers:
                out.add(f"{where}: status written since by {', '.join(writers)}")
    return out


def status_writers_since(meta: Mapping[str, Any], manager: str) -> list[str]:
    """The other field managers that wrote status fields at or after `manager`'s last status write (every one
    that owns status fields, when `manager` owns none any more: they took all of them over)."""
    entries = [e for e in meta.get("managedFields") or [] if isinstance(e, dict) and _touches_status(e)]
    mine = [_time(e) for e in entries if e.get("manager") == manager]
    since = max(mine) if mine else None
    return sorted(
        {
            str(e.get("manager") or "(no manager)")
            for e in entries
            if e.get("manager") != manager and (since is None or _time(e) >= since)
        }
    )


def _touches_status(entry: Mapping[str, Any]) -> bool:
    return entry.get("subresource") == "status" or "f:status" in (entry.get("fieldsV1") or {})


def _time(entry: Mapping[str, Any]) -> float:
    parsed = rfc3339.parse_or_none(str(entry.get("time") or ""))
    return parsed.timestamp() if parsed is not None else 0.0
