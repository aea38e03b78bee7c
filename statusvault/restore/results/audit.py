"""Before a restore reports, it reads the cluster: every object whose saved status the restore must leave there is
looked up, whatever this run or an earlier run of it did, and the verdict counts what the cluster holds.

An object is short when it is not on the cluster, when no run of this restore has written its saved status (the
journal keeps no mark of it: it failed, was never reached, or was found without it), or when its status is not the
one the restore's status write left (another writer wrote it since). An object the restore paused is judged when it
is handed back to its operator: unpaused with its saved status on, its status is its operator's from then on
(quiet/unpause.py), and the audit only checks that it is there. The cost is the settle check's: one
metadata-only LIST per resource and namespace, then a whole read of only the objects whose resourceVersion moved on
since the restore's write (restore/core/settle.py). What it finds short is taken out of the journal's done
objects, so the same command writes it again; the journal is kept until an audit finds nothing short.

An object whose fields a run sent and the server dropped or changed (the journal's `changed`) is read whole, and
counted while any of them is still missing or different: what --strict judges, whichever run wrote it."""

from __future__ import annotations

import dataclasses
import itertools
import logging
import time
from typing import Protocol

from statusvault.kube.api import KubeApi
from statusvault.model import ResourceType, display, writes_status
from statusvault.restore.core.fields import status_writers_since
from statusvault.restore.core.journal import HANDED_OVER, Journal
from statusvault.restore.core.plan import RestorePlan
from statusvault.restore.core.settle import Overwritten, compare_marks, listed, read_whole
from statusvault.transforms import ServerChange, still_changed

log = logging.getLogger(__name__)
NAMED = 20  # objects the audit names; the rest are counted


@dataclasses.dataclass
class Audit:
    checked: int = 0  # objects in scope, looked up on the cluster
    lacking: int = 0  # not on the cluster, or never given their saved status by a run of this restore
    lacking_named: list[str] = dataclasses.field(default_factory=list)
    overwritten: Overwritten = dataclasses.field(default_factory=Overwritten)  # their status written since
    # objects with their saved status that still carry a statusvault pause this run did not make (a killed earlier
    # run's): the run releases them (runner._audited)
    left_paused: list[tuple[ResourceType, str, str]] = dataclasses.field(default_factory=list)
    # objects still without a field a run of this restore sent and the server dropped or changed (a pruning schema,
    # a webhook): short under --strict, whichever run wrote them
    server_changed: int = 0
    server_changed_named: list[str] = dataclasses.field(default_factory=list)
    seconds: float = 0.0  # what reading the cluster back took
    cpu_seconds: float = 0.0  # ... of this process's CPU (make bench: its cost per object)

    def lack(self, where: str) -> None:
        self.lacking += 1
        if len(self.lacking_named) < NAMED:
            self.lacking_named.append(where)

    @property
    def short(self) -> int:
        return self.lacking + self.overwritten.count

    def to_dict(self) -> dict[str, object]:
        return {
            "checked": self.checked,
            "withoutSavedStatus": self.lacking,
            "objects": self.lacking_named,
            "statusWrittenSince": self.overwritten.count,
            "serverChanged": self.server_changed,
            "seconds": round(self.seconds, 3),
            "cpuMsPerObject": round(1000 * self.cpu_seconds / self.checked, 4) if self.checked else 0.0,
        }


class Served(Protocol):
    def by_qualified(self, qualified: str) -> ResourceType | None: ...


