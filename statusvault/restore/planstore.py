"""The restore plan's rows: one per object, kept in a SQLite file so memory does not grow with the backup."""

from __future__ import annotations

import dataclasses
import enum
import json
import os
import secrets
import sqlite3
import tempfile
import threading
import time
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

from statusvault.archive import member_path
from statusvault.errors import StatusVaultError
from statusvault.kube.discovery import Discovery
from statusvault.model import ObjectKey, ResourceType

MAX_OWNER_DEPTH = 64  # ownership chains deeper than this are treated as a cycle


class Category(enum.IntEnum):
    """Restore order: CRDs, namespaces, other cluster-scoped objects, namespaced objects."""

    CRD = 0
    NAMESPACE = 1
    CLUSTER = 2
    NAMESPACED = 3


class Action(enum.StrEnum):
    CREATE = "create"
    SKIP_EXISTS = "skip"  # exists, policy none
    UPDATE = "update"  # exists, policy update
    SKIP_TERMINATING = "skip-terminating"  # was being deleted at backup time
    UNAVAILABLE = "unavailable"  # the cluster does not serve the resource and the backup has no CRD for it


class StatusMode(enum.StrEnum):
    SUBRESOURCE = "subresource"  # PUT .../status after the create
    IN_BODY = "in-body"  # no /status subresource: the status travels in the create body
    LEFT_OUT = "left-out"  # a saved status the user asked not to restore (--no-status, exclusions, opt-out)
    NONE = "none"  # no saved status, or one never restored (a CRD's; a built-in's unless asked for)

    @property
    def wanted(self) -> bool:
        """Whether the run must write a saved status for this object."""
        return self in (StatusMode.SUBRESOURCE, StatusMode.IN_BODY)


@dataclasses.dataclass(slots=True)
class PlanItem:
    """One object's decisions, as read back from the plan for the wave being restored."""

    rt: ResourceType
    source_namespace: str  # in the archive ("" when cluster-scoped or added by the plan)
    namespace: str  # target namespace ("" when cluster-scoped)
    name: str
    old_uid: str  # kept only for owners of other objects in the plan
    category: Category
    action: Action
    status_mode: StatusMode
    depth: int = 0
    in_archive: bool = True  # False for a namespace the plan adds
    seq: int = 0  # the row, once stored

    @property
    def path(self) -> str:
        """The archive member, "" for a namespace the plan adds."""
        if not self.in_archive:
            return ""
        return member_path(ObjectKey(self.rt.qualified, self.source_namespace, self.name))

    @property
    def display(self) -> str:
        where = f"{self.namespace}/" if self.namespace else ""
        return f"{self.rt.qualified} {where}{self.name}"


@dataclasses.dataclass(frozen=True)
class Wave:
    category: Category
    depth: int
    size: int


_SCHEMA = """
CREATE TABLE items (
    seq INTEGER PRIMARY KEY,
    qualified TEXT NOT NULL,
    source_ns TEXT NOT NULL,
    ns TEXT NOT NULL,
    name TEXT NOT NULL,
    old_uid TEXT NOT NULL,
    category INTEGER NOT NULL,
    action TEXT NOT NULL,
    status_mode TEXT NOT NULL,
    depth INTEGER NOT NULL DEFAULT 0,
    in_archive INTEGER NOT NULL
);
CREATE TABLE refs (seq INTEGER NOT NULL, owner_uid TEXT NOT NULL);
CREATE TABLE done (seq INTEGER PRIMARY KEY);  -- restored by this or an earlier (interrupted) run
CREATE TABLE created (seq INTEGER PRIMARY KEY);  -- created by a run of this journal (status maybe not yet written)
CREATE TABLE uids (old TEXT PRIMARY KEY, new TEXT NOT NULL);  -- owners restored so far: old UID -> new
CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
"""
_COLUMNS = "qualified, source_ns, ns, name, old_uid, category, action, status_mode, depth, in_archive"


