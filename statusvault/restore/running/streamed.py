"""A streamed restore: objects written as the archive's first read decides them, in bounded pages, while the
next page is read. CRDs first (then awaited), namespaces next; objects with owners wait in the plan for the
depth waves that follow the stream (docs/development/architecture.md, *Streamed restore*)."""

from __future__ import annotations

from collections.abc import Callable
from contextlib import AbstractContextManager
from typing import Any

from statusvault.restore.core.journal import Journal
from statusvault.restore.core.plan import Category, PlanItem
from statusvault.restore.core.servedtypes import ServedTypes
from statusvault.restore.running.objects import Archived
from statusvault.restore.running.waves import Handle, WaveRunner
from statusvault.runtime.killpoints import kill_point

PAGE_STEP = "restore.stream-page"  # kill points (statusvault/runtime/killpoints.py): between two pages
MID_PAGE_STEP = "restore.stream-mid-page"  # and half way through one


class StreamWriter:
    """The planner's sink: each decided item goes to the writers at once, unless an earlier run finished it.

    Phases: CRDs are written as they come; before the first other object they are drained and awaited
    (`after_crds`). Namespaces and other cluster-scoped objects follow; before the first namespaced object
    they are drained, so every namespace exists before anything is written into it. A CRD that comes later (a
    restore of part of the backup holds each one back until the first object of its type) is written at once and
    awaited before anything else is handed out. A page is what the writers may hold in flight (parallel x 4): the
    walk blocks when they are full, so memory stays flat."""

    def __init__(
        self,
        waves: WaveRunner,
        journal: Journal,
        served: ServedTypes,
        after_crds: Callable[[], None],
        page: int,
    ):
        self.waves, self.journal, self.served, self.after_crds = waves, journal, served, after_crds
        self.page = max(2, page)
        self.phase = Category.CRD
        self.handed = 0  # items handed to the writers by this run
        self._pool: AbstractContextManager[Handle] | None = None
        self._submit: Handle | None = None

    def __call__(self, item: PlanItem, obj: dict[str, Any] | None) -> None:
        if self.journal.resumed and self.journal.is_done(item.seq):
            return  # an earlier, killed run of this restore finished it
        late_crd = item.category == Category.CRD and self.phase != Category.CRD
        self._enter(item.category)
        item = self.served.target(item)
        item.old_uid = ""  # not learnt: the owned objects after the stream find their owners by name (one GET each)
        if late_crd:  # the first object of its type comes next: the CRD is written and served before it
            self.waves.offer(item, obj, self._now)
            self.after_crds()
            return
        if not item.in_archive:  # a namespace the plan adds: there before the object that needs it
            self.waves.offer(item, None, self._now)
            return
        self.waves.offer(item, obj, self._writers())
        self.handed += 1
        if self.handed % self.page == 0:
            kill_point(PAGE_STEP)
        elif self.handed % self.page == self.page // 2:
            kill_point(MID_PAGE_STEP)

    def close(self) -> None:
        """Wait for everything handed out (raises what the writers' pool raises, a cancel among them)."""
        self._drain()

    def abandon(self) -> None:
        """The walk failed: finish what runs, drop what waits."""
        pool, self._pool, self._submit = self._pool, None, None
        if pool is not None:
            pool.__exit__(RuntimeError, RuntimeError("the stream stopped"), None)

    def _enter(self, category: Category) -> None:
        """Move to the item's phase, draining (and awaiting CRDs) on the way."""
        if category == Category.CRD or category <= self.phase:
            return
        if self.phase == Category.CRD:
            self._drain()
            self.journal.flush()
            self.after_crds()
            self.phase = Category.NAMESPACE
        if category == Category.NAMESPACED:
            self._drain()
            self.phase = Category.NAMESPACED

    def _writers(self) -> Handle:
        if self._submit is None:
            self._pool = self.waves.threads()
            self._submit = self._pool.__enter__()
        return self._submit

    def _drain(self) -> None:
        pool, self._pool, self._submit = self._pool, None, None
        if pool is not None:
            pool.__exit__(None, None, None)

    def _now(self, item: PlanItem, data: Archived) -> None:
        self.waves.record(self.waves.restorer.restore(item, data), item)
