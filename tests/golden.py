"""The golden v1 fixtures: how they were made, so they can be made again. Tests read the checked-in bytes.

    python -m tests.golden regenerate

writes fixtures/golden/v1/{plain,envelope}/ (a backup made by the real BackupEngine from a small fixed
cluster: two CRDs, a Namespace, two KubernetesClusters with status, a cluster-scoped ClusterPool; `envelope`
is format 1.1, its data key wrapped by the test key), the test key, and fixtures/golden/crypto-vectors.json
(known answers for the STREAM framing). fixtures/golden/v1/encrypted/ (format 1.0, sealed with the test key
itself) was made the same way by the writer before envelopes, which no longer exists: regenerate leaves it.
Regenerating changes the bytes (zlib versions differ) and must never be done to make a test pass: every
future statusvault must read what is checked in."""

from __future__ import annotations

import base64
import dataclasses
import datetime
import functools
import hashlib
import io
import shutil
import sys
import tempfile
import types
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from unittest import mock

import orjson
import yaml

from statusvault.archive import writer as archivewriter
from statusvault.archive.crypto import CHUNK, EncryptingWriter, Key
from statusvault.backup import engine as backup
from statusvault.kube.discovery import Discovery
from statusvault.model import ResourceType, Selection
from statusvault.storage.local import LocalStore
from statusvault.vocabulary.kinds import CRDS, NAMESPACES
from tests.builders import kc_status

ROOT = Path(__file__).resolve().parents[1]
GOLDEN = ROOT / "fixtures" / "golden"
V1 = GOLDEN / "v1"
NAMESPACE = "golden-v1"
CREATED = datetime.datetime(2025, 1, 10, 2, 0, 0, tzinfo=datetime.UTC)
SECRET = hashlib.sha256(b"statusvault golden v1 test key").digest()  # a test key, checked in on purpose
NONCE_PREFIX = bytes.fromhex("5354415455535631")  # the encrypted fixture's, so regenerating is repeatable
DATA_KEY = hashlib.sha256(b"statusvault golden v1.1 data key").digest()  # the envelope fixture's data key

KC = ResourceType("xyz.example.com", "v1", "kubernetesclusters", "KubernetesCluster", True, True, True,
                  ("list", "create"), ("kc",), "kubernetescluster")  # fmt: skip
POOL = ResourceType("infra.example.com", "v1", "clusterpools", "ClusterPool", False, True, True,
                    ("list", "create"), (), "clusterpool")  # fmt: skip
NS = dataclasses.replace(NAMESPACES, verbs=("create", "get", "list"))
TYPES = [CRDS, NS, KC, POOL]
SELECTION = Selection(include_resources=tuple(rt.qualified for rt in TYPES))


def _served(obj: dict[str, Any], n: int, manager: str = "kubectl") -> dict[str, Any]:
    """The fields an API server adds; managedFields is there to show a backup drops it."""
    meta = obj["metadata"]
    meta.update(
        uid=f"00000000-0000-4000-8000-{n:012d}",
        resourceVersion=str(1000 + n),
        creationTimestamp="2025-01-09T12:00:00Z",
        managedFields=[{"manager": manager, "operation": "Update", "apiVersion": obj["apiVersion"]}],
    )
    if "spec" in obj and obj["kind"] not in ("Namespace", "CustomResourceDefinition"):
        meta["generation"] = 1
    return obj


def cluster_objects() -> dict[str, list[dict[str, Any]]]:
    """What the fixed cluster serves, by qualified resource name, as LIST items."""
    crds = [
        yaml.safe_load((ROOT / "fixtures" / "crds" / f).read_text())
        for f in ("kubernetesclusters.yaml", "clusterpools.yaml")
    ]
    for i, crd in enumerate(crds):
        crd["status"] = {"acceptedNames": crd["spec"]["names"], "storedVersions": ["v1"]}
        _served(crd, i + 1)
    namespace = {
        "apiVersion": "v1",
        "kind": "Namespace",
        "metadata": {"name": NAMESPACE},
        "status": {"phase": "Active"},
    }
    clusters = []
    for i, (name, region) in enumerate((("prod", "eu-west-1"), ("dev", "us-east-1"))):
        meta = {"name": name, "namespace": NAMESPACE, "labels": {"env": name}, "annotations": {"team": "infra"}}
        spec = {"region": region, "version": "1.29", "nodePools": [{"name": "default", "size": 3 - i}]}
        obj = {"apiVersion": "xyz.example.com/v1", "kind": "KubernetesCluster", "metadata": meta, "spec": spec}
        clusters.append(_served({**obj, "status": kc_status(i + 1)}, 10 + i, "kc-operator"))
    pool = {"apiVersion": "infra.example.com/v1", "kind": "ClusterPool", "metadata": {"name": "golden-pool"}}
    pool.update(spec={"capacity": 12}, status={"allocated": 5, "phase": "Ready"})
    return {
        CRDS.qualified: crds,
        NAMESPACES.qualified: [_served(namespace, 5)],
        KC.qualified: clusters,
        POOL.qualified: [_served(pool, 20)],
    }


