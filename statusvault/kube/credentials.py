"""Credential sources: where the bearer token or client certificate comes from, and how to get a new one.

Bound ServiceAccount tokens rotate and exec-plugin credentials expire, so a long run loads its credential again
when it expires and when the API server answers 401 (`refresh`). Every load has a serial number: 401s that
arrive together from many threads name the same rejected load, and only the first one loads again. A load that
a refresh produced and the server rejected too is not replaced for `cooldown` seconds, so a run whose
credentials are gone fails each request at once instead of running a plugin per request.
"""

from __future__ import annotations

import atexit
import base64
import dataclasses
import json
import math
import os
import subprocess
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, Protocol

from statusvault import rfc3339
from statusvault.errors import ConfigError

_temp_files: set[str] = set()
_memory_files: dict[str, int] = {}  # /proc/self/fd/N -> N: files that live in memory only


def data_file(data: str | bytes, suffix: str) -> str:
    """Base64 text (str) or raw PEM (bytes) as a file the TLS layer can load: in memory where Linux can (a memfd
    read through /proc/self/fd, gone with the process however it ends, a SIGKILL included), else a private temp file
    removed at exit."""
    raw = base64.b64decode(data) if isinstance(data, str) else data
    memory = _memory_file(raw, suffix)
    if memory is not None:
        return memory
    fd, path = tempfile.mkstemp(prefix="statusvault-", suffix=suffix)
    with os.fdopen(fd, "wb") as f:
        f.write(raw)
    if not _temp_files:
        atexit.register(_remove_temp_files)
    _temp_files.add(path)
    return path


def _memory_file(raw: bytes, suffix: str) -> str | None:
    create = getattr(os, "memfd_create", None)
    if create is None or not os.path.isdir("/proc/self/fd"):
        return None
    fd = create(f"statusvault{suffix}")
    os.write(fd, raw)
    path = f"/proc/self/fd/{fd}"
    with open(path, "rb") as check:  # /proc reachable and the bytes there: else a temp file
        if check.read() != raw:
            os.close(fd)
            return None
    _memory_files[path] = fd
    return path


def discard_files(paths: list[str]) -> None:
    for path in paths:
        fd = _memory_files.pop(path, None)
        if fd is not None:
            os.close(fd)
            continue
        Path(path).unlink(missing_ok=True)
        _temp_files.discard(path)


def _remove_temp_files() -> None:
    discard_files(list(_temp_files))


@dataclasses.dataclass(frozen=True, slots=True)
class Credential:
    """One load of a credential: a bearer token and/or a client certificate; `serial` tells loads apart."""

    token: str | None = None
    cert_file: str | None = None
    key_file: str | None = None
    serial: int = 0


class CredentialSource(Protocol):
    description: str  # names the source in errors: "token file /path", "exec plugin 'aws'"
    refresh_action: str  # what refresh() does, for errors: "re-reading it"

    def current(self) -> Credential:
        """The credential to send now (loaded again first if it has expired)."""
        ...

    def refresh(self, rejected: Credential) -> Credential | None:
        """The credential to resend with: a newer one than `rejected` (loaded now unless another thread just did),
        `rejected` itself if a refresh has just produced it, None if this source cannot refresh."""
        ...


class Static:
    """A credential that never changes (a kubeconfig token, a client certificate, nothing): nothing to refresh."""

    refresh_action = ""

    def __init__(self, description: str, token: str | None = None):
        self.description = description
        self._credential = Credential(token)

    def current(self) -> Credential:
        return self._credential

    def refresh(self, rejected: Credential) -> Credential | None:
        return None


class _Reloading:
    """A source loaded again when `_stale()` says so, or when refresh() learns that its latest load was rejected."""

    description: str
    refresh_action: str
    cooldown = 0.0

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._credential: Credential | None = None
        self._serial = 0
        self._forced: tuple[int, float] = (0, -math.inf)  # serial and time of the last forced load

    def current(self) -> Credential:
        with self._lock:
            if self._credential is None or self._stale():
                return self._reload(forced=False)
            return self._credential

    def refresh(self, rejected: Credential) -> Credential | None:
        with self._lock:
            latest = self._credential
            if latest is None or (latest.serial == rejected.serial and not self._cooling(latest)):
                return self._reload(forced=True)
            return latest

    def _cooling(self, latest: Credential) -> bool:
        serial, at = self._forced
        return latest.serial == serial and time.monotonic() - at < self.cooldown

    def _reload(self, forced: bool) -> Credential:
        """Load; a forced load or a changed credential gets a new serial, an unchanged timed one keeps it."""
        loaded = self._load(forced)
        previous = self._credential
        if forced or previous is None or dataclasses.replace(previous, serial=0) != loaded:
            self._serial += 1
        if forced:
            self._forced = (self._serial, time.monotonic())
        self._credential = dataclasses.replace(loaded, serial=self._serial)
        return self._credential

    def _stale(self) -> bool:
        raise NotImplementedError

    def _load(self, forced: bool) -> Credential:
        raise NotImplementedError


