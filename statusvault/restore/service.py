"""Restore a named backup from a store: fetch, verify, plan, execute."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager

from statusvault.archive import ArchiveReader, file_sha256
from statusvault.catalog import local_archive, read_manifest
from statusvault.errors import ArchiveError
from statusvault.kube.client import KubeClient
from statusvault.kube.discovery import Discovery
from statusvault.model import ResourceType
from statusvault.progress import Progress
from statusvault.restore.execute import RestoreEngine
from statusvault.restore.plan import RestoreOptions, build_plan
from statusvault.restore.planstore import RestorePlan
from statusvault.restore.results import RestoreReport
from statusvault.storage.base import ObjectStore


class ExistenceIndex:
    """Which objects already exist, from one metadata-only LIST per (resource, namespace)."""

    def __init__(self, client: KubeClient):
        self.client = client
        self._names: dict[tuple[str, str], set[str]] = {}
        self._lock = threading.Lock()

    def __call__(self, rt: ResourceType, namespace: str, name: str) -> bool:
        key = (rt.path(namespace or None), namespace)
        with self._lock:
            names = self._names.get(key)
            if names is None:
                names = self.client.list_names(rt, namespace or None) if rt.version else set()
                self._names[key] = names
        return name in names


@contextmanager
def open_backup(store: ObjectStore, name: str) -> Iterator[ArchiveReader]:
    """A reader over the backup's archive after checking it is complete and its checksum matches."""
    manifest = read_manifest(store, name)
    with local_archive(store, name) as path:
        expected = (manifest.get("archive") or {}).get("sha256")
        if expected and file_sha256(path) != expected:
            raise ArchiveError(f"backup {name!r} was modified: the archive checksum differs from its manifest")
        yield ArchiveReader(path)


def plan_restore(
    client: KubeClient, discovery: Discovery, reader: ArchiveReader, name: str, opts: RestoreOptions
) -> RestorePlan:
    """Verify every object file and build the plan; nothing is written."""
    return build_plan(reader, opts, discovery, ExistenceIndex(client), backup=name)


def restore(
    client: KubeClient,
    discovery: Discovery,
    discover: Callable[[], Discovery],
    reader: ArchiveReader,
    plan: RestorePlan,
    opts: RestoreOptions,
    progress: Progress | None = None,
    parallel: int = 8,
) -> RestoreReport:
    engine = RestoreEngine(client, discovery, discover, progress, parallel)
    return engine.run(reader, plan, opts)
