"""A coordination.k8s.io/v1 Lease as a lock: one controller replica restores an intent at a time.

Acquire and renew are optimistic (the write carries the resourceVersion it read); a Lease whose holder stopped
renewing for leaseDurationSeconds may be taken over.
"""

from __future__ import annotations

import datetime as dt
import logging
import threading
import time
from typing import Any

from statusvault import rfc3339
from statusvault.errors import Conflict, KubeApiError
from statusvault.kube.api import KubeApi
from statusvault.model import KubeObject
from statusvault.vocabulary.kinds import LEASES

log = logging.getLogger(__name__)


def held_by_other(lease: KubeObject | None, holder: str, now: dt.datetime) -> bool:
    """True when someone else holds the Lease and has renewed it within its duration."""
    spec: dict[str, Any] = (lease or {}).get("spec") or {}
    other = spec.get("holderIdentity")
    if not other or other == holder:
        return False
    renewed = rfc3339.parse_or_none(spec.get("renewTime") or spec.get("acquireTime") or "")
    duration = int(spec.get("leaseDurationSeconds") or 0)
    return renewed is not None and now < renewed + dt.timedelta(seconds=duration)


class Lease:
    def __init__(self, client: KubeApi, namespace: str, name: str, holder: str, duration: int = 60):
        self.client = client
        self.namespace = namespace
        self.name = name
        self.holder = holder
        self.duration = duration
        self._stop = threading.Event()
        self._renewer: threading.Thread | None = None
        self.lost = threading.Event()

    def acquire(self) -> bool:
        """Take the Lease if it is free, ours, or expired; False when another holder has it (or won a race)."""
        now = dt.datetime.now(dt.UTC)
        live = self.client.get(LEASES, self.namespace, self.name)
        if held_by_other(live, self.holder, now):
            return False
        spec = {
            "holderIdentity": self.holder,
            "leaseDurationSeconds": self.duration,
            "acquireTime": rfc3339.format_micro(now),
            "renewTime": rfc3339.format_micro(now),
            "leaseTransitions": int(((live or {}).get("spec") or {}).get("leaseTransitions") or 0) + (live is not None),
        }
        try:
            if live is None:
                body = {"apiVersion": "coordination.k8s.io/v1", "kind": "Lease", "metadata": {"name": self.name}}
                self.client.create(LEASES, self.namespace, {**body, "spec": spec})
            else:
                self.client.replace(LEASES, self.namespace, self.name, {**live, "spec": spec})
        except Conflict:  # another replica got there first
            return False
        self._start_renewing()
        return True

    def _start_renewing(self) -> None:
        self._stop.clear()
        self.lost.clear()
        self._renewer = threading.Thread(target=self._renew_loop, name=f"lease-{self.name}", daemon=True)
        self._renewer.start()

    def _renew_loop(self) -> None:
        renewed = time.monotonic()
        while not self._stop.wait(self.duration / 3):
            try:
                if not self.renew():
                    log.error("lost lease %s/%s to another holder", self.namespace, self.name)
                    self.lost.set()
                    return
                renewed = time.monotonic()
            except Exception as e:  # an API hiccup: try again at the next tick, until the lease expires
                log.warning("could not renew lease %s/%s: %s", self.namespace, self.name, e)
                if time.monotonic() - renewed > self.duration:  # expired by now: another replica may hold it
                    log.error("lease %s/%s expired without renewal", self.namespace, self.name)
                    self.lost.set()
                    return

    def renew(self) -> bool:
        """Push renewTime forward; False once the Lease is gone or held by someone else."""
        for _ in range(3):
            live = self.client.get(LEASES, self.namespace, self.name)
            if live is None or (live.get("spec") or {}).get("holderIdentity") != self.holder:
                return False
            live["spec"]["renewTime"] = rfc3339.format_micro(dt.datetime.now(dt.UTC))
            try:
                self.client.replace(LEASES, self.namespace, self.name, live)
                return True
            except Conflict:
                pass
        return False

    def release(self) -> None:
        """Stop renewing and clear the holder, so another replica need not wait for expiry."""
        self._stop.set()
        if self._renewer is not None:
            self._renewer.join()
            self._renewer = None
        try:
            live = self.client.get(LEASES, self.namespace, self.name)
            if live is not None and (live.get("spec") or {}).get("holderIdentity") == self.holder:
                live["spec"].pop("holderIdentity", None)
                self.client.replace(LEASES, self.namespace, self.name, live)
        except KubeApiError as e:
            log.warning("could not release lease %s/%s: %s (it expires by itself)", self.namespace, self.name, e)
