"""A fault-injecting HTTP(S) reverse proxy for tests, in front of the real kube-apiserver or moto's S3 server.

At a set rate (seeded), a request meets one of these faults instead of a clean answer:
- ``429``: answered 429 Too Many Requests with Retry-After, not forwarded;
- ``500`` / ``503``: answered with that error, not forwarded (as a Kubernetes Status, or in the ``s3`` dialect
  as S3's XML error: InternalError, SlowDown with Retry-After);
- ``reset``: the connection is reset before the request is forwarded;
- ``lost``: the request is forwarded and acted on, then the connection is reset instead of answering.

`s3_operation` names an S3 request (path-style addressing) so that faults can be applied to chosen operations.
"""

from __future__ import annotations

import collections
import random
import socket
import ssl
import struct
import subprocess
import threading
import urllib.parse
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import urllib3

FAULTS = ("429", "500", "503", "reset", "lost")
S3_FAULTS = ("500", "503", "reset", "lost")
_HOP = {"connection", "keep-alive", "transfer-encoding", "content-length", "host", "expect"}
_S3_ERRORS = {500: b"InternalError", 503: b"SlowDown"}


def s3_operation(method: str, path: str) -> str:
    """The S3 API operation of a path-style request (``/bucket/key?query``), e.g. "UploadPart"."""
    parts = urllib.parse.urlsplit(path)
    query = urllib.parse.parse_qs(parts.query, keep_blank_values=True)
    has_key = "/" in parts.path.strip("/")
    upload = "uploadId" in query
    if not has_key:
        return {"GET": "ListMultipartUploads" if "uploads" in query else "ListObjects"}.get(method, f"{method}Bucket")
    if method == "PUT":
        return "UploadPart" if upload and "partNumber" in query else "PutObject"
    if method == "POST":
        return "CompleteMultipartUpload" if upload else "CreateMultipartUpload" if "uploads" in query else "POST"
    if method == "DELETE":
        return "AbortMultipartUpload" if upload else "DeleteObject"
    return {"GET": "GetObject", "HEAD": "HeadObject"}.get(method, method)


def s3_faults_on(*operations: str) -> Callable[[str, str], bool]:
    """An `applies` for FaultProxy: only requests of these S3 operations meet faults."""
    return lambda method, path: s3_operation(method, path) in operations


class FaultProxy:
    """Forwards every request to `upstream`; `rate` of the requests that `applies` to meet a fault."""

    def __init__(
        self,
        upstream: str,
        rate: float,
        seed: int = 1,
        faults: tuple[str, ...] = FAULTS,
        applies: Callable[[str, str], bool] = lambda method, path: True,
        certs: tuple[Path, Path] | None = None,
        retry_after: str = "1",
        before: Callable[[str, str, bytes | None], None] = lambda method, path, body: None,
        dialect: str = "kube",
        classify: Callable[[str, str], str] | None = None,
        client_cert: tuple[Path, Path] | None = None,
    ):
        assert set(faults) <= set(FAULTS), faults
        assert dialect in ("kube", "s3"), dialect
        self.upstream = upstream.rstrip("/")
        self.rate = rate
        self.faults = faults
        self.applies = applies
        self.retry_after = retry_after
        self.before = before  # runs before a request is forwarded: another writer racing the client
        self.dialect = dialect
        self.classify = classify  # names a request (e.g. s3_operation) for `by_operation`
        self.counts: collections.Counter[str] = collections.Counter()
        self.by_operation: collections.Counter[tuple[str, str]] = collections.Counter()  # (name, fault or "")
        self._rng = random.Random(seed)
        self._lock = threading.Lock()
        # An upstream that knows clients by certificate only (the 1.36 CRD server) gets this one from the proxy.
        cert = {"cert_file": str(client_cert[0]), "key_file": str(client_cert[1])} if client_cert else {}
        self._pool = urllib3.PoolManager(maxsize=64, cert_reqs="CERT_NONE", retries=False, **cert)
        urllib3.disable_warnings(urllib3.exceptions.InsecureRequestWarning)
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), _handler(self))
        self._server.daemon_threads = True
        self._server.handle_error = lambda request, address: None  # type: ignore[method-assign] # resets are the point
        self.scheme = "http"
        if certs is not None:
            ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
            ctx.load_cert_chain(str(certs[0]), str(certs[1]))
            self._server.socket = ctx.wrap_socket(self._server.socket, server_side=True)
            self.scheme = "https"
        self._thread = threading.Thread(target=self._server.serve_forever, args=(0.05,), daemon=True)

    @property
    def url(self) -> str:
        return f"{self.scheme}://127.0.0.1:{self._server.server_address[1]}"

    def start(self) -> FaultProxy:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._pool.clear()

    def choose(self, method: str, path: str) -> str:
        """The fault this request meets, or "" to pass it through."""
        with self._lock:
            self.counts["requests"] += 1
            fault = ""
            if self.applies(method, path) and self._rng.random() < self.rate:
                fault = self._rng.choice(self.faults)
                self.counts[fault] += 1
            if self.classify is not None:
                self.by_operation[self.classify(method, path), fault] += 1
            return fault

    @property
    def injected(self) -> int:
        return sum(n for k, n in self.counts.items() if k != "requests")


