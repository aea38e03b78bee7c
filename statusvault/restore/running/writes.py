"""The writes of one object: create (or update), then its status. Conflicts are re-read and retried. What the
server changed of what was sent, and what it warned about, is gathered on the way."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

from statusvault import rfc3339
from statusvault.errors import AlreadyExists, Conflict, Invalid, KubeApiError, StatusVaultError
from statusvault.kube.api import KubeApi
from statusvault.kube.transport import JSON_PATCH
from statusvault.model import KubeObject, ResourceType
from statusvault.restore.core.fields import abandoned, written_by
from statusvault.restore.core.plan import PlanItem, StatusMode
from statusvault.restore.core.settle import write_mark
from statusvault.restore.options import ExistingPolicy
from statusvault.restore.results.report import Outcome, StatusOutcome
from statusvault.transforms import ServerChange, contains, object_changes, status_body, status_changes, update_patch

ATTEMPTS = 5
RACED = (
    "another writer (its operator?) wrote a status between the create and the saved status; the saved status "
    "won, but the operator may have acted on it (re-provisioned?): use --pause or --scale-down"
)
CLOCK_SKEW = 120.0  # seconds of disagreement tolerated between this machine and the API server


def _bare(body: KubeObject) -> bool:
    """A body with no field a field manager could own."""
    return set(body) <= {"apiVersion", "kind", "metadata"} and set(body.get("metadata") or {}) <= {"name", "namespace"}


def _created_at(meta: dict[str, Any]) -> float:
    created = rfc3339.parse_or_none(str(meta.get("creationTimestamp") or ""))
    return created.timestamp() if created is not None else 0.0


@dataclasses.dataclass(slots=True)
class ServerReply:
    """What the server did with one object's writes beyond taking them: the fields of what was sent that it
    dropped or changed, and the texts of its Warning headers. Not gathered in dry runs: nothing was changed."""

    changes: list[ServerChange] = dataclasses.field(default_factory=list)
    warnings: list[str] = dataclasses.field(default_factory=list)
    status_mark: str = ""  # write_mark of the answer to this restore's status write (restore/core/settle.py)
    found: bool = False  # the create met the object already there (a resumed run's own): its body was not the answer


class ObjectWriter:
    """Writes under `manager`, a field manager unique to one restore (its journal): an object whose
    managedFields name it was created by this restore, whatever the server or a webhook changed in it."""

    def __init__(
        self,
        client: KubeApi,
        server_dry: bool,
        policy: ExistingPolicy,
        manager: str,
        created_before: Callable[[PlanItem], bool] = lambda item: False,
        started: float = 0.0,
    ):
        self.started = started  # when the restore began (its plan was made)
        self.created_before = created_before  # by an earlier run of the same (resumed) restore, per its journal
        self.client = client
        self.server_dry = server_dry
        self.policy = policy
        self.manager = manager

    def create(
        self, rt: ResourceType, item: PlanItem, body: KubeObject, reply: ServerReply
    ) -> tuple[KubeObject | None, str]:
        """Create; on AlreadyExists apply the policy. Returns (live object or None when skipped, outcome).

        Only the create's own answer is compared with the body: an object found at AlreadyExists may have been
        changed since by other writers."""
        try:
            created = self.client.create(
                rt, item.namespace or None, body, self.server_dry, self.manager, self._heard(reply)
            )
        except AlreadyExists:
            live = self.client.get(rt, item.namespace or None, item.name)
            if live is not None and (self.wrote(live, body) or self.created_before(item) or self._adopts(live, item)):
                reply.found = True
                return live, Outcome.CREATED  # a resent POST whose first attempt succeeded, or a resumed run's
            if self.policy != ExistingPolicy.UPDATE:
                return None, Outcome.SKIPPED
            return self.update(rt, item, body, reply)  # appeared since the plan was made
        if self.server_dry:  # the dry run's answer is what the real create would keep: a pruned status is said
            if "status" in body:
                reply.changes += status_changes(body["status"], created)
            return created, Outcome.WOULD_CREATE
        reply.changes += object_changes(body, created)
        return created, Outcome.CREATED

    def _adopts(self, live: KubeObject, item: PlanItem) -> bool:
        """An object an earlier statusvault restore created and left without the status this one writes."""
        return item.status_mode.wanted and abandoned(live.get("metadata") or {})

    def _heard(self, reply: ServerReply) -> list[str] | None:
        """Where a write's Warning texts go; none in a dry run."""
        return None if self.server_dry else reply.warnings

    def wrote(self, live: KubeObject, body: KubeObject) -> bool:
        """Whether this restore created `live` from `body`.

        The API server drops a manager that owns no field, so a body with nothing but a name leaves no
        trace: such an object is ours when no writer owns any field of it and it is younger than the restore
        (any other writer's content would name that writer)."""
        meta = live.get("metadata") or {}
        if written_by(meta, self.manager):
            return True
        return _bare(body) and not meta.get("managedFields") and _created_at(meta) >= self.started - CLOCK_SKEW

    def update(
        self, rt: ResourceType, item: PlanItem, body: KubeObject, reply: ServerReply
    ) -> tuple[KubeObject | None, str]:
        """Patch the live object's content to the backup's, guarded by its resourceVersion."""
        outcome = Outcome.WOULD_UPDATE if self.server_dry else Outcome.UPDATED
        ns = item.namespace or None
        for _ in range(ATTEMPTS):
            live = self.client.get(rt, ns, item.name)
            if live is None:
                raise StatusVaultError(f"{item.display} disappeared during the restore")
            patch = update_patch(live, body)
            if not patch:
                return live, outcome
            try:
                patched = self.client.patch(
                    rt, ns, item.name, patch, JSON_PATCH, self.server_dry, manager=self.manager,
                    warnings=self._heard(reply),
                )  # fmt: skip
            except (Conflict, Invalid):
                if not self._changed_since(rt, ns, item.name, live):
                    raise  # a real rejection, not a lost race
                continue
            if not self.server_dry:  # the patch leaves the status to the status write
                reply.changes += object_changes(body, patched, with_status=False)
            return patched, outcome
        raise StatusVaultError(f"{item.display}: update kept conflicting with another writer")

    def _changed_since(self, rt: ResourceType, ns: str | None, name: str, seen: KubeObject) -> bool:
        """A failed `test` op comes back as a plain 422: it was a race only if the object moved on."""
        fresh = self.client.get(rt, ns, name)
        version = (seen.get("metadata") or {}).get("resourceVersion")
        return fresh is not None and (fresh.get("metadata") or {}).get("resourceVersion") != version

    def write_status(
        self,
        rt: ResourceType,
        item: PlanItem,
        mode: StatusMode,
        live: KubeObject,
        saved: Any,
        outcome: str,
        reply: ServerReply,
    ) -> tuple[str, str]:
        """Write the saved status the way this resource takes it; return the status outcome and a note ("" or
        what another writer did first). Saved fields the server dropped or changed go to `reply`."""
        if not mode.wanted:
            return StatusOutcome.LEFT_OUT if mode == StatusMode.LEFT_OUT else StatusOutcome.NOT_NEEDED, ""
        created = outcome in (Outcome.CREATED, Outcome.WOULD_CREATE)
        if mode == StatusMode.IN_BODY:
            if created and not reply.found:  # it travelled in the create body, compared with the create's answer
                reply.status_mark = "" if self.server_dry else write_mark(live)
                return _kept(reply.changes, StatusOutcome.IN_BODY), ""
            return self._put_status(rt, item, live, saved, None, created, reply)  # the patch never touches status
        if self.server_dry and created:
            return StatusOutcome.WOULD_WRITE, ""  # nothing was persisted to write it on
        return self._put_status(rt, item, live, saved, "status", created, reply)

    def _put_status(
        self,
        rt: ResourceType,
        item: PlanItem,
        live: KubeObject,
        saved: Any,
        sub: str | None,
        created: bool,
        reply: ServerReply,
    ) -> tuple[str, str]:
        ns = item.namespace or None
        note = ""
        for _ in range(ATTEMPTS):
            try:
                body = status_body(live, saved)
                out = self.client.replace(
                    rt, ns, item.name, body, self.server_dry, sub, self.manager, self._heard(reply)
                )
            except Conflict as e:
                fresh = self.client.get(rt, ns, item.name)
                if fresh is None:
                    raise StatusVaultError("status write failed: the object was deleted") from e
                if created and fresh.get("status") and not contains(fresh.get("status"), saved):
                    note = RACED  # not our own lost write: someone acted on the object without its status
                live = fresh
                continue
            except KubeApiError as e:
                raise StatusVaultError(f"status write failed: {e}") from e
            if self.server_dry:
                return StatusOutcome.WOULD_WRITE, note
            reply.changes += status_changes(saved, out)
            reply.status_mark = write_mark(out)
            return _kept(reply.changes, StatusOutcome.WRITTEN), note
        raise StatusVaultError("status write kept conflicting (409) with another writer")


def _kept(changes: list[ServerChange], ok: str) -> str:
    """ok when the server kept every saved status field as sent; a status it pruned or changed is not the saved
    status: a MISMATCH (a failure of the object, whatever --strict says)."""
    return StatusOutcome.MISMATCH if any(c.path.startswith("status") for c in changes) else ok
