"""Build (once, cached) and run versitygw, an S3-compatible gateway, on loopback: its posix backend with versioning,
Object Lock and legal holds. The S3 tests that Object Lock concerns run on it as well as on moto (tests/conftest.py,
`s3_server`): moto implements S3 as its authors read the API, and some of what it leaves out matters here (it drops a
multipart upload's lock, and lets anyone shorten a compliance retention).

python -m statusvault.testing.s3server build   # build or find the binary, print its path
python -m statusvault.testing.s3server run     # start, print the endpoint, stay in the foreground
"""

from __future__ import annotations

import argparse
import contextlib
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from types import TracebackType

from statusvault.testing.cluster import cache_dir
from statusvault.testing.controlplane import free_ports, terminate
from statusvault.testing.gobuild import go_install

MODULE = "github.com/versity/versitygw/cmd/versitygw"
VERSION = "v1.8.0"  # an exact release the Go module proxy serves


def ensure_versitygw() -> Path:
    """The versitygw binary, built with `go install` from the module proxy the first time."""
    return go_install(
        f"{MODULE}@{VERSION}", cache_dir() / "bin" / f"versitygw-{VERSION}", {"GOFLAGS": "-buildvcs=false"}
    )


class VersityServer:
    """A running versitygw (posix backend, versioning on) in a temporary directory, one account."""

    def __init__(self, access: str, secret: str):
        self.access, self.secret = access, secret
        self._tmp = tempfile.TemporaryDirectory(prefix="statusvault-versitygw-")
        self.port = 0
        self.process: subprocess.Popen[bytes] | None = None

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @classmethod
    def start(cls, access: str = "testing", secret: str = "testing") -> VersityServer:
        server = cls(access, secret)
        try:
            server._start(ensure_versitygw())
        except BaseException:
            server.stop()
            raise
        return server

    def _start(self, binary: Path) -> None:
        root, versions = Path(self._tmp.name) / "root", Path(self._tmp.name) / "versions"
        root.mkdir()
        versions.mkdir()
        (self.port,) = free_ports(1)
        args = [str(binary), "--access", self.access, "--secret", self.secret, "--port", f"127.0.0.1:{self.port}",
                "--quiet", "posix", "--versioning-dir", str(versions), str(root)]  # fmt: skip
        log = open(Path(self._tmp.name) / "versitygw.log", "wb")  # noqa: SIM115 - the process holds it
        self.process = subprocess.Popen(args, stdout=log, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + 30
        while not _listening(self.port):
            if self.process.poll() is not None or time.monotonic() > deadline:
                log.close()
                raise RuntimeError(f"versitygw did not start: {(Path(self._tmp.name) / 'versitygw.log').read_text()}")
            time.sleep(0.05)

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            terminate(self.process.pid)
        self._tmp.cleanup()

    def __enter__(self) -> VersityServer:
        return self

    def __exit__(self, *exc: type[BaseException] | BaseException | TracebackType | None) -> None:
        self.stop()


def _listening(port: int) -> bool:
    with socket.socket() as s:
        s.settimeout(0.2)
        return s.connect_ex(("127.0.0.1", port)) == 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m statusvault.testing.s3server")
    parser.add_argument("command", choices=["build", "run"])
    args = parser.parse_args(argv)
    if args.command == "build":
        print(ensure_versitygw())
        return 0
    with VersityServer.start() as server:
        print(server.endpoint, flush=True)
        with contextlib.suppress(KeyboardInterrupt):
            signal.pause()
    return 0


if __name__ == "__main__":
    sys.exit(main())