def expected_members() -> list[tuple[str, dict[str, Any]]]:
    """(member path, object) of the golden backup, in archive order, as every reader must yield them."""
    objects = cluster_objects()
    out = []
    for rt in sorted(TYPES, key=lambda rt: (0 if rt.is_crd else 1 if not rt.namespaced else 2, rt.qualified)):
        for obj in objects[rt.qualified]:
            obj = {**obj, "metadata": {k: v for k, v in obj["metadata"].items() if k != "managedFields"}}
            ns = obj["metadata"].get("namespace")
            where = f"namespaces/{ns}" if ns else "cluster"
            out.append((f"resources/{rt.qualified}/{where}/{obj['metadata']['name']}.json", obj))
    return out


class GoldenKube:
    """The little a BackupEngine asks of a cluster: LIST pages, the version, the host."""

    server = "https://golden.invalid:6443"

    def __init__(self) -> None:
        self.objects = cluster_objects()

    def server_version(self) -> dict[str, Any]:
        return {"gitVersion": "v1.20.2"}

    def list_pages(
        self, rt: ResourceType, namespace: str | None, selector: str = "", limit: int = 500
    ) -> Iterator[list[dict[str, Any]]]:
        yield [orjson.loads(orjson.dumps(o)) for o in self.objects[rt.qualified]]

    def get(self, rt: ResourceType, namespace: str | None, name: str) -> dict[str, Any] | None:
        return next((o for o in self.objects[rt.qualified] if o["metadata"]["name"] == name), None)


class _Clock(datetime.datetime):
    @classmethod
    def now(cls, tz: datetime.tzinfo | None = None) -> _Clock:
        return cls.fromtimestamp(CREATED.timestamp(), tz)


def make_backup(store: LocalStore, name: str, key: Key | None) -> None:
    clock = types.SimpleNamespace(datetime=_Clock, UTC=datetime.UTC)
    prefixed = functools.partial(EncryptingWriter, prefix=NONCE_PREFIX)
    sealing = mock.patch.object(archivewriter, "EncryptingWriter", prefixed)
    data_key = mock.patch.object(Key, "generate", classmethod(lambda cls: cls(DATA_KEY)))
    with mock.patch.object(backup, "dt", clock), sealing, data_key:
        request = backup.BackupRequest(store=store, name=name, selection=SELECTION, key=key)
        backup.BackupEngine(GoldenKube(), Discovery(TYPES, TYPES), request).run()  # type: ignore[arg-type]


# --- known answers for the encryption framing ---

VECTOR_KEY = bytes(range(32))
VECTOR_PREFIX = bytes.fromhex("a0a1a2a3a4a5a6a7")
VECTOR_SIZES = [0, 1, 17, CHUNK - 1, CHUNK, CHUNK + 1, 3 * CHUNK + 100]


def pattern(n: int) -> bytes:
    """The plaintext of a vector: n bytes counting modulo 251."""
    return bytes(i % 251 for i in range(n))


def seal(plain: bytes, key: bytes = VECTOR_KEY, prefix: bytes = VECTOR_PREFIX, pieces: int = 1) -> bytes:
    out = io.BytesIO()
    writer = EncryptingWriter(out, Key(key), prefix)
    step = max(1, len(plain) // pieces)
    for i in range(0, len(plain), step):
        writer.write(plain[i : i + step])
    writer.close()
    return out.getvalue()


def vectors() -> dict[str, Any]:
    cases = []
    for size in VECTOR_SIZES:
        sealed = seal(pattern(size))
        case: dict[str, Any] = {"plaintext": {"pattern": "i % 251", "length": size}, "ciphertextLength": len(sealed)}
        if len(sealed) <= 256:
            case["ciphertextHex"] = sealed.hex()
        else:  # whole ciphertext by digest; the start and every chunk's tag in full
            case["ciphertextSha256"] = hashlib.sha256(sealed).hexdigest()
            case["headHex"] = sealed[:64].hex()
            body = sealed[15:]
            case["tagsHex"] = [body[i : i + CHUNK + 16][-16:].hex() for i in range(0, len(body), CHUNK + 16)]
        cases.append(case)
    return {
        "construction": "SVENC1 STREAM: MAGIC | prefix | AES-256-GCM chunks of 64 KiB (docs/archive-format.md)",
        "keyHex": VECTOR_KEY.hex(),
        "noncePrefixHex": VECTOR_PREFIX.hex(),
        "vectors": cases,
    }


def regenerate() -> None:
    V1.mkdir(parents=True, exist_ok=True)
    (V1 / "test.key").write_text(base64.b64encode(SECRET).decode() + "\n")
    with tempfile.TemporaryDirectory() as tmp:
        store = LocalStore(Path(tmp))
        for folder, key in (("plain", None), ("envelope", Key(SECRET))):
            make_backup(store, f"golden-{folder}", key)
            (V1 / folder).mkdir(exist_ok=True)
            for file in ("archive.tar.gz", "manifest.json"):
                shutil.copyfile(Path(tmp) / "backups" / f"golden-{folder}" / file, V1 / folder / file)
    (GOLDEN / "crypto-vectors.json").write_bytes(orjson.dumps(vectors(), option=orjson.OPT_INDENT_2) + b"\n")


if __name__ == "__main__":
    if sys.argv[1:] != ["regenerate"]:
        sys.exit("usage: python -m tests.golden regenerate")
    regenerate()
