"""After its last write, a restore looks again: once the cluster settles, every status it wrote that another writer
has written since (an operator that was not fenced or paused, re-provisioning) is named and counted, with who.

The restore cannot stop an unfenced operator, but it can see one. Each status write's answer (what the server
kept) is remembered as a digest of its status and its resourceVersion (`write_mark`). After the wait, one
metadata-only LIST per resource and namespace says which objects changed at all since (another resourceVersion);
only those are read whole (a GET each, or one LIST when many changed), and a status whose digest changed was
written since. An object with the resourceVersion its status write answered has not changed, so the answer is the
one a full read of every object gives, for about half the client's CPU (the LIST of whole objects was 6-8 % of a
default restore's; docs/development/benchmarks.md). Who wrote it comes from managedFields: the other field
managers whose status entries are as recent as this restore's (a status write is an entry of its own from
Kubernetes 1.22; on
1.20 the status fields join the writer's entry)."""

from __future__ import annotations

import dataclasses
import hashlib
import os
import threading
from collections.abc import Collection, Iterator, Mapping
from typing import Any

import orjson

from statusvault.errors import ConfigError
from statusvault.kube.api import KubeApi
from statusvault.kube.discovery import Discovery
from statusvault.model import KubeObject, ResourceType, display
from statusvault.restore.core.fields import status_writers_since
from statusvault.restore.core.journal import HANDED_OVER
from statusvault.restore.core.pausemarkers import RECORD

SETTLE_SECONDS = 2.0  # the default wait before looking (--settle-seconds; 0: do not look)
SETTLE_ENV = "STATUSVAULT_SETTLE_SECONDS"  # the same for every restore of a process: CLI, controller, move
MAX_CHECKED = 100_000  # objects looked at again (their write marks are kept in memory); above: counted as unchecked
NAMED = 20
READ_ONE_BY_ONE = 20  # changed objects of one resource and namespace read with a GET each; more: one LIST
_DIGEST = 24  # hex characters of a status digest: a write mark's first part


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
    """What a status write left, as the server answered it: compared with the object read again later. Condition
    lists are left out (a `conditions` list at any depth): they are what the operator observes now, which it
    rewrites as it pleases, a paused one too (Cluster API records Paused there). The state a restore brings back,
    which the operator cannot recompute, is the rest."""
    return hashlib.sha256(_digested_json(status)).hexdigest()[:_DIGEST]


def _digested_json(status: Any) -> bytes:
    """The status as digested: without its top-level conditions, serialised once; only a status with a `conditions`
    key deeper down (rare) is copied whole without them. In compact JSON `"conditions":` is only ever a key."""
    top = status
    if isinstance(status, dict) and isinstance(status.get("conditions"), list):
        top = {k: v for k, v in status.items() if k != "conditions"}
    out = orjson.dumps(top, option=orjson.OPT_SORT_KEYS)
    if b'"conditions":' not in out:
        return out
    return orjson.dumps(_without_conditions(status), option=orjson.OPT_SORT_KEYS)


def _without_conditions(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _without_conditions(v) for k, v in value.items() if not (k == "conditions" and isinstance(v, list))}
    if isinstance(value, list):
        return [_without_conditions(v) for v in value]
    return value


def still_as_written(mark: str, answer: Mapping[str, Any]) -> bool:
    """Whether an object read (or answered) now still has the status its status write left (`mark`)."""
    return len(mark) > _DIGEST and mark != HANDED_OVER and status_digest(answer.get("status")) == mark[:_DIGEST]


def write_mark(answer: Mapping[str, Any]) -> str:
    """A status write's answer remembered: its status's digest, then its resourceVersion (one string: a restore
    keeps one per object written, up to MAX_CHECKED)."""
    return status_digest(answer.get("status")) + str((answer.get("metadata") or {}).get("resourceVersion") or "")


def look_again(
    client: KubeApi,
    served: Discovery,
    written: Mapping[tuple[str, str, str], str],
    manager: str,
    wait: float,
    cancel: threading.Event | None = None,
    unrecorded: int = 0,
) -> Overwritten:
    """After `wait` seconds, which of the `written` objects ((resource, namespace, name) -> the `write_mark` of
    this restore's status write) had their status written since, and by whom, or are gone."""
    if not written or (cancel or threading.Event()).wait(wait):  # nothing to look at, or stopped: looked at none
        return Overwritten(unchecked=len(written) + unrecorded)
    out = Overwritten(checked=len(written), unchecked=unrecorded)
    places: dict[tuple[str, str], dict[str, str]] = {}
    for (resource, namespace, name), mark in written.items():
        places.setdefault((resource, namespace), {})[name] = mark
    for (resource, namespace), marks in sorted(places.items()):
        rt = served.by_qualified(resource)
        if rt is not None:
            gone, _ = compare_marks(client, rt, namespace, marks, manager, out)
            for name in sorted(gone):
                out.add(f"{display(resource, namespace, name)}: deleted since the restore")
    return out


Listed = dict[str, tuple[str, bool]]  # name -> (resourceVersion, carries a statusvault pause record)


def listed(client: KubeApi, rt: ResourceType, namespace: str, names: Collection[str]) -> Listed:
    """Of these objects of one resource and namespace, those on the cluster, from one metadata-only LIST (a page at a
    time: only what is asked for is kept)."""
    out: Listed = {}
    for meta in client.list_metadata(rt, namespace or None):
        name = meta.get("name", "")
        if name in names:
            out[name] = (str(meta.get("resourceVersion") or ""), RECORD in (meta.get("annotations") or {}))
    return out


def compare_marks(
    client: KubeApi,
    rt: ResourceType,
    namespace: str,
    marks: Mapping[str, str],
    manager: str,
    out: Overwritten,
    live: Listed | None = None,
) -> tuple[set[str], list[str]]:
    """The objects of one resource and namespace (name -> the `write_mark` of their status write) compared with the
    cluster (`live`, or one metadata-only LIST): a whole read of those with another resourceVersion; each whose status
    digest changed is added to `out`. Returns the names not on the cluster, and those written since."""
    live = listed(client, rt, namespace, marks) if live is None else live
    changed = [name for name in marks if name in live and live[name][0] != marks[name][_DIGEST:]]
    gone = {name for name in marks if name not in live}
    again: list[str] = []
    for obj in read_whole(client, rt, namespace, changed, gone):
        name = obj["metadata"]["name"]
        if status_digest(obj.get("status")) != marks[name][:_DIGEST]:
            again.append(name)
            out.add(_written_again(display(rt.qualified, namespace, name), obj, manager))
    return gone, again


def read_whole(
    client: KubeApi, rt: ResourceType, namespace: str, changed: list[str], gone: set[str]
) -> Iterator[KubeObject]:
    """The `changed` objects read whole: a GET each when they are few, else one LIST of the namespace. One deleted
    in between joins `gone`."""
    if len(changed) <= READ_ONE_BY_ONE:
        for name in changed:
            obj = client.get(rt, namespace or None, name)
            if obj is None:
                gone.add(name)
            else:
                yield obj
        return
    wanted, found = set(changed), set()
    for page in client.list_pages(rt, namespace or None):
        for obj in page:
            if obj["metadata"]["name"] in wanted:
                found.add(obj["metadata"]["name"])
                yield obj
    gone.update(wanted - found)


def _written_again(where: str, obj: Mapping[str, Any], manager: str) -> str:
    writers = status_writers_since(obj.get("metadata") or {}, manager) or ["a writer managedFields do not name"]
    return f"{where}: status written since by {', '.join(writers)}"
