"""Take away the pause markers a restore added, once every object of it has its status."""

from __future__ import annotations

import contextlib
import dataclasses
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from statusvault.errors import Conflict, Invalid, KubeApiError, StatusVaultError
from statusvault.kube.api import KubeApi
from statusvault.kube.transport import JSON_PATCH, MERGE_PATCH
from statusvault.model import KubeObject, ResourceType, display
from statusvault.restore.core.journal import Journal
from statusvault.restore.core.pausemarkers import RECORD, PauseOptions, still_paused, unpause_patch
from statusvault.restore.core.plan import RestorePlan
from statusvault.restore.core.servedtypes import ServedTypes
from statusvault.restore.core.settle import still_as_written

ATTEMPTS = 5


@dataclasses.dataclass
class UnpauseOutcome:
    unpaused: int = 0
    kept: int = 0  # left paused as asked (--keep-paused)
    failed: list[str] = dataclasses.field(default_factory=list)  # "<object>: <why>", still paused


def unpause_all(
    client: KubeApi,
    served: ServedTypes,
    plan: RestorePlan,
    journal: Journal,
    keep: tuple[str, ...] | None,
    parallel: int,
    group: int | None = None,
) -> UnpauseOutcome:
    """Unpause every object the journal says this restore paused (of one --order group), except types `keep` names
    (wildcards). Each unpaused with the status the restore wrote still on is handed over to its operator (the
    journal's mark says so): from then on the audit does not hold its operator's status writes against the restore.
    One whose status another writer changed while it was paused keeps its mark, and the audit names that writer."""
    keeps = PauseOptions(keep_paused=keep or ())
    outcome = UnpauseOutcome()
    todo = []
    for item in plan.paused(journal.path, group):
        if keeps.keeps(item.rt.qualified):
            outcome.kept += 1
        else:
            todo.append(served.target(item))
    targets = [(item.rt, item.namespace, item.name) for item in todo]
    marks = journal.marks_of([item.seq for item in todo])

    def unpaused(k: int, answer: KubeObject | None) -> None:
        mark = marks.get(todo[k].seq, "")
        journal.mark_unpaused(todo[k], handed_over=answer is not None and still_as_written(mark, answer))

    _unpause_each(client, targets, journal.manager, parallel, outcome, unpaused)
    return outcome


def release_left(
    client: KubeApi, left: list[tuple[ResourceType, str, str]], keep: tuple[str, ...], manager: str, parallel: int
) -> UnpauseOutcome:
    """Unpause objects an earlier run of a restore left paused (killed, its state elsewhere), once this run found
    every one of its objects with its saved status (restore/results/audit.py); types `keep` names stay paused."""
    keeps = PauseOptions(keep_paused=keep)
    outcome = UnpauseOutcome()
    todo = [(rt, ns, name) for rt, ns, name in left if not keeps.keeps(rt.qualified)]
    outcome.kept = len(left) - len(todo)
    _unpause_each(client, todo, manager, parallel, outcome)
    return outcome


def _unpause_each(
    client: KubeApi,
    targets: list[tuple[ResourceType, str, str]],
    manager: str,
    parallel: int,
    outcome: UnpauseOutcome,
    unpaused: Callable[[int, KubeObject | None], None] = lambda k, answer: None,
) -> None:
    """Unpause the targets `parallel` at a time, counting each in `outcome`; `unpaused(k, answer)` after the k-th is
    (answer: the object as its unpause left it, None when there was nothing to unpause)."""

    def one(k: int) -> str:
        rt, ns, name = targets[k]
        try:
            answer = unpause_one(client, rt, ns, name, manager)
        except StatusVaultError as e:
            return f"{display(rt.qualified, ns, name)}: {e}"
        unpaused(k, answer)
        return ""

    with ThreadPoolExecutor(max(1, parallel), thread_name_prefix="unpause") as pool:
        for problem in pool.map(one, range(len(targets))):
            if problem:
                outcome.failed.append(problem)
            else:
                outcome.unpaused += 1


def unpause_one(client: KubeApi, rt: ResourceType, namespace: str, name: str, manager: str) -> KubeObject | None:
    """Remove our marker and record with a patch guarded by resourceVersion; a lost race re-reads and retries.
    Returns the object as the unpause left it (None: deleted, or unpaused already)."""
    ns = namespace or None
    for _ in range(ATTEMPTS):
        live = client.get(rt, ns, name)
        if live is None:
            return None  # deleted since: nothing is paused any more
        patch = unpause_patch(live)
        if patch is None:
            return None  # unpaused already (an earlier run, or by hand)
        try:
            answer = client.patch(rt, ns, name, patch, JSON_PATCH, manager=manager)
        except (Conflict, Invalid):  # changed since it was read: read it again
            continue
        except KubeApiError as e:
            raise StatusVaultError(f"could not unpause: {e}") from e
        if still_paused(live, answer):
            _keep_record(client, rt, ns, name, live, manager)
            raise StatusVaultError("the server answered the unpause with the marker still on (a mutating webhook?)")
        return answer
    raise StatusVaultError("could not unpause: it kept changing under other writers")


def _keep_record(
    client: KubeApi, rt: ResourceType, ns: str | None, name: str, before: dict[str, Any], manager: str
) -> None:
    """The record of the pause put back, so that `statusvault unpause` still knows what to take away."""
    patch = {"metadata": {"annotations": {RECORD: before["metadata"]["annotations"][RECORD]}}}
    with contextlib.suppress(KubeApiError):  # the report names the object as paused all the same
        client.patch(rt, ns, name, patch, MERGE_PATCH, manager=manager)
