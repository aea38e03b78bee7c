"""A watch's record in a store: its chains (a base and the segments after it), their restorable ranges, and
the walk that checks every link of a chain on the way (used by verify and by a point-in-time restore)."""

from __future__ import annotations

import dataclasses
import datetime as dt
from collections.abc import Iterator
from typing import Any

from statusvault import rfc3339
from statusvault.archive import signing
from statusvault.archive.crypto import Key
from statusvault.archive.envelope import FileKek, Keyring, Keys, refs
from statusvault.archive.signing import Signer
from statusvault.errors import ArchiveError, BackupNotFoundError
from statusvault.storage.base import (
    CHAIN_FILE,
    ObjectStore,
    chain_key,
    chain_of,
    segment_key,
    segment_manifest_key,
    watch_head_key,
    watch_prefix,
)
from statusvault.store.backups import BackupStore
from statusvault.watch.segments import (
    CHAIN_KIND,
    bound,
    check_segment_manifest,
    fetched_segment,
    parse_record_time,
    read_json,
    records,
    stored_segment,
)


@dataclasses.dataclass
class Chain:
    """One base and its segments: restorable from `start` (the base's LIST had ended) to `until`."""

    watch: str
    base: str
    start: dt.datetime
    base_sha256: str
    segments: int  # segments listed in the store
    until: dt.datetime
    stored_bytes: int = 0
    head_seq: int = 0  # the last segment the head names, when the head is on this chain

    def to_dict(self) -> dict[str, Any]:
        return {
            "base": self.base,
            "from": rfc3339.format_micro(self.start),
            "until": rfc3339.format_micro(self.until),
            "segments": self.segments,
            "segmentBytes": self.stored_bytes,
        }


def watch_exists(store: ObjectStore, watch: str) -> bool:
    return next(iter(store.list(watch_prefix(watch))), None) is not None


def read_head(store: ObjectStore, watch: str) -> dict[str, Any] | None:
    key = watch_head_key(watch)
    return read_json(store, key, f"head of watch {watch!r}") if store.exists(key) else None


def chains(store: ObjectStore, watch: str) -> list[Chain]:
    """The watch's complete chains, oldest first (a chain without chain.json is being made or half pruned)."""
    found: dict[str, dict[str, Any]] = {}
    for obj in store.list(f"{watch_prefix(watch)}chains/"):
        where = chain_of(obj.key, watch)
        if where is None:
            continue
        entry = found.setdefault(where[0], {"chain": False, "seqs": [], "bytes": 0})
        if where[1] == CHAIN_FILE:
            entry["chain"] = True
        elif where[1].endswith(".json") and where[1][:-5].isdigit():
            entry["seqs"].append(int(where[1][:-5]))
        else:
            entry["bytes"] += obj.size
    head = read_head(store, watch) or {}
    out = [_chain(store, watch, base, e, head) for base, e in found.items() if e["chain"]]
    return sorted(out, key=lambda c: c.start)


def _chain(store: ObjectStore, watch: str, base: str, entry: dict[str, Any], head: dict[str, Any]) -> Chain:
    info = read_json(store, chain_key(watch, base), f"chain {base} of watch {watch!r}")
    if info.get("kind") != CHAIN_KIND or info.get("base") != base or not isinstance(info.get("from"), str):
        raise ArchiveError(f"chain {base} of watch {watch!r}: chain.json is malformed")
    start = parse_record_time(info["from"])
    seqs = sorted(entry["seqs"])
    until = start
    if seqs:
        last = read_json(store, segment_manifest_key(watch, base, seqs[-1]), f"segment {seqs[-1]} of {base}")
        until = parse_record_time(str(last.get("until") or info["from"]))
    head_seq = 0
    if head.get("base") == base:
        head_seq = int(head.get("seq") or 0)
        if head_seq == (seqs[-1] if seqs else 0):
            until = max(until, parse_record_time(str(head.get("until") or info["from"])))
    return Chain(watch, base, start, str(info.get("baseSha256", "")), len(seqs), until, entry["bytes"], head_seq)


def walk(store: ObjectStore, chain: Chain, key: Keys, upto: dt.datetime | None = None) -> Iterator[dict[str, Any]]:
    """Every record of the chain (up to `upto`), in order, checking each link (see `links`), each segment's
    SHA-256, and that records' times never go back. Raises ArchiveError at the first broken link."""
    last: dt.datetime | None = None
    for where, m in links(store, chain, upto, key):
        with fetched_segment(store, segment_key(chain.watch, chain.base, m["seq"]), m, key, where) as path:
            for rec in records(path, where):
                seen = parse_record_time(rec["seen"])
                if last is not None and seen < last:
                    raise ArchiveError(f"{where}: a record was seen before the one it follows: the chain is broken")
                last = seen
                yield rec


