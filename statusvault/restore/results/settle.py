"""After its last write, a restore looks again: once the cluster settles, every status it wrote that another writer
has written since (an operator that was not fenced or paused, re-provisioning) is named and counted, with who.

The restore cannot stop an unfenced operator, but it can see one. Each status write's answer (what the server
kept) is remembered as a digest; after the wait, one LIST per resource and namespace reads the objects again, and
a status whose digest changed was written since. Who wrote it comes from managedFields: the other field managers
whose status entries are as recent as this restore's (a status write is an entry of its own from Kubernetes
1.22; on 1.20 the status fields join the writer's entry)."""

from __future__ import annotations

import dataclasses
import hashlib
import os
import threading
from collections.abc import Mapping
from typing import Any

import orjson

from statusvault import rfc3339
from statusvault.errors import ConfigError
from statusvault.kube.api import KubeApi
from statusvault.kube.discovery import Discovery
from statusvault.model import display, writes_status

SETTLE_SECONDS = 2.0  # the default wait before looking (--settle-seconds; 0: do not look)
SETTLE_ENV = "STATUSVAULT_SETTLE_SECONDS"  # the same for every restore of a process: CLI, controller, move
MAX_CHECKED = 100_000  # objects looked at again (their digests are kept in memory); above: counted as unchecked
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


def status_digest(status: Any) -> str:
    """What a status write left, as the server answered it: compared with the object read again later."""
    return hashlib.sha256(orjson.dumps(status, option=orjson.OPT_SORT_KEYS)).hexdigest()[:24]


def look_again(
    client: KubeApi,
    served: Discovery,
    written: Mapping[tuple[str, str, str], str],
    manager: str,
    wait: float,
    cancel: threading.Event | None = None,
    unrecorded: int = 0,
) -> Overwritten:
    """After `wait` seconds, which of the `written` objects ((resource, namespace, name) -> the digest of the
    status this restore's write left) had their status written since, and by whom, or are gone."""
    if not written or (cancel or threading.Event()).wait(wait):  # nothing to look at, or stopped: looked at none
        return Overwritten(unchecked=len(written) + unrecorded)
    out = Overwritten(checked=len(written), unchecked=unrecorded)
    places: dict[tuple[str, str], set[str]] = {}
    for resource, namespace, name in written:
        places.setdefault((resource, namespace), set()).add(name)
    for (resource, namespace), names in sorted(places.items()):
        rt = served.by_qualified(resource)
        if rt is None:
            continue
        seen: set[str] = set()
        for page in client.list_pages(rt, namespace or None):  # a page at a time: memory stays flat
            for obj in page:
                name = obj["metadata"]["name"]
                if name not in names:
                    continue
                seen.add(name)
                if status_digest(obj.get("status")) != written[(resource, namespace, name)]:
                    out.add(_written_again(display(resource, namespace, name), obj, manager))
        for name in sorted(names - seen):
            out.add(f"{display(resource, namespace, name)}: deleted since the restore")
    return out


def _written_again(where: str, obj: Mapping[str, Any], manager: str) -> str:
    writers = status_writers_since(obj.get("metadata") or {}, manager) or ["a writer managedFields do not name"]
    return f"{where}: status written since by {', '.join(writers)}"


def status_writers_since(meta: Mapping[str, Any], manager: str) -> list[str]:
    """The other field managers that wrote status fields at or after `manager`'s last status write (every one
    that owns status fields, when `manager` owns none any more: they took all of them over)."""
    entries = [e for e in meta.get("managedFields") or [] if writes_status(e)]
    mine = [_time(e) for e in entries if e.get("manager") == manager]
    since = max(mine) if mine else None
    return sorted(
        {
            str(e.get("manager") or "(no manager)")
            for e in entries
            if e.get("manager") != manager and (since is None or _time(e) >= since)
        }
    )


def _time(entry: Mapping[str, Any]) -> float:
    parsed = rfc3339.parse_or_none(str(entry.get("time") or ""))
    return parsed.timestamp() if parsed is not None else 0.0
