"""Velero backup tarballs as the tests build them, from Velero's documented output file format (format 1 and 1.1.0:
`metadata/version`, the classic `resources/<resource.group>/{namespaces/<ns>,cluster}/<name>.json` tree, and with
1.1.0 a `<version>-preferredversion` directory holding the same objects and one directory per other API version).
Our own builder (no Velero code); tests/hostile.py's tar pieces make the hostile ones."""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path
from typing import Any

import orjson

from tests.hostile import END, entry, gz


def member(obj: dict[str, Any], qualified: str, version_dir: str = "") -> tuple[str, bytes]:
    """(path, bytes) of one object: namespaced or cluster-scoped by its metadata, under `version_dir` if given."""
    meta = obj["metadata"]
    where = f"namespaces/{meta['namespace']}" if meta.get("namespace") else "cluster"
    middle = f"{version_dir}/" if version_dir else ""
    return f"resources/{qualified}/{middle}{where}/{meta['name']}.json", orjson.dumps(obj)


def tarball(
    path: Path,
    objects: Iterable[tuple[str, dict[str, Any]]],
    version: str = "1.1.0",
    other_versions: dict[str, str] | None = None,
    extra: Iterable[tuple[str, bytes]] = (),
) -> Path:
    """A Velero backup tarball of (qualified resource, object) pairs: the classic tree, and for format 1.1.0 the
    `<version>-preferredversion` copy; `other_versions` {qualified: version} adds each object again under another
    API version's directory (its apiVersion changed, as Velero keeps it)."""
    members: list[tuple[str, bytes]] = [("metadata/version", version.encode() + b"\n")]
    for qualified, obj in objects:
        members.append(member(obj, qualified))
        if version.startswith("1.1"):
            preferred = str(obj["apiVersion"]).rpartition("/")[2]
            members.append(member(obj, qualified, f"{preferred}-preferredversion"))
        other = (other_versions or {}).get(qualified)
        if other:
            group = str(obj["apiVersion"]).rpartition("/")[0]
            members.append(member({**obj, "apiVersion": f"{group}/{other}"}, qualified, other))
    members += list(extra)
    path.write_bytes(gz(b"".join(entry(name, data) for name, data in members) + END))
    return path
