"""Retention for a watch: whole chains go, oldest first, and only when no kept moment needs them; the newest
chain always stays. A chain is removed chain.json first (it stops being listed), then its segments, then its
base, so a prune that stops halfway never leaves a chain that looks whole but is not."""

from __future__ import annotations

import contextlib
import datetime as dt

from statusvault import rfc3339
from statusvault.errors import BackupNotFoundError
from statusvault.storage.base import CHAIN_FILE, ObjectStore, chain_of, chain_prefix, watch_prefix
from statusvault.store import catalog
from statusvault.store.backups import BackupStore
from statusvault.store.retention import Decision, RetentionPolicy
from statusvault.watch.chains import Chain, chains, reach


def decide_chains(found: list[Chain], policy: RetentionPolicy, now: dt.datetime) -> list[Decision]:
    """Pure: keep the newest chain (the one reaching furthest), the last --keep-last, and every chain reaching into
    the --ttl window."""
    newest_first = sorted(found, key=reach, reverse=True)
    out = []
    for i, c in enumerate(newest_first):
        if i == 0:
            out.append(Decision(c.base, False, "newest chain"))
        elif policy.keep_last and i < policy.keep_last:
            out.append(Decision(c.base, False, f"within the last {policy.keep_last}"))
        elif policy.ttl is not None and c.until >= now - policy.ttl:
            out.append(Decision(c.base, False, "holds moments within the TTL"))
        else:
            out.append(Decision(c.base, True, "no kept moment needs it"))
    return list(reversed(out))


def prune_watch(
    store: ObjectStore, watch: str, policy: RetentionPolicy, dry_run: bool = False, now: dt.datetime | None = None
) -> list[Decision]:
    found = chains(store, watch)
    decisions = decide_chains(found, policy, now or dt.datetime.now(dt.UTC))
    decisions += _leftovers(store, watch, {c.base for c in found}, policy, now or dt.datetime.now(dt.UTC))
    decisions = [catalog.held_back(d, BackupStore(store).hold(d.name) if d.delete else None) for d in decisions]
    if not dry_run:
        for d in decisions:
            if d.delete:
                delete_chain(store, watch, d.name)
    return decisions


def _leftovers(
    store: ObjectStore, watch: str, listed: set[str], policy: RetentionPolicy, now: dt.datetime
) -> list[Decision]:
    """Chains without chain.json: a base still being made or just made (recent), a writer killed after its base
    landed and before the chain's chain.json (a complete base no chain names), or a prune that stopped halfway."""
    seen: dict[str, dt.datetime] = {}
    for obj in store.list(f"{watch_prefix(watch)}chains/"):
        where = chain_of(obj.key, watch)
        if where is not None and where[0] not in listed:
            seen[where[0]] = min(seen.get(where[0], obj.modified), obj.modified)
    for b in catalog.list_backups(store):
        if b.complete and b.schedule == f"watch:{watch}" and b.name not in listed:
            created = rfc3339.parse(b.created)
            seen[b.name] = min(seen.get(b.name, created), created)
    out = []
    for base, modified in sorted(seen.items()):
        old = now - modified > policy.incomplete_grace
        out.append(Decision(base, old, "unfinished chain, past the grace period" if old else "unfinished chain"))
    return out


def delete_chain(store: ObjectStore, watch: str, base: str) -> None:
    keys = sorted(o.key for o in store.list(chain_prefix(watch, base)))
    keys.sort(key=lambda k: not k.endswith(f"/{CHAIN_FILE}"))
    for key in keys:
        store.delete(key)
    with contextlib.suppress(BackupNotFoundError):
        BackupStore(store).delete(base)
