"""statusvault: back up Kubernetes custom resources with their status, restore them in two passes."""

from __future__ import annotations

import functools

VERSION = "0.2.0"  # the release (CHANGELOG.md): pyproject.toml and the default container image read it


def __getattr__(name: str) -> str:
    """`statusvault.__version__`, read from the installed package's metadata when first asked: importlib.metadata
    costs every command about 20 ms of start-up (zipfile, email, ...) that only `--version`, a backup's manifest
    and a watch's head need."""
    if name == "__version__":
        return installed_version()
    raise AttributeError(f"module 'statusvault' has no attribute {name!r}")


@functools.cache
def installed_version() -> str:
    from importlib.metadata import PackageNotFoundError
    from importlib.metadata import version as installed

    try:
        return installed("statusvault")
    except PackageNotFoundError:  # running from a source tree without installation
        return "0.0.0+unknown"
