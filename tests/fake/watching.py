"""The change log a WATCH reads: one resourceVersion counter for every write, events per collection, compaction
(410 Gone for a position before it), bookmarks, and streams that break off (a test's `break_watch`)."""

from __future__ import annotations

import copy
import dataclasses
import threading
import time
from collections.abc import Iterator

from statusvault.errors import KubeApiError, KubeConnectionError
from statusvault.kube.watch import WatchEvent
from statusvault.model import KubeObject, ResourceType
from statusvault.vocabulary.labels import Matcher, parse_selector


@dataclasses.dataclass(frozen=True)
class Event:
    rv: int
    type: str  # ADDED | MODIFIED | DELETED
    qualified: str
    namespace: str
    object: KubeObject


class ChangeLog:
    """Guarded by the server's condition: writers call `bump` and `record` holding it."""

    def __init__(self, changed: threading.Condition):
        self.changed = changed
        self.revision = 0  # the last resourceVersion handed out
        self.compacted = 0  # positions before this one are gone (410)
        self.events: list[Event] = []
        self._breaks: dict[str, int] = {}  # qualified -> events still delivered before the stream breaks off

    def bump(self) -> int:
        self.revision += 1
        return self.revision

    def record(self, kind: str, qualified: str, namespace: str, obj: KubeObject) -> None:
        rv = int(obj["metadata"]["resourceVersion"])
        self.events.append(Event(rv, kind, qualified, namespace, copy.deepcopy(obj)))
        self.changed.notify_all()

    def compact(self) -> None:
        """Forget the log so far: a WATCH or continue token from before now gets 410, open WATCHes too."""
        with self.changed:
            self.compacted = self.bump()
            self.changed.notify_all()

    def break_after(self, qualified: str, events: int) -> None:
        with self.changed:
            self._breaks[qualified] = events
            self.changed.notify_all()

    def watch(
        self, rt: ResourceType, namespace: str | None, selector: str, rv: str, period: float, path: str
    ) -> Iterator[WatchEvent]:
        """Events after `rv`, one at a time; after `period` seconds without one, a BOOKMARK ends the WATCH."""
        matches, q = parse_selector(selector), rt.qualified
        deadline = time.monotonic() + period
        position = int(rv) if rv else None
        while True:
            with self.changed:
                position = self.revision if position is None else position
                self._check(q, position, path)
                event = next(
                    (e for e in self.events if e.rv > position and self._takes(e, q, namespace, matches)), None
                )
                if event is None:
                    left = deadline - time.monotonic()
                    if left > 0:
                        self.changed.wait(left)
                        continue
                    mark = {
                        "kind": rt.kind,
                        "apiVersion": rt.api_version,
                        "metadata": {"resourceVersion": str(self.revision)},
                    }
            if event is None:
                yield WatchEvent("BOOKMARK", mark)
                return
            yield WatchEvent(event.type, copy.deepcopy(event.object))
            position = event.rv
            with self.changed:
                if q in self._breaks:
                    self._breaks[q] -= 1

    def _check(self, qualified: str, position: int, path: str) -> None:
        if position < self.compacted:
            raise KubeApiError.of(
                f"WATCH {path}: too old resource version: {position} ({self.compacted}) (410)", 410, "Expired"
            )
        if self._breaks.get(qualified) == 0:
            del self._breaks[qualified]
            raise KubeConnectionError(f"WATCH {path} broke off: ProtocolError: a fault injected by the test")

    @staticmethod
    def _takes(e: Event, qualified: str, namespace: str | None, matches: Matcher) -> bool:
        labels = (e.object.get("metadata") or {}).get("labels") or {}
        return e.qualified == qualified and (not namespace or e.namespace == namespace) and matches(labels)
