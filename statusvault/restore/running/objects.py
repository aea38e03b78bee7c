"""Restore one object: create (or update) it, then write its saved status. Results, never exceptions."""

from __future__ import annotations

import logging
from typing import Any

import orjson

from statusvault.dependencies import move_reference
from statusvault.errors import KubeApiError, StatusVaultError
from statusvault.kube.api import KubeApi
from statusvault.kube.transport import JSON_PATCH, MERGE_PATCH
from statusvault.model import DryRun, KubeObject, ResourceType
from statusvault.restore.core.journal import Journal
from statusvault.restore.core.pausemarkers import RECORD, Marker, pause_lost, unpause_patch, without_record
from statusvault.restore.core.plan import Action, PlanItem, StatusMode
from statusvault.restore.core.servedtypes import ServedTypes
from statusvault.restore.options import RestoreOptions
from statusvault.restore.ordering.order import OBSERVE
from statusvault.restore.results.report import GENERATION_NOTE, ItemResult, Outcome, StatusOutcome
from statusvault.restore.running.owners import OwnerResolver
from statusvault.restore.running.writes import ObjectWriter, ServerReply
from statusvault.transforms import ABSENT, NOT_RESTORED_ANNOTATION, remap_owner_refs, restore_diff, sanitize

log = logging.getLogger(__name__)

Archived = bytes | KubeObject | None  # an object's archived bytes, or the object as a streamed restore parsed it
SOMEONE_ELSE = (
    "created by another writer during the restore, so policy none left it without its saved status "
    "(use --existing-resource-policy update to write it)"
)


