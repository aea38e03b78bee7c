"""Restore and Backup resources (statusvault.dev/v1alpha1): a Restore's spec as an Intent, and either one's
status (kstatus conditions, observedGeneration, counts, times) as the controller's record of it."""

from __future__ import annotations

import datetime as dt
import logging
from typing import Any

import orjson

from statusvault import rfc3339
from statusvault.controller import crd
from statusvault.controller.conditions import conditions, retrying
from statusvault.controller.intent import Intent, digest_of
from statusvault.controller.targets import involved_object, record_event
from statusvault.errors import ConfigError, Conflict, NotFound
from statusvault.flagtable import value_key
from statusvault.kube.api import KubeApi
from statusvault.model import KubeObject, ResourceType
from statusvault.restore.options import PARALLEL, RESTORE_VALUES, FenceMode, parse_at, restore_options
from statusvault.storage.base import validate_backup_name

log = logging.getLogger(__name__)
RESTORES = ResourceType(crd.GROUP, crd.VERSION, crd.PLURAL, crd.KIND, namespaced=True, has_status=True)
BACKUPS = ResourceType(crd.GROUP, crd.VERSION, crd.BACKUP_PLURAL, crd.BACKUP_KIND, namespaced=True, has_status=True)
OWN_FIELDS = ("backup", "storage", "parallel", "processes", "modifiers", crd.SERVICE_ACCOUNT)  # not restore options
# read into the Intent beside the restore options
INTENT_FIELDS = ("stream", "from-velero", "verify-key-file", "verify-kms-key-id", "strict", "at")


def spec_digest(obj: KubeObject) -> str:
    spec = obj.get("spec") or {}
    return digest_of({k: orjson.dumps(v, option=orjson.OPT_SORT_KEYS).decode() for k, v in spec.items()})


def parse_restore(obj: KubeObject) -> Intent:
    """The restore a Restore's spec asks for; ConfigError names what is wrong (the schema refuses most of it
    at admission; the option table's own checks run here too)."""
    meta = obj.get("metadata") or {}
    spec: dict[str, Any] = obj.get("spec") or {}
    backup = str(spec.get("backup") or "").strip()
    if not backup:
        raise ConfigError("spec.backup is missing: name the backup to restore")
    validate_backup_name(backup)
    values = {
        value_key(f"--{k}"): tuple(v) if isinstance(v, list) else v for k, v in spec.items() if k not in OWN_FIELDS
    }
    options = restore_options(values, files=False)
    if options.fence == FenceMode.REPORT:
        raise ConfigError("spec.fence report plans the fencing and writes nothing, and a Restore restores: preview "
                          "the plan with `statusvault restore BACKUP --fence report`")  # fmt: skip
    unread = sorted(
        k for k in spec if k not in (*OWN_FIELDS, *INTENT_FIELDS) and value_key(f"--{k}") not in RESTORE_VALUES
    )
    if unread:  # a field of the schema no part of a Restore reads: refused, never dropped
        raise ConfigError(f"spec field(s) {', '.join(unread)} are not honoured by the controller")
    return Intent(
        meta.get("name", ""),
        meta.get("namespace", ""),
        meta.get("uid", ""),
        backup,
        str(spec.get("storage") or "").strip() or None,
        options,
        int(spec.get("parallel") or PARALLEL),
        spec_digest(obj),
        str(spec.get("modifiers") or "").strip(),
        int(spec.get("processes") or 0),
        spec["stream"] if isinstance(spec.get("stream"), bool) else None,
        str(spec.get(crd.SERVICE_ACCOUNT) or "").strip(),
        spec.get("from-velero") is True,
        tuple(str(v) for v in spec.get("verify-key-file") or ()),
        tuple(str(v) for v in spec.get("verify-kms-key-id") or ()),
        spec.get("strict") is True,
        _moment(spec.get("at")),
    )


def _moment(at: Any) -> str:
    """spec.at as restore --at takes it (checked now: a bad one is the Restore's own problem, never retried)."""
    if at is None or at == "":
        return ""
    parse_at(str(at))
    return str(at)


def flat_status(status: dict[str, Any]) -> dict[str, str]:
    """A Restore's status as the flat record the loop keeps for every target."""
    keys = (*crd.STATUS_INTS, *crd.STATUS_INTS_MORE, *crd.STATUS_STRINGS)
    return {k: str(status[k]) for k in keys if status.get(k) is not None}


def typed_status(flat: dict[str, str]) -> dict[str, Any]:
    ints = {*crd.STATUS_INTS, *crd.STATUS_INTS_MORE}
    return {k: int(v) if k in ints else v for k, v in flat.items() if k in ints or k in crd.STATUS_STRINGS}


class ResourceTarget:
    """A Restore or Backup in the controller's namespace: the outcome is its own /status."""

    def __init__(self, client: KubeApi, holder: str, obj: KubeObject, rt: ResourceType = RESTORES):
        self.client = client
        self.holder = holder
        self.obj = obj
        self.rt = rt
        self.kind = rt.resource
        meta = obj["metadata"]
        self.name: str = meta["name"]
        self.namespace: str = meta["namespace"]
        self.lease_name = f"statusvault-{rt.resource}-{self.name}"  # never an intent's (statusvault-restore-<name>)
        self.status = flat_status(obj.get("status") or {})

    def write(self, changes: dict[str, str], drop: tuple[str, ...] = ()) -> bool:
        flat = {k: v for k, v in self.status.items() if k not in drop}
        flat.update({k: str(v) for k, v in changes.items()})
        generation = int(self.obj["metadata"].get("generation") or 0)
        flat["observedGeneration"] = str(generation)
        status = typed_status(flat)
        now = rfc3339.format_seconds(dt.datetime.now(dt.UTC))
        previous = (self.obj.get("status") or {}).get("conditions") or []
        reason, message = flat.get("reason", ""), flat.get("message", "")
        phase = flat.get("phase", "")
        status["conditions"] = conditions(phase, reason, message, generation, now, previous, retrying(flat))
        try:
            self.obj = self.client.replace(
                self.rt, self.namespace, self.name, {**self.obj, "status": status}, sub="status"
            )
        except (NotFound, Conflict) as e:  # changed, or deleted: the next pass sees what is there
            log.warning("%s changed under us (%s); will look again next pass", self.describe(), e)
            return False
        self.status = flat
        return True

    def event(self, kind: str, reason: str, message: str) -> None:
        involved = involved_object(self.obj, crd.API_VERSION, self.rt.kind, self.namespace)
        record_event(self.client, self.namespace, self.holder, involved, kind, reason, message)

    def gone(self) -> bool:
        live = self.client.get(self.rt, self.namespace, self.name)
        meta = (live or {}).get("metadata") or {}
        return live is None or meta.get("uid") != self.obj["metadata"].get("uid") or "deletionTimestamp" in meta

    def describe(self) -> str:
        return f"{self.rt.kind} {self.namespace}/{self.name}"
