"""The restore plan: what was decided, one row per object, in a SQLite file read-only once sealed.

What has been done lives apart, in the journal (journal.py)."""

from __future__ import annotations

import dataclasses
import enum
import json
import operator
import os
import sqlite3
import tempfile
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any, NamedTuple, TypeVar, cast

from statusvault.archive import member_path
from statusvault.errors import StatusVaultError
from statusvault.model import ObjectKey, ResourceType, display

MAX_OWNER_DEPTH = 64  # ownership chains deeper than this are treated as a cycle
ADD_BATCH = 1024  # plan rows inserted at once while planning


class Category(enum.IntEnum):
    """Restore order: CRDs, namespaces, other cluster-scoped objects, namespaced objects."""

    CRD = 0
    NAMESPACE = 1
    CLUSTER = 2
    NAMESPACED = 3


class Action(enum.StrEnum):
    CREATE = "create"
    SKIP_EXISTS = "skip"  # exists, policy none
    SKIP_LACKING = "skip-lacking"  # exists without any status, policy none, while the backup holds one: counted
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


E = TypeVar("E", bound=enum.Enum)


def _member(kind: type[E], value: Any) -> E:
    """The member of `kind` with that value, looked up in the enum's own value map: calling the enum (its
    metaclass's __call__, __new__) costs a few microseconds for every object of a restore. Another value raises
    ValueError, as calling it does."""
    found = kind._value2member_map_.get(value)
    return cast(E, found) if found is not None else kind(value)


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
    group: int = 0  # --order's group (1-based; 0: named by no group), restored before the later groups

    @property
    def path(self) -> str:
        """The archive member, "" for a namespace the plan adds."""
        if not self.in_archive:
            return ""
        return member_path(ObjectKey(self.rt.qualified, self.source_namespace, self.name))

    @property
    def display(self) -> str:
        return display(self.rt.qualified, self.namespace, self.name)

    def __reduce__(self) -> tuple[type[PlanItem], tuple[Any, ...]]:
        """Pickled as its fields in order: a restore's objects cross to its worker processes by the thousand, and the
        state functions of a slotted dataclass look its fields up again for each one."""
        return PlanItem, _item_fields(self)


_item_fields = operator.attrgetter(*(f.name for f in dataclasses.fields(PlanItem)))


class AuditRow(NamedTuple):
    """One object as the audit reads it back (restore/results/audit.py)."""

    resource: str
    namespace: str
    name: str
    seq: int
    mark: str  # the journal's mark of its status write ("": none)
    done: bool  # the journal has it as finished
    in_scope: bool  # its saved status is this restore's to leave on the cluster
    paused: bool  # this restore paused it and has not unpaused it yet (its own unpause deals with it)


