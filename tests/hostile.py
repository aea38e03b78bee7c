"""Building blocks for hostile archives: tar entries of any shape, manifests in the writer's layout, and a
small base backup (a Namespace, two KubernetesClusters with status, a ClusterPool) to twist.

Every archive built here is self-consistent: file hashes, the embedded manifest and the summary manifest
(size, SHA-256) are recomputed, as someone who can write the bucket would, so only the reader's own checks
stand between it and the cluster."""

from __future__ import annotations

import dataclasses
import hashlib
import io
import tarfile
import zlib
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import orjson

from statusvault.archive import member_path
from statusvault.archive.crypto import EncryptingWriter, Key
from statusvault.backup import ResourceSummary
from statusvault.model import ResourceType, object_key
from statusvault.vocabulary.kinds import NAMESPACES
from tests.builders import cr, kc_status, resource_type

KC = resource_type("xyz.example.com", "KubernetesCluster")
POOL = resource_type("infra.example.com", "ClusterPool", namespaced=False)
SECRET = hashlib.sha256(b"statusvault hostile corpus key").digest()  # a test key, nothing else uses it
KEY = Key(SECRET)
BLOCK = 512


# --- tar entries ---


def header(name: str, size: int, kind: bytes = b"0", linkname: str = "", magic: bytes = b"ustar\x0000") -> bytes:
    """One ustar header block with a valid checksum, whatever it says."""
    block = bytearray(BLOCK)
    block[0:100] = name.encode()[:100].ljust(100, b"\0")
    block[100:108] = b"0000644\0"
    block[108:124] = b"0000000\0" * 2
    block[124:136] = (b"%011o\0" % size) if size < 8**11 else b"\x80" + size.to_bytes(11, "big")
    block[136:148] = b"00000000000\0"
    block[156:157] = kind
    block[157:257] = linkname.encode()[:100].ljust(100, b"\0")
    block[257:265] = magic
    block[148:156] = b" " * 8
    block[148:156] = b"%06o\0 " % sum(block)
    return bytes(block)


def padded(data: bytes) -> bytes:
    return data + bytes(-len(data) % BLOCK)


def pax(records: dict[str, str], kind: bytes = b"x") -> bytes:
    """A PAX extended (or, with kind b"g", global) header and its records."""
    body = b"".join(_pax_record(k, v) for k, v in records.items())
    return header("././@PaxHeader", len(body), kind) + padded(body)


def _pax_record(key: str, value: str) -> bytes:
    rest = f" {key}={value}\n".encode()
    n = len(rest) + 1
    while len(str(n)) + len(rest) != n:
        n += 1
    return str(n).encode() + rest


def entry(name: str, data: bytes) -> bytes:
    """A regular file exactly as the writer stores it (tarfile, PAX format). A short ASCII name needs no PAX
    record, and tarfile's block is then `header`'s, built here in a tenth of the time (cases add 200,000)."""
    if name.isascii() and len(name) < 100 and len(data) < 8**11:
        return header(name, len(data)) + padded(data)
    info = tarfile.TarInfo(name)
    info.size, info.mode = len(data), 0o644
    return info.tobuf(tarfile.PAX_FORMAT) + padded(data)


def special(name: str, kind: bytes, linkname: str = "", data: bytes = b"") -> bytes:
    """A link, device, directory or other non-regular entry (with data, when given)."""
    return header(name, len(data), kind, linkname) + padded(data)


END = bytes(2 * BLOCK)


# --- manifests and archives ---


def sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def manifest_bytes(head: dict[str, Any], files: list[tuple[str, str]]) -> bytes:
    """The writer's layout: compact, keys sorted, `files` last and in archive order."""
    listed = b",".join(orjson.dumps(p) + b":" + orjson.dumps(h) for p, h in files)
    return orjson.dumps(head, option=orjson.OPT_SORT_KEYS)[:-1] + b',"files":{' + listed + b"}}"


def gz(tar: bytes | Iterable[bytes]) -> bytes:
    """gzip (level 3, as the writer) of the tar bytes, given whole or in parts never held together."""
    z = zlib.compressobj(3, zlib.DEFLATED, 16 + zlib.MAX_WBITS)
    parts = [tar] if isinstance(tar, bytes) else tar
    return b"".join([*(z.compress(p) for p in parts), z.flush()])


def encrypt(plain: bytes, key: Key = KEY, prefix: bytes = b"hostile!") -> bytes:
    out = io.BytesIO()
    writer = EncryptingWriter(out, key, prefix)
    writer.write(plain)
    writer.close()
    return out.getvalue()


