"""Where a restore keeps its state between runs: the plan (what was decided) and the journal (what has been
done), found by the restore's key and held under a lock, so the same command resumes where it stopped."""

from __future__ import annotations

import dataclasses
import fcntl
import hashlib
import logging
import os
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import orjson

from statusvault.errors import ConfigError, StatusVaultError
from statusvault.model import DryRun
from statusvault.restore.core.fields import new_manager
from statusvault.restore.core.journal import Journal
from statusvault.restore.core.plan import RestorePlan
from statusvault.restore.modifiers import Modifiers
from statusvault.restore.options import FenceMode, RestoreOptions
from statusvault.restore.ordering.order import Order

log = logging.getLogger(__name__)

Planner = Callable[[str, Path | None], RestorePlan]  # (field manager, plan path) -> a sealed plan


@dataclasses.dataclass
class RestoreState:
    plan: RestorePlan | None  # None: a streamed restore builds it as it writes (plan_path)
    journal: Journal
    plan_path: Path | None = None


KEY_VERSION = 2  # 1 hashed Python's repr of the options: any new option field changed every key


def state_key(backup: str, identity: tuple[str, ...], opts: RestoreOptions) -> str:
    """One key per backup (store, name, content) or lineage (store, name), target cluster and options (dry run
    aside; --fence and --scale-down aside too: they change who is stopped, not what is restored, so a re-run
    without them resumes the killed run and scales back what it left at 0).

    The key hashes a canonical encoding (sorted JSON) of the options that are not at their defaults, by field
    name: a release that adds an option keeps every key of the runs that do not use it, so a restore stopped by
    one release resumes under the next. Renaming a field changes keys: that is a new KEY_VERSION."""
    pause = dataclasses.replace(opts.pause, keep_paused=())  # the run without it releases what it kept
    same = dataclasses.replace(
        opts, dry_run=DryRun.NONE, pause=pause, fence=FenceMode.NONE, fence_exclude=(), scale_down=()
    )
    decisive = {"v": KEY_VERSION, "backup": backup, "identity": list(identity), "options": canonical(same)}
    text = orjson.dumps(decisive, option=orjson.OPT_SORT_KEYS)
    return f"{backup}-{hashlib.sha256(text).hexdigest()[:16]}"


def canonical(value: Any) -> Any:
    """A JSON value for `value`: a dataclass as its fields that differ from their defaults (a modifiers file or an
    order as its digest), tuples as lists."""
    if isinstance(value, Modifiers | Order):
        return value.digest
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        out = {}
        for f in dataclasses.fields(value):
            v = getattr(value, f.name)
            default = f.default_factory() if f.default_factory is not dataclasses.MISSING else f.default
            if v != default:
                out[f.name] = canonical(v)
        return out
    if isinstance(value, tuple | list):
        return [canonical(v) for v in value]
    if isinstance(value, dict):
        return {str(k): canonical(v) for k, v in value.items()}
    if value is None or isinstance(value, str | int | float | bool):
        return value
    raise TypeError(f"no canonical form for {type(value).__name__} in a restore's key")


@contextmanager
def restore_state(
    state_dir: Path | None,
    backup: str,
    key: str,
    planner: Planner,
    keep: bool = True,
    restart: bool = False,
    existing: bool = False,
    stream: bool = False,
) -> Iterator[RestoreState]:
    """The plan and journal of this restore: an unfinished earlier run's (unless restart), else new ones.

    An earlier run's state planned for another backup (keys that name a lineage, not a backup) is restarted
    with that run's identity: what it created is this restore's own and gets the saved status of this backup.
    keep=False (a dry run), or no usable state_dir: scratch files, removed afterwards. Both files are
    removed once the journal's run `finished` (the caller says so by calling finish()). existing: only an
    earlier run's state will do (statusvault unpause). stream: the journal comes first and the plan is left to the
    caller (state.plan None), unless an earlier run's sealed plan is resumed; a journal without its plan (a streamed
    run stopped before sealing it) is kept, and the plan made again: its rows are numbered the same."""
    where = _state_dir(state_dir) if keep else None
    if where is None and existing:
        raise ConfigError(f"statusvault keeps no restore state here: no unfinished restore of {backup} to finish")
    if where is None:
        journal = Journal.create(None)
        state = RestoreState(None if stream else planner(journal.manager, None), journal)
        try:
            yield state
        finally:
            _close(state)
        return
    plan_path, journal_path = where / f"{key}.plan.sqlite", where / f"{key}.journal.sqlite"
    with _locked(where / f"{key}.lock", backup, journal_path):
        if existing and not journal_path.exists():
            raise ConfigError(f"no restore of {backup} with these options is unfinished or has objects left paused")
        unsealed = not restart and journal_path.exists() and not plan_path.exists()
        earlier = None if restart or unsealed else _resumable(plan_path, journal_path, backup)
        if earlier is not None:
            state = RestoreState(earlier, Journal.open(journal_path))
            log.info("resuming an earlier restore: %d objects were already done", state.journal.resumed)
        elif stream or unsealed:
            journal = _unsealed(journal_path, backup) if unsealed else _new_journal(journal_path, backup)
            state = RestoreState(None, journal, plan_path)
            if not stream:
                state.plan = planner(journal.manager, plan_path)
        else:
            earlier_manager, counts = _earlier(journal_path)
            manager = earlier_manager or new_manager()
            plan = planner(manager, plan_path)
            journal = _carried(Journal.create(journal_path, manager), counts)  # with the counts of what it left at 0
            state = RestoreState(plan, journal)  # last: it marks the state usable
        try:
            yield state
        finally:
            _close(state)