def audit(client: KubeApi, served: Served, plan: RestorePlan, journal: Journal, strict: bool = False) -> Audit:
    """Every object in the restore's scope read back and compared with what the journal says its status write left;
    what is short is no longer done in the journal (a re-run writes it again). Objects carrying a statusvault pause
    record that this run did not pause itself (an earlier run's, killed, with another state directory) are listed
    in `left_paused` for the run to release. `strict`: the objects whose fields the server did not keep are read
    whole too (--strict judges them; else they are not looked at)."""
    journal.flush()
    started, cpu = time.monotonic(), time.process_time()
    out = Audit()
    undo: list[int] = []
    changed: dict[int, list[ServerChange]] = journal.changed() if strict else {}
    kept: list[int] = []
    for (resource, namespace), rows in itertools.groupby(plan.audited(journal.path), key=lambda r: r[:2]):
        group = list(rows)
        scoped = [r for r in group if r.in_scope]
        out.checked += len(scoped)
        out.overwritten.checked += len(scoped)
        rt = served.by_qualified(resource)
        for r in scoped:
            if rt is None or not (r.mark or r.done):  # never written by a run of this restore (or its type not served)
                out.lack(display(resource, namespace, r.name))
        if rt is None:
            continue
        live = listed(client, rt, namespace, {r.name for r in group})
        marks = {r.name: r.mark for r in scoped if r.mark and r.mark != HANDED_OVER}
        gone, again = compare_marks(client, rt, namespace, marks, journal.manager, out.overwritten, live)
        gone |= {r.name for r in scoped if r.mark == HANDED_OVER and r.name not in live}
        unmarked = [r.name for r in scoped if r.done and not r.mark]  # an older release's journal
        gone |= _unmarked(client, rt, namespace, unmarked, journal.manager, out.overwritten, again)
        for name in sorted(gone):
            out.lack(f"{display(resource, namespace, name)} (not on the cluster)")
        seqs = {r.name: r.seq for r in group}
        undo += [seqs[name] for name in (*gone, *again)]
        short = gone | set(again) | {r.name for r in scoped if not (r.mark or r.done)}
        paused_before = [r.name for r in group if live.get(r.name, ("", False))[1] and not r.paused]
        out.left_paused += [(rt, namespace, name) for name in paused_before if name not in short]
        if changed:  # --strict, and some write was not kept: else no pass over the rows for it
            here = {r.name: r.seq for r in scoped if r.seq in changed and r.name in live and r.name not in gone}
            kept += _changed_still(client, rt, namespace, here, changed, out) if here else []
    if kept:
        journal.kept_now(kept)
    if undo:
        journal.undo(undo)
        log.info("the audit found %d object(s) short of what the journal had as done: a re-run writes them", len(undo))
    out.seconds, out.cpu_seconds = time.monotonic() - started, time.process_time() - cpu
    return out


def _changed_still(
    client: KubeApi,
    rt: ResourceType,
    namespace: str,
    objects: dict[str, int],
    changed: dict[int, list[ServerChange]],
    out: Audit,
) -> list[int]:
    """Each object (name -> seq) a run found the server had not kept in full, read whole (a GET each when they are
    few, else one LIST): still short while any field it sent is missing or holds another value. Returns those that
    hold what was sent now (a later write kept it, or someone fixed it)."""
    kept = []
    for obj in read_whole(client, rt, namespace, list(objects), set()):  # gone since it was listed: next time
        name = obj["metadata"]["name"]
        seq = objects[name]
        still = [c for c in changed[seq] if still_changed(obj, c)]
        if not still:
            kept.append(seq)
            continue
        out.server_changed += 1
        if len(out.server_changed_named) < NAMED:
            out.server_changed_named.append(f"{display(rt.qualified, namespace, name)}: {', '.join(map(str, still))}")
    return kept


def _unmarked(
    client: KubeApi,
    rt: ResourceType,
    namespace: str,
    names: list[str],
    manager: str,
    out: Overwritten,
    again: list[str],
) -> set[str]:
    """Objects an older release's run of this restore finished without keeping a mark: each is read whole, and is
    this restore's when its field manager wrote the status and no other writer has since (by managedFields).
    Returns those not on the cluster; those written since join `again`."""
    gone = set()
    for name in names:
        obj = client.get(rt, namespace or None, name)
        if obj is None:
            gone.add(name)
            continue
        meta = obj.get("metadata") or {}
        others = status_writers_since(meta, manager)
        if others or not any(e.get("manager") == manager and writes_status(e) for e in meta.get("managedFields") or []):
            again.append(name)
            writers = ", ".join(others) or "a writer managedFields do not name"
            out.add(f"{display(rt.qualified, namespace, name)}: status written since by {writers}")
    return gone