def links(
    store: ObjectStore, chain: Chain, upto: dt.datetime | None = None, keys: Keys = None
) -> Iterator[tuple[str, dict[str, Any]]]:
    """(where, manifest) of each segment (up to the first seen after `upto`), checking the chain's links: the base
    is there and is the one the chain names, segments are numbered 1..n without a gap, each names its
    predecessor's SHA-256, follows it in time, is signed when verification keys are given, and none the head names
    is missing. Raises ArchiveError at the first broken link."""
    _check_base(store, chain)
    verifiers = Keyring.of(keys).verifiers
    previous, seq, last_seen = chain.base_sha256, 0, ""
    last = max(chain.segments, chain.head_seq)
    while seq < last:
        seq += 1
        where = f"segment {seq} of watch {chain.watch!r} (base {chain.base})"
        mkey = segment_manifest_key(chain.watch, chain.base, seq)
        if not store.exists(mkey):
            raise ArchiveError(f"{where} is missing from the store: the chain is broken")
        m = check_segment_manifest(read_json(store, mkey, where), chain.watch, chain.base, seq)
        if m["previous"] != previous:
            raise ArchiveError(f"{where} does not follow segment {seq - 1}: the chain is broken")
        signing.authenticate(m, signing.SEGMENT, where, verifiers, sealed=bool(m.get("encryption")) and bound(m))
        first = parse_record_time(str(m.get("firstSeen") or m["until"]))
        if last_seen and first < parse_record_time(last_seen):
            raise ArchiveError(f"{where} was seen before segment {seq - 1} ended: the chain is broken")
        last_seen = str(m.get("lastSeen") or m["until"])
        if upto is not None and m.get("firstSeen") and parse_record_time(m["firstSeen"]) > upto:
            return
        yield where, m
        previous = m["sha256"]


def _check_base(store: ObjectStore, chain: Chain) -> None:
    try:
        manifest = BackupStore(store).manifest(chain.base)
    except BackupNotFoundError:
        raise ArchiveError(f"base {chain.base} of watch {chain.watch!r} is missing: the chain is broken") from None
    if (manifest.get("archive") or {}).get("sha256") != chain.base_sha256:
        raise ArchiveError(f"base {chain.base} of watch {chain.watch!r} is not the one its chain names")


def verify(store: ObjectStore, watch: str, key: Keys) -> tuple[list[Chain], int]:
    """Walk every chain of the watch in full; ArchiveError at the first broken link. Returns the chains and the
    number of encrypted segments whose records went unread for want of the key (their links and stored
    SHA-256 were checked, as `verify` does for an encrypted backup without its key)."""
    found = chains(store, watch)
    if not found:
        raise BackupNotFoundError(f"watch {watch!r} has no restorable chain in {store.url}")
    unread = 0
    for chain in found:
        for where, m in links(store, chain, keys=key):
            skey = segment_key(chain.watch, chain.base, m["seq"])
            if not key and m.get("encryption"):
                with stored_segment(store, skey, m, where):
                    unread += 1
                continue
            with fetched_segment(store, skey, m, key, where) as path:
                for _ in records(path, where):
                    pass
    return found, unread


def why_not_continued(
    store: ObjectStore, head: dict[str, Any], selection: dict[str, Any], key: Key | None, signer: Signer | None = None
) -> str | None:
    """Why a new writer with this selection, key and signing key must not continue the head's chain (None: it may):
    a chain holds one selection, one key and one signing key from its base on, or no restore could read it whole."""
    watch, base = str(head["watch"]), str(head["base"])
    if not store.exists(chain_key(watch, base)):
        return f"chain {base} is gone"
    info = read_json(store, chain_key(watch, base), f"chain {base} of watch {watch!r}")
    if info.get("selection") != selection:
        return f"chain {base} was made for another selection"
    try:
        manifest = BackupStore(store).manifest(base)
    except BackupNotFoundError:
        return f"base {base} is gone"
    signed_by = (signing.describe(manifest) or {}).get("keyId")
    signer_id = signer.key_id() if signer is not None else None
    if signed_by != signer_id:
        return f"chain {base} is signed by another key ({signed_by or 'none'}; this writer's: {signer_id or 'none'})"
    encryption = manifest.get("encryption")
    theirs = refs(encryption) if encryption else []  # the key files and KMS keys that open the base
    ours = FileKek(key).ref() if key is not None else None
    if (ours is None and not theirs) or ours in theirs:
        return None
    listed = ", ".join(theirs) or "none"
    return f"chain {base} is encrypted with another key ({listed}; this writer's: {ours or 'none'})"


def reach(chain: Chain) -> tuple[dt.datetime, dt.datetime]:
    """How far a chain reaches (its `until`, then its start): the chain a writer continues is the one reaching
    furthest, even when a newer chain exists (its writer killed before the head moved to it)."""
    return chain.until, chain.start


def chain_for(found: list[Chain], at: dt.datetime | None, watch: str) -> tuple[Chain, dt.datetime]:
    """The newest chain whose range holds `at` (None: the latest restorable moment, in the chain reaching furthest)."""
    if not found:
        raise BackupNotFoundError(f"watch {watch!r} has no restorable chain yet")
    if at is None:
        latest = max(found, key=reach)
        return latest, latest.until
    for chain in reversed(found):
        if chain.start <= at <= chain.until:
            return chain, at
    ranges = ", ".join(f"{c.to_dict()['from']} .. {c.to_dict()['until']}" for c in found)
    raise ArchiveError(f"watch {watch!r} cannot restore {at.isoformat()}: its restorable ranges are {ranges}")


def watch_names(store: ObjectStore) -> list[str]:
    names = {obj.key.split("/")[1] for obj in store.list("watches/") if obj.key.count("/") >= 2}
    return sorted(names)