def _new_journal(path: Path, backup: str) -> Journal:
    """A streamed run's journal, first (its plan is built as it writes), with an earlier attempt's identity."""
    manager, counts = _earlier(path)
    return _carried(Journal.create(path, manager or new_manager(), backup), counts)


def _unsealed(path: Path, backup: str) -> Journal:
    """The journal of a streamed run stopped before its plan was sealed; one that restored another backup of the
    same lineage starts over with that run's identity (its rows were numbered for the other backup)."""
    journal = Journal.open(path)
    if journal.backup == backup:
        return journal
    journal.close()
    log.info("an earlier, unfinished run restored %s: restoring %s as the same restore", journal.backup, backup)
    return _new_journal(path, backup)


def _close(state: RestoreState) -> None:
    if state.plan is not None:
        state.plan.close()
    state.journal.close()


def finish(state: RestoreState) -> None:
    """The restore is complete: its state goes (the journal first, so no half state is ever resumed)."""
    state.journal.remove()
    if state.plan is not None:
        state.plan.remove()


def _state_dir(state_dir: Path | None) -> Path | None:
    if state_dir is None:
        return None
    where = state_dir / "restores"
    try:
        where.mkdir(mode=0o700, parents=True, exist_ok=True)
        if where.stat().st_uid == os.getuid():
            where.chmod(0o700)  # plans and journals name the objects of (perhaps encrypted) backups: private
    except OSError as e:
        log.warning("cannot keep a restore journal (%s): this restore cannot be resumed", e)
        return None
    return where


def _resumable(plan_path: Path, journal_path: Path, backup: str) -> RestorePlan | None:
    """The plan an unfinished earlier run left for this backup. One for another backup of the same lineage is not
    resumed: this run starts over, with that run's identity."""
    if not journal_path.exists():
        return None
    plan = RestorePlan.open(plan_path)
    if plan.backup == backup:
        return plan
    plan.close()
    log.info("an earlier, unfinished run restored %s: restoring %s as the same restore", plan.backup, backup)
    return None


def earlier_manager(state_dir: Path | None, key: str) -> str:
    """The field manager of the unfinished restore kept under `key` ("" when there is none)."""
    where = _state_dir(state_dir)
    return _earlier_manager(where / f"{key}.journal.sqlite") if where is not None else ""


def _earlier_manager(journal: Path) -> str:
    """The identity of the attempt that --restart discards: what it created is still this restore's own."""
    return _earlier(journal)[0]


def _earlier(journal: Path) -> tuple[str, dict[str, int]]:
    """The identity of the attempt a new journal replaces, and the replica counts of the workloads it left at 0
    (they are this restore's to scale back, whatever is restarted)."""
    if not journal.exists():
        return "", {}
    try:
        earlier = Journal.open(journal)
    except StatusVaultError:
        return "", {}  # unreadable: its objects count as existing
    try:
        counts = {w: n for w in earlier.scaled() if (n := earlier.scale_count(w)) is not None}
    finally:
        earlier.close()
    return earlier.manager, counts


def _carried(journal: Journal, counts: dict[str, int]) -> Journal:
    for workload, replicas in counts.items():
        journal.mark_scaled(workload, replicas)
    return journal


@contextmanager
def _locked(lock: Path, backup: str, journal: Path) -> Iterator[None]:
    """An exclusive flock on the state's .lock file. The lock file is removed with the state, so after locking
    check that the file locked is still the one at that path (else a remover won the race: try again)."""
    while True:
        with os.fdopen(os.open(lock, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600), "a") as f:
            try:
                fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                raise StatusVaultError(
                    f"another restore of {backup} with the same options is running (it holds {lock})"
                ) from None
            try:
                current = os.stat(lock).st_ino
            except FileNotFoundError:
                continue
            if current != os.fstat(f.fileno()).st_ino:
                continue
            try:
                yield
            finally:
                if not journal.exists():
                    lock.unlink(missing_ok=True)
            return
