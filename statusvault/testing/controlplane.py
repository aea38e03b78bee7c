"""What the two local test servers share (the 1.20 kube-apiserver cluster, the 1.36 CRD server): a work
directory, etcd and the server started as child processes known by PID, a start tried again when a port was
taken between choosing and binding it, a readiness wait that reports a process that died, and a stop."""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import socket
import ssl
import subprocess
import tempfile
import time
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import ClassVar, Self


def free_ports(n: int) -> list[int]:
    """n distinct free loopback ports (all held open while choosing, so none repeats)."""
    socks = [socket.socket() for _ in range(n)]
    try:
        for s in socks:
            s.bind(("127.0.0.1", 0))
        return [int(s.getsockname()[1]) for s in socks]
    finally:
        for s in socks:
            s.close()


def alive(pid: int) -> bool:
    try:
        waited, _ = os.waitpid(pid, os.WNOHANG)
    except ChildProcessError:
        waited = 0
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return False
    return waited == 0


def terminate(pid: int, grace: float = 10.0) -> None:
    try:
        os.kill(pid, signal.SIGTERM)
    except ProcessLookupError:
        return
    deadline = time.monotonic() + grace
    while time.monotonic() < deadline and alive(pid):
        time.sleep(0.1)
    if alive(pid):
        os.kill(pid, signal.SIGKILL)
    with contextlib.suppress(ChildProcessError):
        os.waitpid(pid, 0)


@dataclass
class ControlPlane:
    """A running etcd + API server (+ helpers) on loopback; `stop()` ends its processes by PID."""

    workdir: Path
    port: int = 0
    pids: dict[str, int] = field(default_factory=dict)
    _owned_workdir: bool = False

    PROCESSES: ClassVar[tuple[str, ...]] = ()  # every process it may start, in the order they are stopped
    SERVER: ClassVar[str] = ""  # the API server's process, named in errors
    PREFIX: ClassVar[str] = "statusvault-server-"  # of a temporary work directory

    @property
    def server(self) -> str:
        return f"https://127.0.0.1:{self.port}"

    @property
    def kubeconfig(self) -> Path:
        return self.workdir / "kubeconfig"

    @classmethod
    def launch(cls, workdir: Path | None, start: Callable[[Self], None]) -> Self:
        """A started server in workdir (a temporary one, removed on stop, when None)."""
        owned = workdir is None
        wd = Path(workdir or tempfile.mkdtemp(prefix=cls.PREFIX))
        wd.mkdir(parents=True, exist_ok=True)
        for attempt in range(3):  # a port taken between choosing and binding: try again with new ones
            plane = cls(wd, _owned_workdir=owned)
            try:
                start(plane)
                return plane
            except BaseException as e:
                plane.stop(keep_workdir=True)
                if attempt == 2 or "address already in use" not in str(e):
                    if owned:
                        shutil.rmtree(wd, ignore_errors=True)
                    raise
                for child in ("etcd", "certs"):
                    shutil.rmtree(wd / child, ignore_errors=True)
        raise AssertionError("unreachable")

    def spawn(self, name: str, argv: list[str], detach: bool) -> None:
        log = open(self.workdir / f"{name}.log", "wb")  # noqa: SIM115 - the child owns it
        proc = subprocess.Popen(
            argv, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=detach
        )
        log.close()
        self.pids[name] = proc.pid

    def spawn_etcd(self, binary: str, client: int, peer: int, detach: bool) -> None:
        self.spawn(
            "etcd",
            [
                binary,
                "--data-dir",
                str(self.workdir / "etcd"),
                "--listen-client-urls",
                f"http://127.0.0.1:{client}",
                "--advertise-client-urls",
                f"http://127.0.0.1:{client}",
                "--listen-peer-urls",
                f"http://127.0.0.1:{peer}",
                "--initial-advertise-peer-urls",
                f"http://127.0.0.1:{peer}",
                "--initial-cluster",
                f"default=http://127.0.0.1:{peer}",
                "--quota-backend-bytes=8589934592",  # room for the 100k-object benchmark
            ],
            detach,
        )

    def wait_ready(self, request: urllib.request.Request, context: ssl.SSLContext, timeout: float = 90.0) -> None:
        """Until the readiness request answers 200; a process that exits meanwhile fails it with its log's end."""
        deadline = time.monotonic() + timeout
        last = ""
        while time.monotonic() < deadline:
            for name, pid in self.pids.items():
                if not alive(pid):
                    tail = (self.workdir / f"{name}.log").read_text(errors="replace")[-2000:]
                    raise RuntimeError(f"{name} exited during start-up:\n{tail}")
            try:
                with urllib.request.urlopen(request, context=context, timeout=5) as resp:
                    if resp.status == 200:
                        return
            except OSError as e:
                last = str(e)
            time.sleep(0.3)
        raise RuntimeError(f"{self.SERVER} not ready after {timeout:.0f}s: {last}")

    def stop(self, keep_workdir: bool = False) -> None:
        for name in self.PROCESSES:
            pid = self.pids.pop(name, None)
            if pid is not None:
                terminate(pid)
        if self._owned_workdir and not keep_workdir:
            shutil.rmtree(self.workdir, ignore_errors=True)

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


def insecure_context() -> ssl.SSLContext:
    """TLS to a loopback test server with a self-signed certificate."""
    ctx = ssl.create_default_context()
    ctx.check_hostname = False
    ctx.verify_mode = ssl.CERT_NONE
    return ctx
