"""One chain being written: changes go into a buffer; a flush stores it as the next segment (its manifest
naming the previous segment's SHA-256) and moves the head forward."""

from __future__ import annotations

import datetime as dt
import logging
from typing import Any

import orjson

from statusvault import installed_version
from statusvault.archive import signing
from statusvault.archive.crypto import Key
from statusvault.archive.signing import Signer
from statusvault.errors import ArchiveError, StatusVaultError
from statusvault.runtime.killpoints import kill_point
from statusvault.storage.base import ObjectStore, chain_key, segment_key, segment_manifest_key, watch_head_key
from statusvault.watch.segments import (
    CHAIN_KIND,
    SEGMENT_FORMAT,
    SEGMENT_KIND,
    SegmentBuffer,
    check_segment_manifest,
    read_json,
    record,
    segment_context,
    stamp,
)
from statusvault.watch.streams import Change

log = logging.getLogger(__name__)


class FencedError(StatusVaultError):
    """Another writer has written where this one was about to: it is no longer the writer."""


class ChainWriter:
    def __init__(
        self,
        store: ObjectStore,
        watch: str,
        base: str,
        positions: dict[str, str],
        key: Key | None = None,
        signer: Signer | None = None,
    ):
        self.store, self.watch, self.base, self.key, self.signer = store, watch, base, key, signer
        self.positions = dict(positions)  # stream -> resourceVersion of the last change in the buffer or before
        self.seq = 0
        self.previous = ""  # SHA-256 the next segment names: the base archive's, then each segment's
        self.buffer = SegmentBuffer()
        self.last_until: dt.datetime | None = None
        self.last_seen: dt.datetime | None = None

    @classmethod
    def resume(
        cls, store: ObjectStore, head: dict[str, Any], key: Key | None, signer: Signer | None = None
    ) -> ChainWriter:
        """Continue the chain the head describes, after its last segment: one stored by a writer that died before
        moving the head counts (else every later flush would meet it and be fenced off)."""
        w = cls(store, head["watch"], head["base"], head["resourceVersions"], key, signer)
        w.seq, w.previous = int(head["seq"]), str(head["previous"])
        while store.exists(mkey := segment_manifest_key(w.watch, w.base, w.seq + 1)):
            where = f"segment {w.seq + 1} of watch {w.watch!r} (base {w.base})"
            m = check_segment_manifest(read_json(store, mkey, where), w.watch, w.base, w.seq + 1)
            if m["previous"] != w.previous:
                raise ArchiveError(f"{where} does not follow segment {w.seq}: the chain is broken")
            w.seq, w.previous, w.positions = m["seq"], m["sha256"], dict(m["resourceVersions"])
        return w

    def add(self, change: Change, seen: dt.datetime) -> None:
        """Buffer a change seen at `seen`; records' times never go back (a reader refuses a chain whose do), so a
        clock stepped back records the last time again."""
        seen = self.last_seen = max(seen, self.last_seen) if self.last_seen is not None else seen
        self.buffer.add(record(change.op, change.resource, change.rv, seen, change.data), seen)
        self.positions[change.stream] = change.rv

    def note(self, stream: str, rv: str) -> None:
        self.positions[stream] = rv

    def open(self, base_sha256: str, start: dt.datetime, selection: dict[str, Any]) -> None:
        """The base is complete: write chain.json, from which moment on this chain is restorable."""
        self.previous = base_sha256
        info = {
            "formatVersion": SEGMENT_FORMAT,
            "kind": CHAIN_KIND,
            "watch": self.watch,
            "base": self.base,
            "baseSha256": base_sha256,
            "from": stamp(start),
            "selection": selection,
        }
        self.store.put(chain_key(self.watch, self.base), orjson.dumps(info, option=orjson.OPT_INDENT_2))

    def flush(self, now: dt.datetime, holder: str, closed: bool = False) -> dict[str, Any] | None:
        """Store the buffer as the next segment (if it holds anything) and the head; return its manifest.

        closed: the chain ends here (a stream lost changes): a new writer must not continue it."""
        manifest = None
        if self.buffer.records:
            manifest = self._segment(now)
            kill_point("watch.segment-recorded")
        else:
            self.buffer.close()
        self.buffer = SegmentBuffer()
        head = {
            "watch": self.watch,
            "base": self.base,
            "seq": self.seq,
            "previous": self.previous,
            "until": stamp(now),
            "resourceVersions": self.positions,
            "holder": holder,
            "closed": closed,
        }
        self.store.put(watch_head_key(self.watch), orjson.dumps(head, option=orjson.OPT_INDENT_2))
        self.last_until = now
        return manifest

    def _segment(self, now: dt.datetime) -> dict[str, Any]:
        seq = self.seq + 1
        mkey = segment_manifest_key(self.watch, self.base, seq)
        if self.store.exists(mkey):  # fencing: a writer that lost its Lease must not fork the chain
            raise FencedError(f"segment {seq} of {self.base} was written by another writer")
        buf = self.buffer
        size, sha = buf.upload(
            self.store, segment_key(self.watch, self.base, seq), self.key, segment_context(self.watch, self.base, seq)
        )
        kill_point("watch.segment-stored")
        manifest: dict[str, Any] = {
            "formatVersion": SEGMENT_FORMAT,
            "kind": SEGMENT_KIND,
            "tool": {"name": "statusvault", "version": installed_version()},
            "watch": self.watch,
            "base": self.base,
            "seq": seq,
            "previous": self.previous,
            "sha256": sha,
            "size": size,
            "records": buf.records,
            "rawBytes": buf.raw_bytes,
            "firstSeen": stamp(buf.first_seen or now),
            "lastSeen": stamp(buf.last_seen or now),
            "until": stamp(now),
            "resourceVersions": self.positions,
        }
        if self.key is not None:
            manifest["encryption"] = self.key.describe()
        if self.signer is not None:
            manifest[signing.FIELD] = signing.sign(manifest, signing.SEGMENT, self.signer)
        self.store.put(mkey, orjson.dumps(manifest, option=orjson.OPT_INDENT_2))
        self.seq, self.previous = seq, sha
        return manifest

    def discard(self) -> None:
        self.buffer.close()
