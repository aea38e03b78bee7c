"""What the cluster serves while a restore runs: the one owner of discovery during execution."""

from __future__ import annotations

import dataclasses
import threading
from collections.abc import Callable

from statusvault.kube.discovery import Discovery
from statusvault.model import ResourceType
from statusvault.restore.core.plan import Action, PlanItem


class ServedTypes:
    """Discovery as of the plan, re-read (`rediscover`) once restored CRDs are served.

    Items are read from the plan with the types it recorded; `target` gives each the type it is written
    with now: the served version (a CRD restored by this run, or installed since a resumed run's plan)."""

    def __init__(self, discovery: Discovery, rediscover: Callable[[], Discovery]):
        self.discovery = discovery
        self._rediscover = rediscover
        self._lock = threading.Lock()
        self._written_as: dict[ResourceType, ResourceType | None] = {}  # per discovery; None: not served

    def rediscover(self) -> Discovery:
        """Read what the cluster serves now; the new view is used from here on."""
        live = self._rediscover()
        with self._lock:
            self.discovery, self._written_as = live, {}
        return live

    def find(self, group: str, version: str, kind: str) -> ResourceType | None:
        return self.discovery.find(group, version, kind)

    def serves(self, qualified: str) -> bool:
        return self.discovery.by_qualified(qualified) is not None

    def target(self, item: PlanItem) -> PlanItem:
        """The item as it is written now: its served type; an unavailable one becomes a create once served."""
        if item.rt.is_crd:
            return item
        try:
            rt = self._written_as[item.rt]
        except KeyError:
            served = self.discovery.by_qualified(item.rt.qualified)
            rt = None if served is None else dataclasses.replace(served, custom=served.custom or item.rt.custom)
            rt = item.rt if rt == item.rt else rt  # the same: `is` below spares a copy per object
            self._written_as[item.rt] = rt
        if rt is None or (rt is item.rt and item.action != Action.UNAVAILABLE):
            return item
        action = Action.CREATE if item.action == Action.UNAVAILABLE else item.action
        return dataclasses.replace(item, rt=rt, action=action)