class RestorePlan:
    """Rows are added in archive order while planning, then read back wave by wave, in that order.

    The rows live in a SQLite file, so a plan of 100,000 objects costs the same memory as a plan of 100.
    Resource types are few and stay in memory (`types`, retargeted once restored CRDs are served).

    A scratch plan (a dry run) is a temp file removed on close. A journal plan lives in the state
    directory and also records which objects are done and which owners got which new UID; it is removed
    on close once a run `finished`, and otherwise kept so the same command resumes where it stopped.
    """

    def __init__(self, backup: str, manifest: dict[str, Any], journal: Path | None = None, manager: str = ""):
        if journal is None:
            fd, name = tempfile.mkstemp(prefix="statusvault-plan-", suffix=".sqlite")
            os.close(fd)
            self._fields(backup, manifest, Path(name), journal)
        else:  # built beside it and renamed when sealed: a crash while planning leaves no half journal
            self._fields(backup, manifest, journal.with_name(journal.name + ".building"), journal)
            _remove_db(self.path)  # what a run killed while planning left (the caller holds the journal's lock)
        self.manager = manager or new_manager()
        self._db = self._connect()
        self._db.execute("PRAGMA journal_mode = OFF")  # while building: one transaction, nothing to protect
        self._db.executescript(_SCHEMA)
        self._db.execute("BEGIN")

    def _fields(self, backup: str, manifest: dict[str, Any], path: Path, journal: Path | None) -> None:
        """Every attribute, as a new plan has it (reopen() then loads the saved ones)."""
        self.backup = backup
        self.manifest = manifest
        self.warnings: list[str] = []
        self.types: dict[str, ResourceType] = {}
        self.served: set[str] = set()  # types confirmed served by retarget()
        self.started = time.time()
        self.manager = ""  # the field manager of every write: this restore's identity (writes.ObjectWriter)
        self.resumed = 0  # objects restored by earlier runs of this journal
        self.finished = False
        self.path: Path = path
        self._journal, self.scratch = journal, journal is None
        self._sealed = False

    @classmethod
    def reopen(cls, journal: Path) -> RestorePlan:
        """The plan of an earlier run that did not finish, with what it got done."""
        plan = cls.__new__(cls)
        plan._fields("", {}, journal, journal)
        plan._sealed = True
        try:
            plan._db = plan._connect()
            meta = {k: json.loads(v) for k, v in plan._db.execute("SELECT key, value FROM meta")}
            plan.backup, plan.manifest, plan.warnings = meta["backup"], meta["manifest"], meta["warnings"]
            plan.started, plan.manager = meta["started"], meta["manager"]
            plan.types = {q: _type(t) for q, t in meta["types"].items()}
            plan.resumed = plan._db.execute("SELECT COUNT(*) FROM done").fetchone()[0]
            plan._open_marks()
        except (sqlite3.DatabaseError, KeyError, TypeError, ValueError) as e:
            raise StatusVaultError(
                f"restore journal {journal} is unreadable ({e}): start over with --restart"
            ) from None
        return plan

    def _connect(self, check_same_thread: bool = True) -> sqlite3.Connection:
        db = sqlite3.connect(self.path, isolation_level=None, check_same_thread=check_same_thread)
        db.execute("PRAGMA synchronous = OFF" if self.scratch else "PRAGMA synchronous = NORMAL")
        return db

    def _open_marks(self) -> None:
        """WAL lets workers record progress on a second connection while the main thread reads a wave."""
        self._db.execute("PRAGMA journal_mode = WAL")
        self._marks = self._connect(check_same_thread=False)
        self._marks_lock = threading.Lock()

    def close(self) -> None:
        if self._sealed:
            self._marks.close()
        self._db.close()
        if self.scratch or self.finished or not self._sealed:  # a plan that failed to build is no journal
            _remove_db(self.path)

    def __enter__(self) -> RestorePlan:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # --- building ---

    def add(self, item: PlanItem, owner_uids: Iterable[str] = ()) -> None:
        assert not self._sealed, "the plan is sealed"
        self.types.setdefault(item.rt.qualified, item.rt)
        cur = self._db.execute(
            f"INSERT INTO items ({_COLUMNS}) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
            (
                item.rt.qualified,
                item.source_namespace,
                item.namespace,
                item.name,
                item.old_uid,
                int(item.category),
                str(item.action),
                str(item.status_mode),
                item.depth,
                int(item.in_archive),
            ),
        )
        refs = [(cur.lastrowid, uid) for uid in owner_uids if uid]
        if refs:
            self._db.executemany("INSERT INTO refs VALUES (?, ?)", refs)

    def seal(self) -> None:
        """Order owners before their dependents, then index the rows for reading wave by wave."""
        self._assign_depths()
        self._db.execute("CREATE INDEX items_order ON items (category, depth, in_archive, seq)")
        meta = {
            "backup": self.backup,
            "manifest": self.manifest,
            "warnings": self.warnings,
            "started": self.started,
            "manager": self.manager,
            "types": {q: dataclasses.asdict(rt) for q, rt in self.types.items()},
        }
        self._db.executemany("INSERT INTO meta VALUES (?, ?)", [(k, json.dumps(v)) for k, v in meta.items()])
        self._db.execute("COMMIT")
        if self._journal is not None:
            self._db.close()
            _remove_db(self._journal)  # an old journal's -wal would otherwise be replayed onto the new file
            os.replace(self.path, self._journal)
            self.path = self._journal
            self._db = self._connect()
        self._sealed = True
        self._open_marks()

    def _assign_depths(self) -> None:
        """depth = 1 + the deepest owner that is also in the plan; only owners keep their old UID."""
        db = self._db
        db.execute("CREATE INDEX refs_owner ON refs (owner_uid)")
        db.execute("UPDATE items SET old_uid = '' WHERE old_uid != '' AND old_uid NOT IN (SELECT owner_uid FROM refs)")
        db.execute("CREATE INDEX items_uid ON items (old_uid) WHERE old_uid != ''")
        db.execute(
            "CREATE TEMP TABLE links AS SELECT r.seq AS dependent, o.seq AS owner "
            "FROM refs r JOIN items o ON o.old_uid = r.owner_uid WHERE o.old_uid != '' AND o.seq != r.seq"
        )
        db.execute("CREATE INDEX temp.links_dependent ON links (dependent)")
        deepest = "(SELECT 1 + MAX(o.depth) FROM links l JOIN items o ON o.seq = l.owner WHERE l.dependent = items.seq)"
        for _ in range(MAX_OWNER_DEPTH):  # correlated subqueries: no UPDATE ... FROM, which needs SQLite 3.33
            deeper = db.execute(
                f"UPDATE items SET depth = {deepest} WHERE seq IN (SELECT dependent FROM links) AND depth < {deepest}"
            ).rowcount
            if not deeper:
                break
        else:
            self.warnings.append(
                f"ownerReferences form a cycle or a chain deeper than {MAX_OWNER_DEPTH}: "
                "those objects are restored in an arbitrary order"
            )
        db.execute("DROP TABLE links")

    # --- reading ---

    def __len__(self) -> int:
        return self._count("items")

    def waves(self) -> list[Wave]:
        """Groups to run in order: by category, then by owner depth (owners before dependents)."""
        rows = self._db.execute(
            "SELECT category, depth, COUNT(*) FROM items GROUP BY category, depth ORDER BY category, depth"
        )
        return [Wave(Category(c), d, n) for c, d, n in rows]

    def items(self, wave: Wave | None = None, pending: bool = False) -> Iterator[PlanItem]:
        """A wave's items (all items when None): those the plan added first, then archive order.

        pending: only the items no run has restored yet."""
        query = f"SELECT {_COLUMNS}, seq FROM items WHERE 1"
        args: tuple[int, ...] = ()
        if wave is not None:
            query += " AND category = ? AND depth = ?"
            args = (int(wave.category), wave.depth)
        if pending:
            query += " AND NOT EXISTS (SELECT 1 FROM done WHERE done.seq = items.seq)"
        for q, src, ns, name, uid, cat, action, mode, depth, stored, seq in self._db.execute(
            query + " ORDER BY category, depth, in_archive, seq", args
        ):
            if action == Action.UNAVAILABLE and q in self.served:  # its CRD was installed since the plan was made
                action = Action.CREATE
            rt = self.types[q]
            yield PlanItem(
                rt, src, ns, name, uid, Category(cat), Action(action), StatusMode(mode), depth, bool(stored), seq
            )

    def names(self, category: Category, action: Action | None = None) -> set[str]:
        """Names of the items of one category (optionally with one action): small sets, such as namespaces."""
        query = "SELECT name FROM items WHERE category = ?"
        args: list[int | str] = [int(category)]
        if action is not None:
            query, args = query + " AND action = ?", [*args, str(action)]
        return {name for (name,) in self._db.execute(query, args)}

    def pending(self, wanted_status: bool = False) -> int:
        """Items no run has restored yet; wanted_status: only those whose saved status is to be written."""
        query = "SELECT COUNT(*) FROM items WHERE NOT EXISTS (SELECT 1 FROM done WHERE done.seq = items.seq)"
        if wanted_status:
            modes = ", ".join(f"'{m}'" for m in StatusMode if m.wanted)
            query += f" AND status_mode IN ({modes})"
        count: int = self._db.execute(query).fetchone()[0]
        return count

    def _count(self, table: str) -> int:
        count: int = self._db.execute(f"SELECT COUNT(*) FROM {table}").fetchone()[0]
        return count

    # --- progress (from worker threads) ---

    def mark_done(self, item: PlanItem) -> None:
        with self._marks_lock:
            self._marks.execute("INSERT OR IGNORE INTO done VALUES (?)", (item.seq,))

    def mark_created(self, item: PlanItem) -> None:
        with self._marks_lock:
            self._marks.execute("INSERT OR IGNORE INTO created VALUES (?)", (item.seq,))

    def was_created(self, item: PlanItem) -> bool:
        """Whether a run of this journal created the object: a resumed run then owns it, changed or not."""
        with self._marks_lock:
            return self._marks.execute("SELECT 1 FROM created WHERE seq = ?", (item.seq,)).fetchone() is not None

    def learn_uid(self, old: str, new: str) -> None:
        with self._marks_lock:
            self._marks.execute("INSERT OR REPLACE INTO uids VALUES (?, ?)", (old, new))

    def learned_uids(self) -> dict[str, str]:
        return dict(self._db.execute("SELECT old, new FROM uids"))

    def retarget(self, live: Discovery) -> None:
        """Items read from here on get the types the cluster serves now (after CRDs were restored)."""
        for qualified, rt in list(self.types.items()):
            served = live.by_qualified(qualified)
            if served is not None and not rt.is_crd:
                self.types[qualified] = dataclasses.replace(served, custom=served.custom or rt.custom)
                self.served.add(qualified)

    def resources(self, exclude: Category) -> set[str]:
        """The qualified resource names with at least one item outside one category."""
        rows = self._db.execute("SELECT DISTINCT qualified FROM items WHERE category != ?", (int(exclude),))
        return {q for (q,) in rows}


def new_manager() -> str:
    """A field manager name unique to one restore (kept in its journal, so its resumed runs share it)."""
    return f"statusvault-restore-{secrets.token_hex(8)}"


def _type(fields: dict[str, Any]) -> ResourceType:
    args: dict[str, Any] = {k: tuple(v) if isinstance(v, list) else v for k, v in fields.items()}
    return ResourceType(**args)


def _remove_db(path: Path) -> None:
    for suffix in ("", "-wal", "-shm"):
        Path(f"{path}{suffix}").unlink(missing_ok=True)
