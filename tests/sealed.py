"""Small backups for the envelope, key rotation and Object Lock tests: an in-memory cluster (tests/fake/), key files,
and what a backup holds read back through the restore's reader."""

from __future__ import annotations

import base64
import contextlib
import io
import os
from pathlib import Path
from typing import Any

import orjson

from statusvault.backup import BackupEngine, BackupRequest, BackupResult
from statusvault.cli.main import main
from statusvault.restore.runner import open_backup
from statusvault.storage.base import ObjectStore
from statusvault.storage.s3 import S3Store
from statusvault.vocabulary.kinds import CRDS, NAMESPACES
from tests.builders import cr, crd, resource_type
from tests.fake import FakeKube

KC = resource_type("xyz.example.com", "KubernetesCluster")
NS = "team-a"


def cluster(count: int = 3) -> FakeKube:
    """A Namespace, the KubernetesCluster CRD and `count` KubernetesClusters with status."""
    kube = FakeKube()
    kube.put(NAMESPACES, {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NS}})
    kube.put(CRDS, crd("xyz.example.com", "KubernetesCluster"))
    for i in range(count):
        obj = cr("xyz.example.com/v1", "KubernetesCluster", f"kc-{i}", spec={"n": i}, status={"phase": "Ready"})
        kube.put(KC, {**obj, "metadata": {**obj["metadata"], "namespace": NS}})
    return kube


def back_up(kube: FakeKube, store: ObjectStore, name: str, **request: Any) -> BackupResult:
    """A backup of the whole fake cluster; `request`: BackupRequest's other fields (key, lock ...)."""
    backup = BackupRequest(store=store, name=name, page_size=50, **request)
    return BackupEngine(kube, kube.discovery(NAMESPACES), backup).run()


def store_cli(store: S3Store, *args: str) -> tuple[int, str, str]:
    """A command of the CLI that needs no cluster (list, prune, hold, keys, verify ...), in-process, on `store`."""
    out, err = io.StringIO(), io.StringIO()
    endpoint = store.options.endpoint_url or ""
    storage = ["--storage", f"s3://{store.bucket}/{store.prefix}", "--s3-endpoint-url", endpoint,
               "--s3-addressing-style", "path"]  # fmt: skip
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main([*args, *storage])
    return int(code), out.getvalue(), err.getvalue()


def key_file(folder: Path, name: str) -> Path:
    path = folder / f"{name}.key"
    path.write_text(base64.b64encode(os.urandom(32)).decode())
    return path


def names_in(store: ObjectStore, backup: str, keys: Any = None) -> list[str]:
    """The KubernetesClusters' names in the backup, as a restore reads them."""
    with open_backup(store, backup, keys) as reader:
        objects = [orjson.loads(data) for _, data in reader.objects()]
    return [o["metadata"]["name"] for o in objects if o["kind"] == KC.kind]
