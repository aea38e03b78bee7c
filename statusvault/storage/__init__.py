"""Backup storage: a local directory (default) or an S3-compatible bucket behind one protocol."""

from __future__ import annotations

import os
from pathlib import Path
from urllib.parse import urlparse

from statusvault.errors import ConfigError
from statusvault.storage.base import ObjectStore, S3Options, archive_key, manifest_key
from statusvault.storage.local import LocalStore

__all__ = [
    "LocalStore",
    "ObjectStore",
    "S3Options",
    "archive_key",
    "default_storage_url",
    "manifest_key",
    "open_store",
]


def default_storage_url() -> str:
    base = os.environ.get("XDG_DATA_HOME") or os.path.expanduser("~/.local/share")
    return str(Path(base) / "statusvault")


def open_store(url: str | None, s3: S3Options | None = None) -> ObjectStore:
    """Open `url`: a directory path, `file://PATH`, or `s3://bucket/prefix`."""
    url = url or default_storage_url()
    parsed = urlparse(url)
    if parsed.scheme == "s3":
        if not parsed.netloc:
            raise ConfigError(f"invalid S3 storage URL {url!r}: expected s3://bucket/prefix")
        from statusvault.storage.s3 import S3Store  # only S3 users pay for boto3's import

        return S3Store(parsed.netloc, parsed.path, s3 or S3Options())
    if parsed.scheme == "file":
        return LocalStore(Path(parsed.path))
    if parsed.scheme and len(parsed.scheme) > 1:
        raise ConfigError(f"unsupported storage URL {url!r}: use a directory, file://PATH or s3://bucket/prefix")
    return LocalStore(Path(url))
