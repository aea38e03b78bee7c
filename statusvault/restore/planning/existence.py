"""Which objects already exist in the target cluster, for planning."""

from __future__ import annotations

import logging
import threading
from typing import Any

from statusvault.errors import Forbidden
from statusvault.kube.api import KubeApi
from statusvault.model import ResourceType
from statusvault.restore.core.fields import abandoned, status_written, written_by
from statusvault.vocabulary.kinds import CONFIGMAPS, NAMESPACES, SECRETS

log = logging.getLogger(__name__)


class ExistenceIndex:
    """Which objects already exist, from one metadata-only LIST per (resource, namespace).

    Objects this restore wrote (an earlier attempt, before --restart) do not count: the run creates them
    again, meets AlreadyExists and knows them as its own by their field manager. Nor do objects another
    statusvault restore created and left without any status (fields.abandoned): the run finishes them."""

    def __init__(self, client: KubeApi, manager: str):
        self.client = client
        self.manager = manager
        self._names: dict[tuple[str, str, str], set[str]] = {}
        self._statusless: dict[tuple[str, str, str], set[str]] = {}  # custom resources no writer gave a status
        self._lock = threading.Lock()

    def __call__(self, rt: ResourceType, namespace: str, name: str) -> bool:
        key = (rt.group, rt.resource, namespace)
        names = self._names.get(key)  # called once per planned object: no lock once the collection is listed
        if names is None:
            with self._lock:
                names = self._names.get(key)
                if names is None:
                    names = self._list(rt, namespace)
                    self._names[key] = names
        if names is _UNLISTABLE:
            return self._namespace_exists(name)
        return name in names

    def lacks_status(self, rt: ResourceType, namespace: str, name: str) -> bool:
        """Whether the existing object (as listed for __call__) has never been given a status by any writer, as its
        managedFields say (an object without managedFields says nothing: not counted)."""
        return name in self._statusless.get((rt.group, rt.resource, namespace), set())

    def differs(self, rt: ResourceType, namespace: str, name: str, saved: dict[str, Any]) -> bool:
        """Whether an existing object's content differs from the backup's (a Secret's or ConfigMap's data and type,
        else its spec): one GET; neither side is ever printed."""
        try:
            live = self.client.get(rt, namespace or None, name)
        except Forbidden:
            return False  # may not read it: nothing to compare
        if live is None:
            return False
        fields = CONTENT if rt.qualified in (SECRETS.qualified, CONFIGMAPS.qualified) else ("spec",)
        return any(live.get(f) != saved.get(f) for f in fields)

    def _list(self, rt: ResourceType, namespace: str) -> set[str]:
        if not rt.version:
            return set()
        try:
            metas = list(self.client.list_metadata(rt, namespace or None))
            finishes = rt.custom and rt.has_status  # a custom resource whose status the restore writes
            if finishes:
                self._statusless[(rt.group, rt.resource, namespace)] = {
                    m.get("name", "") for m in metas if m.get("managedFields") and not status_written(m)
                }
            return {
                m.get("name", "") for m in metas if not (written_by(m, self.manager) or (finishes and abandoned(m)))
            }
        except Forbidden:
            if rt.path(None) != NAMESPACES.path(None):
                raise
            return _UNLISTABLE  # a namespace admin may not list namespaces: ask for each one

    def _namespace_exists(self, name: str) -> bool:
        """One GET; a user not allowed even that cannot create the namespace either, so it is taken as there."""
        try:
            return self.client.get(NAMESPACES, None, name) is not None
        except Forbidden:
            log.info("not allowed to read namespace %s: assuming it exists", name)
            return True


_UNLISTABLE: set[str] = set()
CONTENT = ("data", "binaryData", "type")  # a Secret's or ConfigMap's content, as compared
