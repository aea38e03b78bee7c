"""Fixtures of the unit tests."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import boto3
import pytest

from statusvault.processes import WorkerSettings
from statusvault.storage import LocalStore, ObjectStore
from statusvault.storage.base import S3Options
from statusvault.storage.s3 import S3Store
from tests.memstore import ConditionalMemoryStore, MemoryStore


@pytest.fixture
def s3_store(monkeypatch) -> Iterator[S3Store]:
    """An S3Store over moto's in-process S3 (no server, no network)."""
    from moto import mock_aws

    for var, value in {"AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing"}.items():
        monkeypatch.setenv(var, value)
    with mock_aws():
        client = boto3.client("s3", region_name="us-east-1")
        client.create_bucket(Bucket="vault")
        yield S3Store("vault", "team", S3Options(region="us-east-1"), client=client)


@pytest.fixture(params=["local", "s3", "memory", "memory+cas"])
def store(request, tmp_path) -> ObjectStore:
    """Each kind of store: a directory, S3 (moto), the bare protocol in memory, and one that writes conditionally."""
    return _store(request, tmp_path)


@pytest.fixture(params=["local", "s3", "memory+cas"])
def conditional_store(request, tmp_path) -> ObjectStore:
    """Each kind of store that writes conditionally (put_if): all but the bare protocol in memory. moto's
    in-process S3 checks If-None-Match and then stores, unlocked, so two threads can both pass the check; S3
    decides each conditional write atomically, so here every call is made one at a time, as S3 would order them."""
    store = _store(request, tmp_path)
    if isinstance(store, S3Store):
        store.client = _OneAtATime(store.client)
    return store


class _OneAtATime:
    """A boto3 client whose calls are served one at a time (see conditional_store)."""

    def __init__(self, client: Any):
        self._client, self._lock = client, threading.Lock()

    def __getattr__(self, name: str) -> Any:
        attr = getattr(self._client, name)
        if not callable(attr):
            return attr

        def serialised(*args: Any, **kwargs: Any) -> Any:
            with self._lock:
                return attr(*args, **kwargs)

        return serialised


def _store(request, tmp_path) -> ObjectStore:
    if request.param == "local":
        return LocalStore(tmp_path / "root")
    if request.param == "s3":
        s3: S3Store = request.getfixturevalue("s3_store")
        return s3
    return MemoryStore() if request.param == "memory" else ConditionalMemoryStore()


@pytest.fixture
def worker_spec(tmp_path: Path) -> WorkerSettings:
    """Two worker processes with a kubeconfig of their own, never connected to (the tests' jobs send nothing)."""
    config = tmp_path / "kubeconfig"
    config.write_text(
        "apiVersion: v1\nkind: Config\ncurrent-context: c\n"
        "clusters: [{name: c, cluster: {server: 'https://127.0.0.1:1'}}]\n"
        "contexts: [{name: c, context: {cluster: c, user: u}}]\nusers: [{name: u, user: {token: t}}]\n"
    )
    return WorkerSettings(kubeconfig=str(config), processes=2)
