"""The writer lease on a backup's name (`backups/NAME/writer.json`): taken before a backup writes anything,
renewed while it writes, removed once its manifest has landed. A run that finds no manifest under the name tells
from the lease whether another run is writing that backup (refused) or a stopped run left it (replaced)."""

from __future__ import annotations

import dataclasses
import datetime as dt
import logging
import os
import socket
import threading
import uuid
from collections.abc import Callable
from pathlib import Path
from types import TracebackType
from typing import Any

import orjson

from statusvault import rfc3339
from statusvault.errors import BackupBusyError, BackupExistsError, LeaseLostError, StorageError
from statusvault.storage.base import ObjectStore, backup_prefix, manifest_key, put_if, read_versioned, writer_key

log = logging.getLogger(__name__)

LEASE_SECONDS = 60.0  # a lease not renewed for this long (by the store's clock) is a stopped run's
RENEW_SECONDS = 10.0  # how often a writer renews it: five renewals in a row may fail before it can be taken
MAX_LEASE_SECONDS = 3600.0  # the longest duration a lease may claim for itself
MAX_LEASE_BYTES = 64 << 10
KIND = "statusvault-writer"


def process_start(pid: int) -> int | None:
    """When process `pid` started, in clock ticks after boot; None when no such process is running."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
        fields = stat.rsplit(")", 1)[1].split()  # after the command name, which may hold anything
        return None if fields[0] == "Z" else int(fields[19])  # a zombie has ended
    except (OSError, IndexError, ValueError):
        return None


def _read(path: str) -> str:
    try:
        return Path(path).read_text().strip()
    except OSError:
        return ""


def _pid_namespace() -> str:
    try:
        return os.readlink("/proc/self/ns/pid")
    except OSError:
        return ""


@dataclasses.dataclass(frozen=True)
class Process:
    """A process as a lease names it. Within one boot and PID namespace (Linux) a PID whose start time no longer
    matches tells that the process has ended, without waiting for its lease to expire."""

    host: str
    pid: int
    boot_id: str = ""
    pid_namespace: str = ""
    start: int | None = None  # clock ticks after boot

    @classmethod
    def this(cls) -> Process:
        pid = os.getpid()
        boot = _read("/proc/sys/kernel/random/boot_id")
        return cls(socket.gethostname(), pid, boot, _pid_namespace(), process_start(pid))

    def same_namespace(self, other: Process) -> bool:
        """Both in one PID namespace of one boot, where a PID means the same process to both."""
        here = (self.boot_id, self.pid_namespace)
        return all(here) and here == (other.boot_id, other.pid_namespace)


@dataclasses.dataclass(frozen=True)
class WriterRecord:
    """What writer.json holds: which run writes the backup, and for how long its lease holds unrenewed."""

    writer: str  # random, one per run: how a run knows its own lease
    backup: str
    process: Process
    since: str  # when the run took the lease, by its own clock: shown, never compared
    lease_seconds: float = LEASE_SECONDS
    renewals: int = 0

    def to_json(self) -> bytes:
        p = self.process
        body = {
            "kind": KIND,
            "writer": self.writer,
            "backup": self.backup,
            "host": p.host,
            "pid": p.pid,
            "bootId": p.boot_id,
            "pidNamespace": p.pid_namespace,
            "processStart": p.start,
            "since": self.since,
            "leaseSeconds": self.lease_seconds,
            "renewals": self.renewals,
        }
        return orjson.dumps(body, option=orjson.OPT_INDENT_2)

    @classmethod
    def parse(cls, data: bytes) -> WriterRecord | None:
        """The record, or None when `data` is not one (a lease is then kept for the default duration)."""
        try:
            d: Any = orjson.loads(data)
            if not isinstance(d, dict) or d.get("kind") != KIND:
                return None
            start = d.get("processStart")
            process = Process(str(d["host"]), _int(d["pid"]), str(d.get("bootId") or ""),
                              str(d.get("pidNamespace") or ""), None if start is None else _int(start))  # fmt: skip
            seconds = d.get("leaseSeconds", LEASE_SECONDS)
            if not isinstance(seconds, int | float) or isinstance(seconds, bool):
                return None
            return cls(str(d["writer"]), str(d["backup"]), process, str(d["since"]), float(seconds),
                       _int(d.get("renewals", 0)))  # fmt: skip
        except (orjson.JSONDecodeError, KeyError, TypeError, ValueError):
            return None

    def describe(self) -> str:
        return f"{self.process.host} (pid {self.process.pid}) since {self.since}"


def _int(value: Any) -> int:
    if not isinstance(value, int) or isinstance(value, bool):
        raise ValueError(f"not an integer: {value!r}")
    return value


def stale_reason(
    record: WriterRecord | None,
    age: float,
    here: Process,
    start_of: Callable[[int], int | None] = process_start,
) -> str | None:
    """Why a lease no longer protects its writer, or None while it does: it was renewed within its duration (its
    age by the store's clock) and its process is not one this machine knows to have ended."""
    duration = LEASE_SECONDS if record is None else min(record.lease_seconds, MAX_LEASE_SECONDS)
    if age >= duration:
        return f"its writer lease was last renewed {age:.0f}s ago"
    p = record.process if record is not None else None
    if p is not None and p.start is not None and p.same_namespace(here) and start_of(p.pid) != p.start:
        return f"its writer's process ({p.host}, pid {p.pid}) has ended"
    return None


class WriterLease:
    """This run's lease on a backup's name. As a context manager it is renewed on a thread while the run
    writes, and removed on the way out (unless another run has taken it over: then it is theirs)."""

    def __init__(self, store: ObjectStore, name: str, lease_seconds: float, renew_seconds: float):
        self.store, self.name, self.key = store, name, writer_key(name)
        since = rfc3339.format_seconds(dt.datetime.now(dt.UTC))
        self.record = WriterRecord(uuid.uuid4().hex, name, Process.this(), since, lease_seconds)
        self.renew_seconds = renew_seconds
        self.version: str | None = None  # of this run's last write of the lease
        self.lost = threading.Event()
        self._stop = threading.Event()
        self._lock = threading.Lock()  # one write of the lease at a time: each names the version before it

    def take(self, over: str | None) -> bool:
        """Write this run's lease where there is none (over None) or over the version judged stale."""
        self.version = put_if(self.store, self.key, self.record.to_json(), over)
        return self.version is not None

    def renew(self) -> None:
        """Write the lease again, over this run's own last write only. LeaseLostError when another run has taken
        it or it is gone: the run must stop, landing nothing. It is also the check before each landing."""
        with self._lock:
            self._renew()

    def _renew(self) -> None:
        if self.lost.is_set():
            raise self.lost_error()
        renewed = dataclasses.replace(self.record, renewals=self.record.renewals + 1)
        version = put_if(self.store, self.key, renewed.to_json(), self.version)
        if version is None:
            self.lost.set()
            raise self.lost_error()
        self.record, self.version = renewed, version

    def lost_error(self) -> LeaseLostError:
        return LeaseLostError(
            f"backup {self.name!r}: another run took over its name while this one wrote it ({self.key} is no "
            f"longer this run's); this run stopped and landed nothing more"
        )

    def _heartbeat(self) -> None:
        while not self._stop.wait(self.renew_seconds):
            with self._lock:
                if self._stop.is_set():
                    return
                try:
                    self._renew()
                except LeaseLostError as e:
                    log.error("%s", e)
                    return
                except StorageError as e:  # the lease holds a while yet: the next renewal may succeed
                    log.warning("backup %s: could not renew its writer lease: %s", self.name, e)

    def __enter__(self) -> WriterLease:
        threading.Thread(target=self._heartbeat, name=f"lease-{self.name}", daemon=True).start()
        return self

    def __exit__(self, kind: type[BaseException] | None, e: BaseException | None, tb: TracebackType | None) -> None:
        self.release()

    def release(self) -> None:
        """Stop renewing and remove the lease if it is still this run's."""
        self._stop.set()
        with self._lock:
            if self.lost.is_set() or self.version is None:
                return
            try:
                current = read_versioned(self.store, self.key, MAX_LEASE_BYTES)
                if current is not None and current.version == self.version:
                    self.store.delete(self.key)
            except StorageError as e:
                log.warning("backup %s: could not remove its writer lease (it expires by itself): %s", self.name, e)
            self.version = None


@dataclasses.dataclass(frozen=True)
class LiveWriter:
    """A live lease on a backup's name, as another run reads it."""

    record: WriterRecord | None  # None: a lease that cannot be read (kept for the default duration)
    age: float

    @property
    def who(self) -> str:
        return self.record.describe() if self.record is not None else "a writer whose lease cannot be read"

    def refusal(self, store: ObjectStore, name: str, what: str) -> BackupBusyError:
        duration = LEASE_SECONDS if self.record is None else min(self.record.lease_seconds, MAX_LEASE_SECONDS)
        return BackupBusyError(
            f"backup {name!r} is being written by another run ({self.who}) in {store.url}: {what}; if that run has "
            f"stopped, its lease expires within {max(1, int(duration - self.age))}s"
        )


def live_writer(store: ObjectStore, name: str) -> LiveWriter | None:
    """The run writing the backup, or None when no live run holds its lease."""
    current = read_versioned(store, writer_key(name), MAX_LEASE_BYTES)
    if current is None:
        return None
    record = WriterRecord.parse(current.data)
    return LiveWriter(record, current.age) if stale_reason(record, current.age, Process.this()) is None else None


TO_WAIT = "wait for it to finish, or choose another name"


def claim(
    store: ObjectStore, name: str, lease_seconds: float = LEASE_SECONDS, renew_seconds: float = RENEW_SECONDS
) -> WriterLease:
    """This run's lease on the name of a new backup. BackupExistsError when the backup is complete,
    BackupBusyError while another run writes it; what a stopped run left there is removed once the lease is
    this run's (so two re-runs never both clean up)."""
    lease = WriterLease(store, name, lease_seconds, renew_seconds)
    stored = {o.key for o in store.list(backup_prefix(name))}  # also fails fast on an unusable store
    if manifest_key(name) in stored:
        raise BackupExistsError(f"backup {name!r} already exists in {store.url}")
    current = read_versioned(store, lease.key, MAX_LEASE_BYTES) if lease.key in stored else None
    why = "it has no writer lease"
    if current is not None:
        record = WriterRecord.parse(current.data)
        why = stale_reason(record, current.age, lease.record.process) or ""
        if not why:
            raise LiveWriter(record, current.age).refusal(store, name, TO_WAIT)
    if not lease.take(current.version if current is not None else None):  # another run was quicker
        winner = live_writer(store, name)
        if winner is None:
            raise BackupBusyError(f"backup {name!r}: another run took its name at the same moment in {store.url}")
        raise winner.refusal(store, name, TO_WAIT)
    try:
        _clear(store, name, lease, why, took_over=current is not None)
    except BaseException:
        lease.release()
        raise
    return lease


def _clear(store: ObjectStore, name: str, lease: WriterLease, why: str, took_over: bool) -> None:
    """Delete what a stopped run left under the name, now that the lease is this run's."""
    leftovers = sorted(o.key for o in store.list(backup_prefix(name)) if o.key != lease.key)
    if manifest_key(name) in leftovers:  # it completed (and let its lease go) between the two looks
        raise BackupExistsError(f"backup {name!r} already exists in {store.url}")
    if leftovers or took_over:
        files = ", ".join(k.rsplit("/", 1)[1] for k in leftovers) or "nothing but its lease"
        log.warning("backup %s: replacing the incomplete backup a stopped run left (%s): removing %s", name, why, files)
    for key in leftovers:
        store.delete(key)