@dataclasses.dataclass(frozen=True)
class Wave:
    category: Category
    depth: int
    size: int
    group: int = 0  # --order's group: waves run group by group, a gate between groups


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
    in_archive INTEGER NOT NULL,
    grp INTEGER NOT NULL DEFAULT 0,
    streamed INTEGER NOT NULL DEFAULT 0  -- written as the archive was read (restore/running/streamed.py)
);
CREATE TABLE refs (seq INTEGER NOT NULL, owner_uid TEXT NOT NULL);
CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
"""
_COLUMNS = "qualified, source_ns, ns, name, old_uid, category, action, status_mode, depth, in_archive, grp"
_NOT_DONE = "NOT EXISTS (SELECT 1 FROM journal.done d WHERE d.seq = items.seq)"


class RestorePlan:
    """Rows are added in archive order while planning, then read back wave by wave, in that order.

    The rows live in a SQLite file, so a plan of 100,000 objects costs the same memory as a plan of 100.
    Resource types are few and stay in memory (`types`, as the cluster served them when planning).
    It is built beside its final path and renamed there when sealed (a crash while planning leaves no
    half plan), then reopened read-only. Without a path it is a scratch file, removed on close.
    """

    def __init__(self, backup: str, manifest: dict[str, Any], path: Path | None = None):
        kept = path is not None
        if path is None:
            fd, name = tempfile.mkstemp(prefix="statusvault-plan-", suffix=".sqlite")
            os.close(fd)
            path = Path(name)
        self._fields(backup, manifest, path, kept)
        self._building = path.with_name(path.name + ".building")
        remove_db(self._building)  # what a run killed while planning left (the caller holds the state's lock)
        self._db = sqlite3.connect(private_db(self._building), isolation_level=None)
        self._db.execute("PRAGMA journal_mode = OFF")  # while building: one transaction, nothing to protect
        self._db.execute("PRAGMA synchronous = OFF")
        self._db.executescript(_SCHEMA)
        self._db.execute("BEGIN")

    def _fields(self, backup: str, manifest: dict[str, Any], path: Path, kept: bool) -> None:
        """Every attribute, as a new plan has it (open() then loads the saved ones)."""
        self.backup = backup
        self.manifest = manifest
        self.warnings: list[str] = []
        self.dependencies: list[list[str]] = []  # [object, needed by, reference] of each dependency it takes
        self.types: dict[str, ResourceType] = {}
        self.path: Path = path
        self.kept = kept  # False: a scratch plan, removed on close
        self._sealed = False
        self._journal: Path | None = None
        self.deferred = False  # True: waves() and items() leave out the streamed rows (this run wrote them already)
        self._next_seq = 1  # rows are numbered here, so that a batch knows its numbers before it is inserted
        self._items: list[tuple[Any, ...]] = []  # rows not inserted yet: one executemany per ADD_BATCH
        self._refs: list[tuple[int, str]] = []

    @classmethod
    def open(cls, path: Path) -> RestorePlan:
        """The sealed plan of an earlier run, read-only."""
        plan = cls.__new__(cls)
        plan._fields("", {}, path, True)
        try:
            plan._db = _read_only(path)
            meta = {k: json.loads(v) for k, v in plan._db.execute("SELECT key, value FROM meta")}
            plan.backup, plan.manifest, plan.warnings = meta["backup"], meta["manifest"], meta["warnings"]
            plan.dependencies = meta.get("dependencies", [])  # a plan made before dependencies has none
            plan.types = {q: _type(t) for q, t in meta["types"].items()}
            if "grp" not in {row[1] for row in plan._db.execute("PRAGMA table_info(items)")}:
                raise ValueError("made by an earlier statusvault, without --order's groups")
        except (sqlite3.DatabaseError, KeyError, TypeError, ValueError) as e:
            raise StatusVaultError(f"restore plan {path} is unreadable ({e}): start over with --restart") from None
        plan._sealed = True
        return plan

    def close(self) -> None:
        self._db.close()
        if not self._sealed:
            remove_db(self._building)
        if not self.kept:
            remove_db(self.path)

    def remove(self) -> None:
        """Close and delete the plan (its restore finished)."""
        self.close()
        remove_db(self.path)

    def __enter__(self) -> RestorePlan:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # --- building ---

    def add(self, item: PlanItem, owner_uids: Iterable[str] = (), streamed: bool = False, seq: int = 0) -> int:
        """Add a row (numbered in order unless seq is given) and return its number, which item.seq now holds."""
        assert not self._sealed, "the plan is sealed"
        qualified = item.rt.qualified
        self.types.setdefault(qualified, item.rt)
        if not seq:
            seq, self._next_seq = self._next_seq, self._next_seq + 1
        item.seq = seq
        self._items.append(
            (
                seq,
                qualified,
                item.source_namespace,
                item.namespace,
                item.name,
                item.old_uid,
                int(item.category),
                str(item.action),
                str(item.status_mode),
                item.depth,
                int(item.in_archive),
                item.group,
                int(streamed),
            )
        )
        self._refs += [(seq, uid) for uid in owner_uids if uid]
        if len(self._items) >= ADD_BATCH:
            self._flush()
        return seq

    def _flush(self) -> None:
        """Insert the rows added since the last flush (before anything reads the items)."""
        if self._items:
            self._db.executemany(
                f"INSERT INTO items (seq, {_COLUMNS}, streamed) VALUES ({', '.join('?' * 13)})", self._items
            )
            self._items = []
        if self._refs:
            self._db.executemany("INSERT INTO refs VALUES (?, ?)", self._refs)
            self._refs = []

    def drop_unneeded_crds(self, keep: Iterable[str]) -> list[str]:
        """Before sealing: the CRDs of the plan whose type no other item of the plan is an object of (nor named in
        `keep`), taken out; their names."""
        self._flush()
        crd = int(Category.CRD)
        needed = {q for (q,) in self._db.execute("SELECT DISTINCT qualified FROM items WHERE category != ?", (crd,))}
        rows = self._db.execute("SELECT name FROM items WHERE category = ?", (crd,)).fetchall()
        dropped = sorted(n for (n,) in rows if n not in needed and n not in set(keep))
        self._db.executemany("DELETE FROM items WHERE category = ? AND name = ?", [(crd, n) for n in dropped])
        return dropped

    def seal(self) -> None:
        """Order owners before their dependents, index the rows for reading wave by wave, and move the
        plan into place, read-only from here on."""
        self._flush()
        self._assign_depths()
        self._db.execute("CREATE INDEX items_order ON items (grp, category, depth, in_archive, seq)")
        meta = {
            "backup": self.backup,
            "manifest": self.manifest,
            "warnings": self.warnings,
            "dependencies": self.dependencies,
            "types": {q: dataclasses.asdict(rt) for q, rt in self.types.items()},
        }
        self._db.executemany("INSERT INTO meta VALUES (?, ?)", [(k, json.dumps(v)) for k, v in meta.items()])
        self._db.execute("COMMIT")
        self._db.close()
        remove_db(self.path)
        os.replace(self._building, self.path)
        self._db = _read_only(self.path)
        self._sealed = True

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
        self._follow_owner_groups()
        db.execute("DROP TABLE links")

    def _follow_owner_groups(self) -> None:
        """A dependent is restored in its owner's --order group when that group comes later than its own."""
        later = "(SELECT MAX(o.grp) FROM links l JOIN items o ON o.seq = l.owner WHERE l.dependent = items.seq)"
        query = f"UPDATE items SET grp = {later} WHERE seq IN (SELECT dependent FROM links) AND grp < {later}"
        for _ in range(MAX_OWNER_DEPTH):
            if not self._db.execute(query).rowcount:
                break

    # --- reading ---

    def __len__(self) -> int:
        self._flush()
        count: int = self._db.execute("SELECT COUNT(*) FROM items").fetchone()[0]
        return count

    def waves(self) -> list[Wave]:
        """Waves to run in order: by --order group, by category, then by owner depth (owners before dependents)."""
        self._flush()
        waves = "grp, category, depth"
        rows = self._db.execute(
            f"SELECT {waves}, COUNT(*) FROM items WHERE {self._unstreamed} GROUP BY {waves} ORDER BY {waves}"
        )
        return [Wave(Category(c), d, n, g) for g, c, d, n in rows]

    def items(self, wave: Wave | None = None, journal: Path | None = None) -> Iterator[PlanItem]:
        """A wave's items (all items when None): those the plan added first, then archive order.

        journal: only the items that journal has not seen done."""
        self._flush()
        query = f"SELECT {_COLUMNS}, seq FROM items WHERE {self._unstreamed}"
        args: tuple[int, ...] = ()
        if wave is not None:
            query += " AND grp = ? AND category = ? AND depth = ?"
            args = (wave.group, int(wave.category), wave.depth)
        if journal is not None:
            self._attach(journal)
            query += f" AND {_NOT_DONE}"
        for row in self._db.execute(query + " ORDER BY grp, category, depth, in_archive, seq", args):
            yield self._item(row)

    @property
    def _unstreamed(self) -> str:
        return "streamed = 0" if self.deferred else "1"

    def _item(self, row: tuple[Any, ...]) -> PlanItem:
        q, src, ns, name, uid, cat, action, mode, depth, stored, grp, seq = row
        rt = self.types[q]
        return PlanItem(
            rt,
            src,
            ns,
            name,
            uid,
            _member(Category, cat),
            _member(Action, action),
            _member(StatusMode, mode),
            depth,
            bool(stored),
            seq,
            grp,
        )

    def group_counts(self) -> dict[int, int]:
        """Objects per --order group (0: named by no group)."""
        self._flush()
        return dict(self._db.execute("SELECT grp, COUNT(*) FROM items GROUP BY grp").fetchall())

    def restored(self, group: int, journal: Path) -> list[PlanItem]:
        """The group's objects the journal has seen restored (created or updated): what its gate waits on."""
        return self._written(group, journal, done=True)

    def unrestored(self, group: int, journal: Path) -> list[PlanItem]:
        """The group's objects to create or update that the journal has not seen restored: after the group's
        waves, those that failed."""
        return self._written(group, journal, done=False)

    def _written(self, group: int, journal: Path, done: bool) -> list[PlanItem]:
        """The group's objects to create or update, those the journal has seen done or those it has not."""
        self._attach(journal)
        rows = self._db.execute(
            f"SELECT {_COLUMNS}, seq FROM items WHERE grp = ? AND action IN (?, ?) AND {'NOT ' if done else ''}"
            f"{_NOT_DONE} ORDER BY seq",
            (group, str(Action.CREATE), str(Action.UPDATE)),
        ).fetchall()
        return [self._item(row) for row in rows]

    def paused(self, journal: Path, group: int | None = None) -> list[PlanItem]:
        """The items the journal says this restore created paused and has not unpaused yet (of one --order group)."""
        self._attach(journal)
        query = f"SELECT {_COLUMNS}, seq FROM items WHERE seq IN (SELECT seq FROM journal.paused)"
        args: tuple[int, ...] = ()
        if group is not None:
            query, args = query + " AND grp = ?", (group,)
        rows = self._db.execute(query + " ORDER BY seq", args).fetchall()
        return [self._item(row) for row in rows]

    def pending(self, journal: Path, wanted_status: bool = False) -> int:
        """Items the journal has not seen done; wanted_status: only those whose saved status is to be written."""
        self._attach(journal)
        query = f"SELECT COUNT(*) FROM items WHERE {_NOT_DONE}"
        if wanted_status:
            modes = ", ".join(f"'{m}'" for m in StatusMode if m.wanted)
            query += f" AND status_mode IN ({modes})"
        count: int = self._db.execute(query).fetchone()[0]
        return count

    def audited(self, journal: Path) -> Iterator[AuditRow]:
        """What the audit reads back, by resource and namespace: every object whose saved status this restore must
        leave on the cluster (whatever it found there: policy none's kept objects and those being deleted aside),
        and the objects it found existing (a pause an earlier run left on them is looked for)."""
        self._flush()
        self._attach(journal)
        modes = ", ".join(f"'{m}'" for m in StatusMode if m.wanted)
        kept, terminating = str(Action.SKIP_EXISTS), str(Action.SKIP_TERMINATING)
        in_scope = f"status_mode IN ({modes}) AND action NOT IN ('{kept}', '{terminating}')"
        rows = self._db.execute(
            f"SELECT qualified, ns, name, items.seq, COALESCE(journal.marks.mark, ''), NOT {_NOT_DONE}, {in_scope}, "
            "items.seq IN (SELECT seq FROM journal.paused) FROM items "
            "LEFT JOIN journal.marks ON journal.marks.seq = items.seq "
            f"WHERE ({in_scope}) OR (action = '{kept}' AND category IN (?, ?)) ORDER BY qualified, ns, items.seq",
            (int(Category.CLUSTER), int(Category.NAMESPACED)),
        )
        for q, ns, name, seq, mark, done, scoped, paused in rows:
            yield AuditRow(q, ns, name, seq, mark, bool(done), bool(scoped), bool(paused))

    def _attach(self, journal: Path) -> None:
        if self._journal != journal:
            if self._journal is not None:
                self._db.execute("DETACH DATABASE journal")
            self._db.execute("ATTACH DATABASE ? AS journal", (f"file:{journal}?mode=ro",))
            self._journal = journal

    def names(self, category: Category, action: Action | None = None) -> set[str]:
        """Names of the items of one category (optionally with one action): small sets, such as namespaces."""
        self._flush()
        query = "SELECT name FROM items WHERE category = ?"
        args: list[int | str] = [int(category)]
        if action is not None:
            query, args = query + " AND action = ?", [*args, str(action)]
        return {name for (name,) in self._db.execute(query, args)}

    def status_namespaces(self) -> dict[str, set[str]]:
        """Per resource whose saved status this plan writes, the namespaces it writes it in ("" cluster-scoped)."""
        self._flush()
        modes = ", ".join(f"'{m}'" for m in StatusMode if m.wanted)
        rows = self._db.execute(f"SELECT DISTINCT qualified, ns FROM items WHERE status_mode IN ({modes})")
        out: dict[str, set[str]] = {}
        for qualified, ns in rows:
            out.setdefault(qualified, set()).add(ns)
        return out

    def resources(self, exclude: Category) -> set[str]:
        """The qualified resource names with at least one item outside one category."""
        self._flush()
        rows = self._db.execute("SELECT DISTINCT qualified FROM items WHERE category != ?", (int(exclude),))
        return {q for (q,) in rows}


def _read_only(path: Path) -> sqlite3.Connection:
    if not path.exists():
        raise sqlite3.DatabaseError("no such file")
    return sqlite3.connect(f"file:{path}?mode=ro", uri=True, isolation_level=None, check_same_thread=False)


def _type(fields: dict[str, Any]) -> ResourceType:
    args: dict[str, Any] = {k: tuple(v) if isinstance(v, list) else v for k, v in fields.items()}
    return ResourceType(**args)


def private_db(path: Path) -> Path:
    """`path` made (if missing) readable by its owner alone before SQLite opens it: a plan or journal names the
    objects of a (perhaps encrypted) backup, and SQLite gives its -wal and -shm files the database file's mode."""
    os.close(os.open(path, os.O_WRONLY | os.O_CREAT, 0o600))
    return path


def remove_db(path: Path) -> None:
    for suffix in ("", "-wal", "-shm", "-journal"):
        Path(f"{path}{suffix}").unlink(missing_ok=True)
