"""The restore journal: what has been done (objects finished and created, owners' new UIDs) and the
restore's identity (its field manager). The plan (plan.py) holds what was decided."""

from __future__ import annotations

import json
import os
import sqlite3
import tempfile
import threading
import time
from collections.abc import Sequence
from pathlib import Path

from statusvault.errors import StatusVaultError
from statusvault.restore.core.fields import new_manager
from statusvault.restore.core.plan import PlanItem, private_db, remove_db
from statusvault.transforms import ServerChange

_SCHEMA = """
CREATE TABLE done (seq INTEGER PRIMARY KEY);  -- finished by this or an earlier (interrupted) run
CREATE TABLE created (seq INTEGER PRIMARY KEY);  -- created by a run of this restore (status maybe not yet written)
CREATE TABLE uids (old TEXT PRIMARY KEY, new TEXT NOT NULL);  -- owners restored so far: old UID -> new
CREATE TABLE paused (seq INTEGER PRIMARY KEY);  -- created paused by this restore, not yet unpaused
CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS gates (grp INTEGER PRIMARY KEY, outcome TEXT NOT NULL, waited REAL NOT NULL);
CREATE TABLE IF NOT EXISTS scaled (workload TEXT PRIMARY KEY);  -- scaled to 0 by an older release (count on it)
CREATE TABLE IF NOT EXISTS scale_counts (workload TEXT PRIMARY KEY, replicas INTEGER NOT NULL);  -- scaled to 0
CREATE TABLE IF NOT EXISTS marks (seq INTEGER PRIMARY KEY, mark TEXT NOT NULL);  -- each status write's answer
CREATE TABLE IF NOT EXISTS changed (seq INTEGER PRIMARY KEY, fields TEXT NOT NULL);  -- what the server did not keep
"""
_GATES = "CREATE TABLE IF NOT EXISTS gates (grp INTEGER PRIMARY KEY, outcome TEXT NOT NULL, waited REAL NOT NULL)"
_SCALED = "CREATE TABLE IF NOT EXISTS scaled (workload TEXT PRIMARY KEY)"
_COUNTS = "CREATE TABLE IF NOT EXISTS scale_counts (workload TEXT PRIMARY KEY, replicas INTEGER NOT NULL)"
_MARKS = "CREATE TABLE IF NOT EXISTS marks (seq INTEGER PRIMARY KEY, mark TEXT NOT NULL)"
_CHANGED = "CREATE TABLE IF NOT EXISTS changed (seq INTEGER PRIMARY KEY, fields TEXT NOT NULL)"


DONE_BATCH = 256
DONE_EVERY = 0.2  # seconds


# The mark of an object handed over to its operator: unpaused by the restore with its saved status still on. From then
# on its status is its operator's to write (that is what the pause was for), so the audit only looks it up.
HANDED_OVER = "handed-over"