@dataclasses.dataclass
class Planted:
    """What goes into the store: the archive's bytes and the summary manifest beside them."""

    archive: bytes
    summary: dict[str, Any]
    compact: bool = False  # the summary manifest without the writer's indentation

    def write(self, store: Path, name: str) -> None:
        folder = store / "backups" / name
        folder.mkdir(parents=True, exist_ok=True)
        (folder / "archive.tar.gz").write_bytes(self.archive)
        option = 0 if self.compact else orjson.OPT_INDENT_2
        (folder / "manifest.json").write_bytes(orjson.dumps(self.summary, option=option))


def summary_of(head: dict[str, Any], stored: bytes) -> dict[str, Any]:
    return {**head, "archive": {"file": "archive.tar.gz", "size": len(stored), "sha256": sha(stored)}}


# --- the base backup ---


def base_objects(ns: str) -> list[tuple[ResourceType, dict[str, Any]]]:
    namespace = {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}, "spec": {}}
    prod = cr("xyz.example.com/v1", "KubernetesCluster", "prod", spec={"region": "eu"}, status=kc_status(1))
    dev = cr("xyz.example.com/v1", "KubernetesCluster", "dev", spec={"region": "us"}, status=kc_status(2))
    for obj in (prod, dev):
        obj["metadata"]["namespace"] = ns
    pool = cr("infra.example.com/v1", "ClusterPool", f"{ns}-pool", spec={"size": 3}, status={"phase": "Ready"})
    return [(POOL, pool), (NAMESPACES, namespace), (KC, prod), (KC, dev)]


@dataclasses.dataclass
class Backup:
    """A consistent backup as members and a manifest head; cases change it, then build the archive."""

    name: str
    ns: str
    members: list[tuple[str, bytes]]
    head: dict[str, Any]
    encrypted: bool = False

    @classmethod
    def base(cls, name: str, ns: str, encrypted: bool = False) -> Backup:
        objects = base_objects(ns)
        if encrypted:  # an incompressible field: the ciphertext spans several 64 KiB chunks
            objects[2][1]["spec"]["blob"] = "".join(sha(b"%d" % i) for i in range(4000))
        members = [
            (member_path(object_key(rt, obj)), orjson.dumps(obj, option=orjson.OPT_SORT_KEYS)) for rt, obj in objects
        ]
        summaries: dict[str, ResourceSummary] = {}
        for rt, obj in objects:
            s = summaries.setdefault(rt.qualified, ResourceSummary(rt))
            s.count += 1
            s.with_status += bool(obj.get("status"))
        head = {
            "formatVersion": "1.0",
            "tool": {"name": "statusvault", "version": "0.1.0"},
            "name": name,
            "createdAt": "2025-01-10T02:00:00Z",
            "completedAt": "2025-01-10T02:00:01Z",
            "server": {"gitVersion": "v1.20.2", "host": "https://127.0.0.1:6443"},
            "selection": {"namespaces": [], "includeResources": [], "excludeResources": [], "labelSelector": ""},
            "schedule": "",
            "resources": {q: s.to_dict() for q, s in sorted(summaries.items())},
            "totals": {"objects": len(members), "withStatus": 3, "terminating": 0, "uncompressedBytes": 0},
        }
        head["totals"]["uncompressedBytes"] = sum(len(d) for _, d in members)
        if encrypted:
            head["encryption"] = KEY.describe()
        return cls(name, ns, members, head, encrypted)

    def path(self, qualified: str, name: str, namespace: str = "") -> str:
        return (
            f"resources/{qualified}/namespaces/{namespace}/{name}.json"
            if namespace
            else f"resources/{qualified}/cluster/{name}.json"
        )

    def replace(self, path: str, data: bytes, new_path: str | None = None) -> None:
        self.members = [(new_path or p, data) if p == path else (p, d) for p, d in self.members]

    def restate(self, extra: int = 0) -> None:
        """totals.uncompressedBytes as the members (and `extra` bytes more) make it, as an attacker would."""
        self.head["totals"]["uncompressedBytes"] = sum(len(d) for _, d in self.members) + extra

    def files(self) -> list[tuple[str, str]]:
        return [(p, sha(d)) for p, d in self.members]

    def tar(self, manifest: bytes | None = None) -> bytes:
        body = b"".join(entry(p, d) for p, d in self.members)
        manifest = manifest if manifest is not None else manifest_bytes(self.head, self.files())
        return body + entry("manifest.json", manifest) + END

    def planted(self, tar: bytes | Iterable[bytes] | None = None, summary: dict[str, Any] | None = None) -> Planted:
        """The archive (encrypted when the backup is) with a summary manifest that matches it."""
        stored = gz(tar if tar is not None else self.tar())
        if self.encrypted:
            stored = encrypt(stored)
        return Planted(stored, summary_of(summary if summary is not None else self.head, stored))


KC_PATH = "resources/kubernetesclusters.xyz.example.com/namespaces/{ns}/prod.json"
