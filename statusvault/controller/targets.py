"""Where the controller records a declarative restore's progress: a restore-intent ConfigMap's status ConfigMap
(the older way), or a Restore resource's own status (controller/restores.py). The loop sees only `Target`."""

from __future__ import annotations

import datetime as dt
import logging
from typing import Protocol

from statusvault import rfc3339
from statusvault.controller.intent import STATUS_LABEL, STATUS_SUFFIX
from statusvault.errors import Conflict, StatusVaultError
from statusvault.kube.api import KubeApi
from statusvault.model import KubeObject
from statusvault.vocabulary.kinds import CONFIGMAPS, EVENTS

log = logging.getLogger(__name__)
COMPONENT = "statusvault-controller"


class Target(Protocol):
    name: str
    lease_name: str
    status: dict[str, str]  # the flat record next_step reads (phase, digest, attempts, nextAttemptAt, ...)
    kind: str  # of the report's key: "intents", "restores", "backups"
    namespace: str

    def write(self, changes: dict[str, str], drop: tuple[str, ...] = ()) -> bool:
        """Record `changes` (resourceVersion-guarded); False when it changed or went away under us."""
        ...

    def event(self, kind: str, reason: str, message: str) -> None: ...

    def gone(self) -> bool:
        """Deleted (or replaced by a new object of the same name) since it was read."""
        ...

    def describe(self) -> str:
        """How the annotation on an object left without its status names this restore."""
        ...


def involved_object(obj: KubeObject, api_version: str, kind: str, namespace: str) -> dict[str, str]:
    """What an Event on `obj` names it by (record_event's `involved`)."""
    meta = obj["metadata"]
    return {"apiVersion": api_version, "kind": kind, "name": meta["name"], "namespace": namespace,
            "uid": meta.get("uid", "")}  # fmt: skip


def record_event(
    client: KubeApi, namespace: str, holder: str, involved: dict[str, str], kind: str, reason: str, message: str
) -> None:
    """An Event on `involved` (apiVersion, kind, name, namespace, uid); never fails a restore."""
    now = rfc3339.format_seconds(dt.datetime.now(dt.UTC))
    event = {
        "apiVersion": "v1",
        "kind": "Event",
        "metadata": {"generateName": involved["name"] + "."},
        "involvedObject": involved,
        "type": kind,
        "reason": reason,
        "message": message[:1024],
        "firstTimestamp": now,
        "lastTimestamp": now,
        "count": 1,
        "source": {"component": COMPONENT},
        "reportingComponent": COMPONENT,
        "reportingInstance": holder,
    }
    try:
        client.create(EVENTS, namespace, event)
    except StatusVaultError as e:  # events are for people
        log.warning("could not record event %s on %s: %s", reason, involved["name"], e)


class ConfigMapTarget:
    """A restore intent: its outcome is the data of the ConfigMap `<intent>-status`, owned by the intent."""

    def __init__(self, client: KubeApi, namespace: str, holder: str, intent: KubeObject, current: KubeObject | None):
        self.client = client
        self.namespace = namespace
        self.holder = holder
        self.intent = intent
        self.current = current
        self.name: str = intent["metadata"]["name"]
        self.kind = "intents"
        self.lease_name = f"statusvault-restore-{self.name}"
        self.status: dict[str, str] = dict((current or {}).get("data") or {})

    def write(self, changes: dict[str, str], drop: tuple[str, ...] = ()) -> bool:
        data = {k: v for k, v in self.status.items() if k not in drop}
        data.update({k: str(v) for k, v in changes.items()})
        try:
            if self.current is None:
                self.current = self.client.create(CONFIGMAPS, self.namespace, self._new(data))
            else:
                body = {**self.current, "data": data}
                self.current = self.client.replace(CONFIGMAPS, self.namespace, self.current["metadata"]["name"], body)
        except Conflict:
            log.warning("status of intent %s changed under us; will look again next pass", self.name)
            return False
        self.status = data
        return True

    def _new(self, data: dict[str, str]) -> KubeObject:
        meta = self.intent["metadata"]
        owner = {"apiVersion": "v1", "kind": "ConfigMap", "name": self.name, "uid": meta["uid"]}
        return {
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": {
                "name": self.name + STATUS_SUFFIX,
                "labels": {STATUS_LABEL: self.name},
                "ownerReferences": [owner],
            },
            "data": data,
        }

    def event(self, kind: str, reason: str, message: str) -> None:
        involved = involved_object(self.intent, "v1", "ConfigMap", self.namespace)
        record_event(self.client, self.namespace, self.holder, involved, kind, reason, message)

    def gone(self) -> bool:
        live = self.client.get(CONFIGMAPS, self.namespace, self.name)
        return live is None or live["metadata"].get("uid") != self.intent["metadata"].get("uid")

    def describe(self) -> str:
        return f"restore intent {self.namespace}/{self.name}"