class Journal:
    """Progress recorded from worker threads (one connection, serialised by a lock; WAL, so the plan's
    reader sees a consistent view). A scratch journal (a dry run) is a temp file removed on close.

    Two locks: `_lock` guards the batched marks and is held only to append or swap them, never across a call into
    SQLite (which lets go of the interpreter lock); `_db_lock` serialises the connection. A writer thread whose mark
    makes a batch due commits it only if no other thread is committing: so writer threads never queue behind a
    commit, where each of them would have slept and been woken again."""

    def __init__(self, path: Path, db: sqlite3.Connection, manager: str, started: float, kept: bool, backup: str = ""):
        self.path = path
        self.backup = backup  # the backup restored, when a streamed run wrote it here (its plan may not exist)
        self.manager = manager  # the field manager of every write of this restore (writes.ObjectWriter)
        self.started = started  # when the restore began (its first attempt)
        self.kept = kept
        self._db = db
        self._lock = threading.Lock()
        self._db_lock = threading.Lock()
        self._done: list[tuple[int]] = []  # finished objects not yet committed (one commit per batch)
        self._marks: list[tuple[int, str]] = []  # their status writes' marks (restore/core/settle.write_mark)
        self._changed: list[tuple[int, str]] = []  # what the server did not keep of writes (mark_changed)
        self._created: set[int] = set()  # created objects not yet committed (same batches)
        self._flushed = time.monotonic()
        self.resumed = self._count("done")  # objects finished by earlier runs

    @classmethod
    def create(cls, path: Path | None, manager: str = "", backup: str = "") -> Journal:
        """A new journal at path (replacing any left there), or a scratch one."""
        kept = path is not None
        if path is None:
            fd, name = tempfile.mkstemp(prefix="statusvault-journal-", suffix=".sqlite")
            os.close(fd)
            path = Path(name)
        remove_db(path)
        db = _connect(path)
        db.executescript(_SCHEMA)
        manager, started = manager or new_manager(), time.time()
        meta = {"manager": manager, "started": started, "backup": backup}
        db.executemany("INSERT INTO meta VALUES (?, ?)", [(k, json.dumps(v)) for k, v in meta.items()])
        return cls(path, db, manager, started, kept, backup)

    @classmethod
    def open(cls, path: Path) -> Journal:
        """The journal of an earlier run that did not finish."""
        try:
            db = _connect(path, must_exist=True)
            db.execute(_GATES)  # a journal from before --order
            db.execute(_SCALED)  # a journal from before fencing was journalled
            db.execute(_COUNTS)  # ... and from before the counts were
            db.execute(_MARKS)  # ... and from before the audit: its done objects are read again (audit.py)
            db.execute(_CHANGED)  # ... and from before the audit read what the server did not keep
            meta = {k: json.loads(v) for k, v in db.execute("SELECT key, value FROM meta")}
            return cls(path, db, str(meta["manager"]), float(meta["started"]), True, str(meta.get("backup", "")))
        except (sqlite3.DatabaseError, KeyError, TypeError, ValueError) as e:
            raise StatusVaultError(f"restore journal {path} is unreadable ({e}): start over with --restart") from None

    def close(self) -> None:
        self.flush()
        self._db.close()
        if not self.kept:
            remove_db(self.path)

    def remove(self) -> None:
        """Close and delete the journal (its restore finished)."""
        self.close()
        remove_db(self.path)

    def mark_done(self, item: PlanItem, status_mark: str = "") -> None:
        """Batched: committed every DONE_BATCH objects or DONE_EVERY seconds, and by flush(). A mark lost to a
        kill -9 only makes the re-run write that object again, which it recognises as its own. status_mark: what its
        status write left (settle.write_mark), which the audit compares with the cluster."""
        with self._lock:
            self._done.append((item.seq,))
            if status_mark:
                self._marks.append((item.seq, status_mark))
            due = self._due()
        if due:
            self._commit_unless_busy()

    def mark_changed(self, item: PlanItem, changes: Sequence[ServerChange]) -> None:
        """Batched with the done marks: the fields of this object's writes the server dropped or changed, with what
        was sent, which the audit reads on the cluster until the object holds what was sent (a later write kept it,
        or someone fixed it)."""
        with self._lock:
            self._changed.append((item.seq, json.dumps([[c.path, c.how, c.sent] for c in changes])))
            due = self._due()
        if due:
            self._commit_unless_busy()

    def mark_created(self, item: PlanItem) -> None:
        """Batched with the done marks. A re-run that lost this mark to a kill -9 still knows the object as its
        own by its field manager (writes.ObjectWriter.wrote); the mark covers an object whose managedFields
        another writer has since taken over entirely."""
        with self._lock:
            self._created.add(item.seq)
            due = self._due()
        if due:
            self._commit_unless_busy()

    def _due(self) -> bool:
        """Whether the batched marks are due for a commit (called holding the lock)."""
        pending = len(self._done) + len(self._created) + len(self._changed)
        return pending >= DONE_BATCH or time.monotonic() - self._flushed >= DONE_EVERY

    def flush(self) -> None:
        """Commit the batched marks (before anything reads the journal's done table): every mark made before the
        call is committed when it returns (a commit under way is waited for, then what it did not take)."""
        with self._db_lock:
            self._commit()

    def _commit_unless_busy(self) -> None:
        """Commit the batched marks, unless another thread is committing (it, or the next mark due, takes them)."""
        if self._db_lock.acquire(blocking=False):
            try:
                self._commit()
            finally:
                self._db_lock.release()

    def _commit(self) -> None:
        """Holding _db_lock. A created mark stays pending until committed, so was_created never misses it."""
        with self._lock:
            done, self._done, self._flushed = self._done, [], time.monotonic()
            marks, self._marks = self._marks, []
            changed, self._changed = self._changed, []
            created = set(self._created)
        if done or created or changed:
            with self._db:
                self._db.execute("BEGIN")
                self._db.executemany("INSERT OR IGNORE INTO created VALUES (?)", [(seq,) for seq in created])
                self._db.executemany("INSERT OR IGNORE INTO done VALUES (?)", done)
                self._db.executemany("INSERT OR REPLACE INTO marks VALUES (?, ?)", marks)
                self._db.executemany("INSERT OR REPLACE INTO changed VALUES (?, ?)", changed)
        with self._lock:
            self._created -= created

    def undo(self, seqs: list[int]) -> None:
        """The audit found these objects short of what the journal said was done (their status written since, the
        object gone): not done any more, so the same command writes them again."""
        self.flush()
        with self._db_lock, self._db:
            self._db.execute("BEGIN")
            self._db.executemany("DELETE FROM done WHERE seq = ?", [(seq,) for seq in seqs])
            self._db.executemany("DELETE FROM marks WHERE seq = ?", [(seq,) for seq in seqs])

    def changed(self) -> dict[int, list[ServerChange]]:
        """Each object whose fields the server did not keep, as far as the audit last read it."""
        self.flush()
        with self._db_lock:
            rows = self._db.execute("SELECT seq, fields FROM changed").fetchall()
        return {seq: [ServerChange(*field) for field in json.loads(fields)] for seq, fields in rows}

    def kept_now(self, seqs: list[int]) -> None:
        """The audit found these objects holding what was sent after all."""
        with self._db_lock, self._db:
            self._db.execute("BEGIN")
            self._db.executemany("DELETE FROM changed WHERE seq = ?", [(seq,) for seq in seqs])

    def mark_paused(self, item: PlanItem) -> None:
        """Before the create that pauses it: a run killed right after still knows to unpause it."""
        self._write("INSERT OR IGNORE INTO paused VALUES (?)", (item.seq,))

    def mark_unpaused(self, item: PlanItem, handed_over: bool = False) -> None:
        """handed_over: unpaused with the status this restore wrote still on; its mark says so from then on (the
        audit leaves its status to its operator: HANDED_OVER)."""
        self._write("DELETE FROM paused WHERE seq = ?", (item.seq,))
        if handed_over:
            self._write("UPDATE marks SET mark = ? WHERE seq = ?", (HANDED_OVER, item.seq))

    def marks_of(self, seqs: list[int]) -> dict[int, str]:
        """The marks of these objects' status writes (settle.write_mark), those there are."""
        self.flush()
        out: dict[int, str] = {}
        with self._db_lock:
            for start in range(0, len(seqs), 500):
                chunk = seqs[start : start + 500]
                query = f"SELECT seq, mark FROM marks WHERE seq IN ({', '.join('?' * len(chunk))})"
                out.update(self._db.execute(query, chunk).fetchall())
        return out

    def mark_gate(self, group: int, outcome: str, waited: float) -> None:
        """The gate after `group` is behind this restore (passed, or timed out with onTimeout continue)."""
        self._write("INSERT OR REPLACE INTO gates VALUES (?, ?, ?)", (group, outcome, waited))

    def mark_scaled(self, workload: str, replicas: int) -> None:
        """Before a workload is scaled to 0 (NAMESPACE/resource.group/NAME), with the replica count to go back to:
        every later run of this restore scales it back at its end, whatever its own options say (a resumed run
        without --fence). A count already kept stays (a second fencing would read 0)."""
        self._write("INSERT OR IGNORE INTO scale_counts VALUES (?, ?)", (workload, replicas))

    def mark_scaled_back(self, workload: str) -> None:
        self._write("DELETE FROM scale_counts WHERE workload = ?", (workload,))
        self._write("DELETE FROM scaled WHERE workload = ?", (workload,))

    def scale_count(self, workload: str) -> int | None:
        """The replica count kept for a workload this restore scaled to 0 (None: none kept here)."""
        with self._db_lock:
            row = self._db.execute("SELECT replicas FROM scale_counts WHERE workload = ?", (workload,)).fetchone()
        return int(row[0]) if row is not None else None

    def scaled(self) -> list[str]:
        """The workloads a run of this restore scaled to 0 and has not scaled back yet (an older release's too:
        it kept their count on the workload)."""
        with self._db_lock:
            rows = self._db.execute("SELECT workload FROM scale_counts UNION SELECT workload FROM scaled ORDER BY 1")
            return [w for (w,) in rows]

    def gates(self) -> dict[int, tuple[str, float]]:
        """The gates an earlier run (or this one) got past: group -> (outcome, seconds waited)."""
        with self._db_lock:
            return {g: (o, w) for g, o, w in self._db.execute("SELECT grp, outcome, waited FROM gates")}

    def was_created(self, item: PlanItem) -> bool:
        """Whether a run of this restore created the object: a resumed run then owns it, changed or not."""
        with self._lock:
            if item.seq in self._created:
                return True
        with self._db_lock:  # committed marks only leave _created once the commit is done: none is missed
            return self._db.execute("SELECT 1 FROM created WHERE seq = ?", (item.seq,)).fetchone() is not None

    def is_done(self, seq: int) -> bool:
        """Whether an earlier run finished the item numbered seq (a resumed streamed restore asks per item)."""
        with self._db_lock:
            return self._db.execute("SELECT 1 FROM done WHERE seq = ?", (seq,)).fetchone() is not None

    def paused_count(self) -> int:
        """Objects this restore created paused and has not unpaused yet."""
        return self._count("paused")

    def learn_uid(self, old: str, new: str) -> None:
        self._write("INSERT OR REPLACE INTO uids VALUES (?, ?)", (old, new))

    def learned_uids(self) -> dict[str, str]:
        with self._db_lock:
            return dict(self._db.execute("SELECT old, new FROM uids"))

    def _write(self, sql: str, args: tuple[object, ...]) -> None:
        with self._db_lock:
            self._db.execute(sql, args)

    def _count(self, table: str) -> int:
        with self._db_lock:
            count: int = self._db.execute(f"SELECT COUNT(*) FROM {table}").fetchone()[0]
        return count


def _connect(path: Path, must_exist: bool = False) -> sqlite3.Connection:
    if must_exist and not path.exists():
        raise sqlite3.DatabaseError("no such file")
    # several processes write it (a restore's workers): wait for a busy writer rather than fail
    db = sqlite3.connect(path if must_exist else private_db(path), isolation_level=None, check_same_thread=False,
                         timeout=60.0)  # fmt: skip
    db.execute("PRAGMA journal_mode = WAL")
    db.execute("PRAGMA synchronous = NORMAL")
    return db
