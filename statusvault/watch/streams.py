"""One thread per watched collection: LIST its resourceVersion, then WATCH from there for ever (bookmarks
keep the position fresh); a 410 Gone re-lists and says so. Everything goes into one queue, in order."""

from __future__ import annotations

import dataclasses
import logging
import queue
import threading
from typing import Any

from statusvault import errors
from statusvault.backup import prepare_object
from statusvault.errors import Forbidden, KubeApiError, NotFound, StatusVaultError, Unauthorized
from statusvault.kube.api import KubeApi
from statusvault.kube.watch import collection_version
from statusvault.model import ResourceType, Selection, name_matches
from statusvault.runtime.throttle import Backoff, spread

log = logging.getLogger(__name__)


@dataclasses.dataclass(frozen=True)
class Stream:
    """One collection: a resource type, in one namespace or all of them, with the selection's filters."""

    rt: ResourceType
    namespace: str | None
    selector: str
    names: tuple[str, ...] = ()
    crd_filter: frozenset[tuple[str, str]] | None = None  # CRDs: only those defining a watched type

    @property
    def key(self) -> str:
        return f"{self.rt.qualified}/{self.namespace or ''}"

    def takes(self, obj: dict[str, Any]) -> bool:
        if self.crd_filter is not None:
            spec = obj.get("spec") or {}
            return (spec.get("group", ""), (spec.get("names") or {}).get("plural", "")) in self.crd_filter
        return self.rt.is_crd or name_matches((obj.get("metadata") or {}).get("name", ""), self.names)


def streams_for(types: list[ResourceType], sel: Selection) -> list[Stream]:
    """The collections a backup of `types` with `sel` lists, the same filters applied."""
    explicit_crds = any(rt.is_crd for rt in types if rt.qualified in sel.include_resources)
    defined = frozenset((rt.group, rt.resource) for rt in types if rt.custom)
    out = []
    for rt in types:
        scopes: tuple[str | None, ...] = sel.namespaces if (rt.namespaced and sel.namespaces) else (None,)
        crd_filter = defined if rt.is_crd and not explicit_crds else None
        for ns in scopes:
            out.append(Stream(rt, ns, "" if rt.is_crd else sel.label_selector, sel.names, crd_filter))
    return out


@dataclasses.dataclass(frozen=True)
class Change:
    stream: str
    op: str  # put | delete
    rv: str
    resource: str
    data: bytes  # the object's archived form


@dataclasses.dataclass(frozen=True)
class Position:
    """A bookmark: the stream has seen everything up to rv."""

    stream: str
    rv: str


@dataclasses.dataclass(frozen=True)
class Relisted:
    """The stream's position was compacted away (410): changes in between are unknown; it resumed from rv."""

    stream: str
    rv: str


Item = Change | Position | Relisted


class StreamSet:
    def __init__(self, client: KubeApi, streams: list[Stream], out: queue.Queue[Item], timeout: int = 300):
        self.client = client
        self.streams = streams
        self.out = out
        self.timeout = timeout
        self.stop = threading.Event()
        self.failed: StatusVaultError | None = None

    def start(self, positions: dict[str, str]) -> dict[str, str]:
        """Start every stream from its position (a fresh LIST's when none is given); return the positions."""
        start = {}
        for s in self.streams:
            start[s.key] = positions.get(s.key) or collection_version(self.client, s.rt, s.namespace, s.selector)
        for s in self.streams:
            threading.Thread(target=self._run, args=(s, start[s.key]), name=f"watch-{s.key}", daemon=True).start()
        return start

    def _run(self, s: Stream, rv: str) -> None:
        backoff, attempt, gone = Backoff(), 0, False
        while not self.stop.is_set():
            try:
                if gone:  # the new position is taken before Relisted is queued: a base made after it misses nothing
                    rv = collection_version(self.client, s.rt, s.namespace, s.selector)
                    log.warning("%s: resourceVersion too old (410 Gone): re-listed, now at %s", s.key, rv)
                    self.out.put(Relisted(s.key, rv))
                    gone = False
                for ev in self.client.watch(s.rt, s.namespace, s.selector, rv, self.timeout):
                    attempt = 0
                    rv = ev.resource_version or rv
                    if ev.type == "BOOKMARK":
                        self.out.put(Position(s.key, rv))
                    elif s.takes(ev.object):
                        op = "delete" if ev.type == "DELETED" else "put"
                        self.out.put(Change(s.key, op, rv, s.rt.qualified, prepare_object(ev.object)))
                    if self.stop.is_set():
                        return
            except errors.Gone:  # the position was compacted away (410): re-list from now
                gone = True
                continue
            except KubeApiError as e:
                if isinstance(e, Unauthorized | Forbidden | NotFound):
                    self.failed = e
                    self.stop.set()
                    return
                attempt = self._pause(backoff, attempt, e)
            except StatusVaultError as e:  # connection lost: reconnect from the last position
                attempt = self._pause(backoff, attempt, e)

    def _pause(self, backoff: Backoff, attempt: int, error: Exception) -> int:
        """Wait before reconnecting: the server's Retry-After when it gave one (a 429 from priority and fairness),
        spread as every request's is, else this stream's own backoff."""
        log.info("watch interrupted (%s); reconnecting", error)
        asked = error.retry_after if isinstance(error, KubeApiError) else None
        self.stop.wait(spread(asked) if asked is not None else backoff.delay(min(attempt, 6)))
        return attempt + 1