class TokenFile(_Reloading):
    """A token file, re-read once a minute (the kubelet rewrites projected ServiceAccount tokens) and on a 401."""

    refresh_action = "re-reading it"

    def __init__(self, path: Path, every: float = 60.0):
        super().__init__()
        self.path = path
        self.every = every
        self.description = f"token file {path}"
        self._read_at = 0.0

    def _stale(self) -> bool:
        return time.monotonic() - self._read_at > self.every

    def _load(self, forced: bool) -> Credential:
        try:
            token = self.path.read_text().strip()
        except OSError as e:
            raise ConfigError(f"cannot read token file {self.path}: {e.strerror}") from e
        self._read_at = time.monotonic()
        return Credential(token or None)


class ExecPlugin(_Reloading):
    """A client.authentication.k8s.io exec credential plugin, run again before its credential expires and on a 401.

    A plugin may return a client certificate instead of a token; the last two certificate pairs are kept on
    disk (connections still opening may read the previous one), older ones are removed.
    """

    refresh_action = "re-running it"
    cooldown = 10.0  # plugins can be slow, and may call a cloud API

    def __init__(self, spec: dict[str, Any]):
        super().__init__()
        if not spec.get("command"):
            raise ConfigError("kubeconfig exec plugin has no command")
        self.spec = spec
        self.argv = [str(spec["command"]), *(str(a) for a in spec.get("args") or [])]
        self.description = f"exec plugin {self.argv[0]!r}"
        self._expires = 0.0
        self._files: list[str] = []

    def _stale(self) -> bool:
        return time.time() >= self._expires

    def _load(self, forced: bool) -> Credential:
        status = self._run()
        self._expires = refresh_time(status.get("expirationTimestamp"), time.time())
        cert, key = self._cert_files(status)
        token = status.get("token")
        return Credential(str(token) if token else None, cert, key)

    def _run(self) -> dict[str, Any]:
        env = {**os.environ, **{str(e["name"]): str(e["value"]) for e in self.spec.get("env") or []}}
        api = self.spec.get("apiVersion", "client.authentication.k8s.io/v1beta1")
        info = {"apiVersion": api, "kind": "ExecCredential", "spec": {"interactive": False}}
        env["KUBERNETES_EXEC_INFO"] = json.dumps(info)
        try:
            out = subprocess.run(self.argv, env=env, capture_output=True, check=True, timeout=60).stdout
        except subprocess.CalledProcessError as e:
            last = (e.stderr or b"").decode("utf-8", "replace").strip().splitlines()[-1:]
            raise ConfigError(f"kubeconfig {self.description} failed (exit {e.returncode}): {''.join(last)}") from e
        except (OSError, subprocess.SubprocessError) as e:
            raise ConfigError(f"kubeconfig {self.description} failed: {e}") from e
        try:
            status = (json.loads(out) or {}).get("status") or {}
        except (ValueError, AttributeError) as e:
            raise ConfigError(f"kubeconfig {self.description} printed no ExecCredential JSON: {e}") from e
        if not isinstance(status, dict):
            raise ConfigError(f"kubeconfig {self.description} printed an ExecCredential whose status is no mapping")
        return status

    def _cert_files(self, status: dict[str, Any]) -> tuple[str | None, str | None]:
        cert, key = status.get("clientCertificateData"), status.get("clientKeyData")
        if not (cert and key):
            return None, None
        pair = [data_file(str(cert).encode(), ".crt"), data_file(str(key).encode(), ".key")]
        self._files += pair
        discard_files(self._files[:-4])
        del self._files[:-4]
        return pair[0], pair[1]


def refresh_time(expiry: str | None, now: float) -> float:
    """When to run an exec plugin again: 30 s before its credential expires, halfway there if it lives less."""
    if not expiry:
        return math.inf
    try:
        at = rfc3339.parse(str(expiry)).timestamp()
    except ValueError as e:
        raise ConfigError(f"exec plugin returned an unreadable expirationTimestamp {expiry!r}") from e
    return at - min(30.0, max(0.0, (at - now) / 2))


TokenReader = Callable[[], str | None]


class AuthProvider(_Reloading):
    """A legacy auth-provider user through the kubernetes client: its hook renews an expired token on every
    read; a 401 loads the kubeconfig again (`reload`), once."""

    refresh_action = "re-loading the kubeconfig"
    cooldown = 10.0

    def __init__(self, description: str, token: TokenReader, reload: Callable[[], TokenReader]):
        super().__init__()
        self.description = description
        self._token = token
        self._reload_config = reload

    def _stale(self) -> bool:
        return True

    def _load(self, forced: bool) -> Credential:
        if forced and self._credential is not None:
            self._token = self._reload_config()
        return Credential(self._token())