class ObjectRestorer:
    """The two passes for one object at a time; safe to call from many worker threads."""

    def __init__(self, client: KubeApi, served: ServedTypes, journal: Journal, opts: RestoreOptions):
        self.client = client
        self.served = served
        self.journal = journal
        self.opts = opts
        self.server_dry = opts.dry_run == DryRun.SERVER
        self.owners = OwnerResolver(client, served, journal.learned_uids())
        self.writer = ObjectWriter(
            client, self.server_dry, opts.existing_policy, journal.manager, journal.was_created, journal.started
        )

    def restore(self, item: PlanItem, data: Archived) -> ItemResult:
        """Restore one object from its archived bytes, or as parsed while streaming (None: a namespace the plan
        added); never raises."""
        obj: KubeObject = (
            orjson.loads(data)
            if isinstance(data, bytes)
            else data
            if data is not None
            else {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": item.name}}
        )
        result = ItemResult(
            item.rt.qualified,
            item.namespace,
            item.name,
            Outcome.FAILED,
            StatusOutcome.NOT_WRITTEN,
            old_uid=(obj.get("metadata") or {}).get("uid", ""),
            wanted=item.status_mode.wanted,
        )
        reply = ServerReply()
        try:
            obj = self._modified(item, obj, result)
            if self.opts.dry_run == DryRun.CLIENT:
                return self._preview(item, obj, result)
            self._restore(item, obj, result, reply)
        except StatusVaultError as e:
            result.message = str(e)
        except Exception as e:  # one object's surprise must not end the run
            log.debug("unexpected error restoring %s", item.display, exc_info=True)
            result.message = f"{type(e).__name__}: {e}"
        result.server_changes, result.server_warnings = tuple(reply.changes), tuple(dict.fromkeys(reply.warnings))
        return result

    def _restore(self, item: PlanItem, obj: KubeObject, result: ItemResult, reply: ServerReply) -> None:
        saved_status = obj.get("status")
        rt = self._request_type(item, obj)
        mode = item.status_mode  # subresources are per version: decide on the version written to
        if mode.wanted:
            mode = StatusMode.SUBRESOURCE if rt.has_status else StatusMode.IN_BODY
        body = self._body(item, obj, rt, mode)
        notes = self._remap_owners(item, body)
        lost = ""
        if item.action == Action.CREATE:
            live, outcome, lost = self._create(item, rt, body, result, reply)
        else:
            live, outcome = self.writer.update(rt, item, body, reply)
        if live is None:
            result.outcome = Outcome.SKIPPED
            if result.wanted:  # it did not exist when planned: someone else created it during the restore
                result.message = SOMEONE_ELSE
            else:
                result.notes = (*notes, "already exists (policy none)")
            return
        result.outcome = outcome
        meta = live.get("metadata") or {}
        result.new_uid = meta.get("uid", "")
        if item.old_uid and result.new_uid and not self.server_dry:  # an owner of something still to come
            self.owners.learn(item.old_uid, result.new_uid)
            self.journal.learn_uid(item.old_uid, result.new_uid)
        notes += _generation_notes(saved_status, meta.get("generation"))
        result.notes = tuple(notes)
        self._write_status(item, rt, mode, live, saved_status, outcome, result, reply)
        self._unmark(item, rt, live, result)
        result.pause_lost = lost  # created and its status written all the same: what is on the cluster, said

    def _write_status(
        self, item: PlanItem, rt: ResourceType, mode: StatusMode, live: KubeObject, saved: Any, outcome: str,
        result: ItemResult, reply: ServerReply,
    ) -> None:  # fmt: skip
        try:
            result.status, raced = self.writer.write_status(rt, item, mode, live, saved, outcome, reply)
        except StatusVaultError as e:  # the object is there, its status is not: a failure, never a warning
            result.status, result.message = StatusOutcome.FAILED, str(e)
            return
        result.status_mark = reply.status_mark
        if raced:
            result.notes = (*result.notes, raced)
        if result.status == StatusOutcome.MISMATCH:
            kept_out = ", ".join(str(c) for c in reply.changes if c.path.startswith("status"))
            result.message = (
                f"the server did not keep the saved status as sent ({kept_out}): its CRD's schema no longer holds "
                "those fields? A re-run cannot bring them back"
            )

    def _unmark(self, item: PlanItem, rt: ResourceType, live: KubeObject, result: ItemResult) -> None:
        """An earlier restore marked the object as left without its saved status (controller/runs.py: a retry of
        the same Restore finds its own object marked, a backup taken since carries the mark); now it has that
        status, so the mark goes. A merge patch: a mark someone took away meanwhile is no error."""
        if self.server_dry or result.status not in (StatusOutcome.WRITTEN, StatusOutcome.IN_BODY):
            return
        if NOT_RESTORED_ANNOTATION not in ((live.get("metadata") or {}).get("annotations") or {}):
            return
        patch = {"metadata": {"annotations": {NOT_RESTORED_ANNOTATION: None}}}
        try:
            self.client.patch(rt, item.namespace or None, item.name, patch, MERGE_PATCH, manager=self.journal.manager)
        except KubeApiError as e:  # the status is there all the same; the report says the mark stayed
            result.notes = (*result.notes, f"{NOT_RESTORED_ANNOTATION} stayed: {e}")
            return
        result.notes = (*result.notes, f"{NOT_RESTORED_ANNOTATION} of an earlier restore taken away")

    def _create(
        self, item: PlanItem, rt: ResourceType, body: KubeObject, result: ItemResult, reply: ServerReply
    ) -> tuple[KubeObject | None, str, str]:
        """Create the object, paused when a marker applies; the third value says why it is NOT paused although
        it was meant to be (the server dropped the marker), else ""."""
        marker = self._marker(rt, body, result)
        result.paused = self._pause(item, marker, body)
        live, outcome = self.writer.create(rt, item, body, reply)
        if outcome == Outcome.CREATED:
            self.journal.mark_created(item)  # a resumed run will know the object is its own
        if live is None or marker is None or marker.present(live):
            return live, outcome, ""
        if result.paused != "kept" and self.opts.dry_run == DryRun.NONE:
            self.journal.mark_unpaused(item)  # never paused: nothing for the unpause to take away
            live = self._drop_record(rt, item, live)
        result.paused = ""
        return live, outcome, pause_lost(marker)

    def _drop_record(self, rt: ResourceType, item: PlanItem, live: KubeObject) -> KubeObject:
        """The object is not paused: take away the record of a pause that did not hold, so that nothing on it
        claims otherwise (the object as the server returned it)."""
        patch = unpause_patch(live)  # the record only: the marker it names is not there
        if patch is None:
            return live
        try:
            return self.client.patch(rt, item.namespace or None, item.name, patch, JSON_PATCH)
        except KubeApiError as e:  # reported with the object; the unpause also removes a record left behind
            log.warning("%s: could not remove %s: %s", item.display, RECORD, e)
            return live

    def _marker(self, rt: ResourceType, body: KubeObject, result: ItemResult) -> Marker | None:
        """The object's pause marker; with --pause auto, a custom resource no profile knows is flagged
        (the report warns, once per resource type, that such objects are not paused)."""
        order = self.opts.order
        labels = (body.get("metadata") or {}).get("labels") or {}
        if order is not None and managed_resource(body) and order.observes(rt.qualified, labels):
            return OBSERVE  # a managed resource's two-phase restore: its saved managementPolicies come back at the end
        marker = self.opts.pause.marker_for(rt, body)
        result.unmarked = marker is None and self.opts.pause.auto and rt.custom and not rt.is_crd
        return marker

    def _pause(self, item: PlanItem, marker: Marker | None, body: KubeObject) -> str:
        """Add the pause marker to the create body (recorded in the journal first); "" when it is not paused
        by this restore, "kept" when the backup had it paused already (it stays paused)."""
        if marker is None:
            return ""
        if marker.present(body):
            return "kept"
        if self.opts.dry_run == DryRun.NONE:
            self.journal.mark_paused(item)
        marker.apply(body)
        return marker.describe()

    def _modified(self, item: PlanItem, obj: KubeObject, result: ItemResult) -> KubeObject:
        """The object after the restore's modifiers, patched in its target namespace; the result says which
        rules applied and which a failed `test` skipped."""
        modifiers = self.opts.modifiers
        if modifiers is None or not item.in_archive:
            return obj
        obj, changes = modifiers.apply(item.rt.qualified, obj, item.namespace if item.rt.namespaced else None)
        result.rules, result.rules_skipped = changes.applied, changes.skipped
        return obj

    def _preview(self, item: PlanItem, obj: KubeObject, planned: ItemResult) -> ItemResult:
        """A client dry run: the planned outcome, the rules that matched, and how the live object differs."""
        result = client_dry_run(item)
        result.rules, result.rules_skipped = planned.rules, planned.rules_skipped
        if item.action == Action.CREATE:
            body = self._body(item, obj, item.rt, StatusMode.NONE)
            result.paused = self._pause(item, self._marker(item.rt, body, result), body)
        if item.action not in (Action.UPDATE, Action.SKIP_EXISTS, Action.SKIP_LACKING):
            return result
        try:
            rt = self._request_type(item, obj)
            body = self._body(item, obj, rt, StatusMode.NONE)
            result.notes = (*result.notes, *self._remap_owners(item, body))
            live = self.client.get(rt, item.namespace or None, item.name)
        except StatusVaultError as e:
            result.notes = (*result.notes, f"not compared with the live object: {e}")
            return result
        if live is not None:
            saved = obj["status"] if item.status_mode.wanted and "status" in obj else ABSENT
            result.diff = tuple(restore_diff(live, body, saved))
        return result

    def _body(self, item: PlanItem, obj: KubeObject, rt: ResourceType, mode: StatusMode) -> KubeObject:
        """What is sent for the object: sanitised, in the version and namespace written (owners: _remap_owners)."""
        body = sanitize(obj, keep_status=mode == StatusMode.IN_BODY)
        without_record(body)  # a move's source was paused before its backup: restore it as its owner left it
        body["apiVersion"] = rt.api_version
        if rt.namespaced:
            body["metadata"]["namespace"] = item.namespace
        for path in self.opts.references.get((item.rt.qualified, item.source_namespace, item.name), ()):
            move_reference(body, path, self.opts.mapping)  # a dependency it names in a mapped namespace moved too
        return body

    def _request_type(self, item: PlanItem, obj: KubeObject) -> ResourceType:
        """The archived apiVersion when still served, else the preferred version."""
        group, _, version = str(obj.get("apiVersion", "")).rpartition("/")
        exact = self.served.find(group, version, str(obj.get("kind", "")))
        return exact if exact is not None and exact.qualified == item.rt.qualified else item.rt

    def _remap_owners(self, item: PlanItem, body: KubeObject) -> list[str]:
        refs = body["metadata"].get("ownerReferences")
        if not refs:
            return []
        kept, dropped = remap_owner_refs(refs, lambda ref: self.owners.resolve(ref, item.namespace))
        if kept:
            body["metadata"]["ownerReferences"] = kept
        else:
            body["metadata"].pop("ownerReferences")
        notes = [f"ownerReference to {r.get('kind')} {r.get('name')} dropped: owner not found" for r in dropped]
        for note in notes:
            log.warning("%s: %s", item.display, note)
        return notes


def _generation_notes(status: Any, generation: Any) -> list[str]:
    if not isinstance(status, dict) or "observedGeneration" not in status or generation is None:
        return []
    observed = status["observedGeneration"]
    if _as_int(observed) == _as_int(generation):  # by value: some CRDs carry it as a string ("5")
        return []
    return [f"{GENERATION_NOTE} is {observed} but the restored object's generation is {generation}"]


def _as_int(value: Any) -> Any:
    """An integer-like value (5, "5", " 5 ") as an int; anything else as it is (a bool as text: true is not 1)."""
    if isinstance(value, bool):
        return str(value)
    if isinstance(value, str):
        try:
            return int(value.strip())
        except ValueError:
            return value
    return value


def managed_resource(body: KubeObject) -> bool:
    """A Crossplane managed resource: its spec has forProvider, what managementPolicies govern. The other types of
    a provider's API groups (ProviderConfigUsage, StoreConfig, ...) have none: Observe mode means nothing to them,
    and the server prunes a managementPolicies they do not define."""
    spec = body.get("spec")
    return isinstance(spec, dict) and isinstance(spec.get("forProvider"), dict)


def not_attempted(item: PlanItem) -> ItemResult:
    wanted = item.status_mode.wanted
    if item.action == Action.SKIP_EXISTS:
        status = StatusOutcome.KEPT if wanted else _STATUS_NOT_WRITTEN.get(item.status_mode, StatusOutcome.NOT_NEEDED)
        outcome, message, wanted = Outcome.SKIPPED, "already exists (policy none)", False
    elif item.action == Action.SKIP_LACKING:  # counted: the object is there, its saved status is not
        outcome, status = Outcome.SKIPPED, StatusOutcome.NOT_WRITTEN
        message = (
            "already exists without any status (policy none): its saved status was not written; "
            "--existing-resource-policy update writes it"
        )
    elif item.action == Action.SKIP_TERMINATING:  # not restored by design, as Velero does
        outcome, status, message, wanted = (
            Outcome.SKIPPED,
            StatusOutcome.NOT_NEEDED,
            "was being deleted when backed up",
            False,
        )
    else:  # Action.UNAVAILABLE
        outcome, status = Outcome.FAILED, StatusOutcome.NOT_WRITTEN
        message = (
            f"{item.rt.qualified} is not served by this cluster and its CRD does not come with this restore "
            "(not in the backup, or left out by --include-resources/--exclude-resources)"
        )
    return ItemResult(
        item.rt.qualified,
        item.namespace,
        item.name,
        outcome,
        status,
        message=message if outcome == Outcome.FAILED else "",
        notes=(message,) if outcome != Outcome.FAILED else (),
        old_uid=item.old_uid,
        wanted=wanted,
    )


_STATUS_NOT_WRITTEN = {StatusMode.LEFT_OUT: StatusOutcome.LEFT_OUT, StatusMode.NONE: StatusOutcome.NOT_NEEDED}


def client_dry_run(item: PlanItem, note: str = "") -> ItemResult:
    if item.action in (Action.CREATE, Action.UPDATE):
        outcome = Outcome.WOULD_CREATE if item.action == Action.CREATE else Outcome.WOULD_UPDATE
        status = {
            StatusMode.NONE: StatusOutcome.NOT_NEEDED,
            StatusMode.LEFT_OUT: StatusOutcome.LEFT_OUT,
            StatusMode.IN_BODY: StatusOutcome.IN_BODY,
            StatusMode.SUBRESOURCE: StatusOutcome.WOULD_WRITE,
        }[item.status_mode]
        notes = (note,) if note else ()
        return ItemResult(
            item.rt.qualified,
            item.namespace,
            item.name,
            outcome,
            status,
            notes=notes,
            old_uid=item.old_uid,
            wanted=item.status_mode.wanted,
        )
    return not_attempted(item)
