"""Resolve ownerReferences to the owners' UIDs in the target cluster."""

from __future__ import annotations

import threading
from typing import Any

from statusvault.kube.api import KubeApi
from statusvault.restore.core.servedtypes import ServedTypes


class OwnerResolver:
    """Old UID -> new UID for owners restored in this run; a live lookup for owners already present."""

    def __init__(self, client: KubeApi, served: ServedTypes, learned: dict[str, str] | None = None):
        self.client = client
        self.served = served
        self._uids: dict[str, str] = dict(learned or {})
        self._live: dict[tuple[str, str, str, str], str | None] = {}
        self._lock = threading.Lock()

    def learn(self, old_uid: str, new_uid: str) -> None:
        with self._lock:
            self._uids[old_uid] = new_uid

    def resolve(self, ref: dict[str, Any], namespace: str) -> str | None:
        """The UID the reference must carry now, or None when the owner does not exist."""
        with self._lock:
            if ref.get("uid") in self._uids:
                return self._uids[ref["uid"]]
        group, _, version = str(ref.get("apiVersion", "")).rpartition("/")
        cache_key = (str(ref.get("apiVersion")), str(ref.get("kind")), namespace, str(ref.get("name")))
        with self._lock:
            if cache_key in self._live:
                return self._live[cache_key]
        rt = self.served.find(group, version, str(ref.get("kind", "")))
        uid = None
        if rt is not None and ref.get("name"):
            live = self.client.get(rt, namespace if rt.namespaced else None, str(ref["name"]))
            uid = (live or {}).get("metadata", {}).get("uid")
        with self._lock:
            self._live[cache_key] = uid
        return uid