@contextmanager
def running(proxy: FaultProxy) -> Iterator[FaultProxy]:
    proxy.start()
    try:
        yield proxy
    finally:
        proxy.stop()


def self_signed(directory: Path) -> tuple[Path, Path]:
    """A throwaway certificate for the proxy's TLS side (clients skip verification, as with the test cluster)."""
    cert, key = directory / "proxy.crt", directory / "proxy.key"
    if not cert.exists():
        subprocess.run(
            [
                "openssl",
                "req",
                "-x509",
                "-newkey",
                "rsa:2048",
                "-nodes",
                "-days",
                "2",
                "-subj",
                "/CN=127.0.0.1",
                "-keyout",
                str(key),
                "-out",
                str(cert),
            ],
            check=True,
            capture_output=True,
        )
    return cert, key


def _handler(proxy: FaultProxy) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, format: str, *args: object) -> None:
            pass

        def _any(self) -> None:
            length = int(self.headers.get("Content-Length") or 0)
            body = self.rfile.read(length) if length else None
            fault = proxy.choose(self.command, self.path)
            if fault == "reset":
                return self._reset()
            if fault in ("429", "500", "503"):
                return self._error(int(fault))
            proxy.before(self.command, self.path, body)
            headers = {k: v for k, v in self.headers.items() if k.lower() not in _HOP}
            headers["Host"] = self.headers.get("Host", "")
            resp = proxy._pool.request(
                self.command,
                proxy.upstream + self.path,
                body=body,
                headers=headers,
                preload_content=True,
                decode_content=False,
                redirect=False,
            )
            if fault == "lost":  # the upstream acted on it; the client never learns
                return self._reset()
            self.send_response(resp.status)
            for k, v in resp.headers.items():
                if k.lower() not in _HOP:
                    self.send_header(k, v)
            head = self.command == "HEAD"  # its Content-Length is the object's, and it has no body
            self.send_header("Content-Length", resp.headers.get("Content-Length", "0") if head else str(len(resp.data)))
            self.end_headers()
            if not head:
                self.wfile.write(resp.data)

        def _error(self, code: int) -> None:
            s3 = proxy.dialect == "s3"
            if s3:
                body = b'<?xml version="1.0" encoding="UTF-8"?>\n<Error><Code>%s</Code><Message>injected</Message>'
                body = body % _S3_ERRORS.get(code, b"InternalError") + b"<RequestId>fault</RequestId></Error>"
            else:
                body = b'{"kind":"Status","apiVersion":"v1","status":"Failure","message":"injected","code":%d}' % code
            self.send_response(code)
            if code == 429 or (s3 and code == 503):
                self.send_header("Retry-After", proxy.retry_after)
            if s3:
                self.send_header("Content-Type", "application/xml")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def _reset(self) -> None:
            """Close with RST (SO_LINGER 0): the client sees a reset, not a clean end of the response."""
            self.close_connection = True
            try:
                self.connection.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
                self.connection.close()
            except OSError:
                pass

        do_GET = do_POST = do_PUT = do_PATCH = do_DELETE = do_HEAD = _any

    return Handler
