"""What every hostile case is made of: the Case record, a registrar, and the twists cases share."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

import orjson

from tests.hostile import END, Backup, Planted, entry, manifest_bytes

MiB = 1 << 20
KCQ = "kubernetesclusters.xyz.example.com"


@dataclasses.dataclass(frozen=True)
class Case:
    id: str
    build: Callable[[Backup], Planted]
    error: str  # a fragment of the one-line refusal
    encrypted: bool = False
    bomb: bool = False  # big: its memory is measured in a subprocess


Build = Callable[[Backup], Planted]


def registrar(cases: list[Case]) -> Callable[..., Callable[[Build], None]]:
    """A decorator that adds the function it decorates to `cases`, with the refusal it expects."""

    def case(error: str, encrypted: bool = False, bomb: bool = False) -> Callable[[Build], None]:
        def register(build: Build) -> None:
            cases.append(Case(build.__name__, build, error, encrypted, bomb))

        return register

    return case


def prod(b: Backup) -> str:
    return b.path(KCQ, "prod", b.ns)


def obj(b: Backup, path: str) -> dict[str, Any]:
    data: dict[str, Any] = orjson.loads(dict(b.members)[path])
    return data


def renamed(b: Backup, new_path: str, name: str | None = None, namespace: str | None = None) -> Planted:
    """prod moved to another path (its JSON following, so only the path itself is wrong)."""
    o = obj(b, prod(b))
    o["metadata"]["name"] = name if name is not None else o["metadata"]["name"]
    o["metadata"]["namespace"] = namespace if namespace is not None else o["metadata"]["namespace"]
    b.replace(prod(b), orjson.dumps(o), new_path)
    return b.planted()


def with_json(b: Backup, data: bytes, path: str | None = None) -> Planted:
    b.replace(path or prod(b), data)
    b.restate()
    return b.planted()


def kc(name: str, ns: str, padding: int = 0) -> bytes:
    """A minimal KubernetesCluster's JSON, whitespace-padded to grow it."""
    meta = {"name": name, "namespace": ns}
    body = {"apiVersion": "xyz.example.com/v1", "kind": "KubernetesCluster", "metadata": meta}
    return orjson.dumps(body) + b" " * padding


def with_tar(b: Backup, before_manifest: bytes, listed: list[tuple[str, str]] | None = None) -> Planted:
    """The base members, then raw entries, then a manifest listing `listed` as well."""
    body = b"".join(entry(p, d) for p, d in b.members) + before_manifest
    manifest = manifest_bytes(b.head, b.files() + (listed or []))
    return b.planted(body + entry("manifest.json", manifest) + END)


def embedded(b: Backup, manifest: bytes) -> Planted:
    """Another embedded manifest; the summary manifest stays the base's (its checks pass)."""
    return b.planted(b.tar(manifest))
