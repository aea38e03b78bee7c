"""A lean HTTP/1.1 client for the API server: keep-alive connections over TLS, a thread-safe pool of them.

The restore's client CPU per object is mostly HTTP machinery: urllib3 and http.client build header objects,
parse URLs and run the email parser over every response's headers. This client writes each request as one
buffer and reads the status line and headers with C-level readline calls, so a request costs a fraction of
that. It speaks only what the API server needs (Content-Length and chunked bodies, no compression, no
proxies: the transport uses urllib3 when a proxy is configured)."""

from __future__ import annotations

import dataclasses
import functools
import re
import socket
import ssl
import threading
from typing import IO
from urllib.parse import urlsplit

MAX_LINE = 65536  # a status or header line longer than this is not an API server's answer
MAX_HEADERS = 200
_FIELD = re.compile(rb"^([^:\r\n]+):[ \t]*([^\r\n]*?)[ \t]*\r?$", re.MULTILINE)  # one header line: name, value
_FRAMING = re.compile(rb"^(content-length|transfer-encoding|connection):[ \t]*([^\r\n]*?)[ \t]*\r?$", re.M | re.I)
_WARNING = re.compile(rb"^warning:[ \t]*([^\r\n]*?)[ \t]*\r?$", re.M | re.I)


class ProtocolError(OSError):
    """The server's answer was not HTTP/1.1 as expected (or the connection closed mid-answer)."""


@dataclasses.dataclass
class Response:
    status: int
    head: bytes  # the header lines as received
    data: bytes

    @functools.cached_property
    def headers(self) -> dict[str, str]:
        """Every header by lower-cased name, parsed when asked for: most answers need only their framing."""
        return {name.decode("latin-1").lower(): value.decode("latin-1") for name, value in _FIELD.findall(self.head)}

    def warning_headers(self) -> list[str]:
        """The values of its Warning headers: a name that may repeat, so not one entry of `headers`."""
        if b"arning" not in self.head:  # the usual answer, decided without a regex
            return []
        return [value.decode("utf-8", "replace") for value in _WARNING.findall(self.head)]


class Connection:
    """One keep-alive connection. Not thread-safe: the pool hands it to one thread at a time."""

    def __init__(self, host: str, port: int, context: ssl.SSLContext | None, sni: str | None, timeout: float):
        raw = socket.create_connection((host, port), timeout=10.0)
        raw.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.sock: socket.socket = context.wrap_socket(raw, server_hostname=sni or host) if context else raw
        self.sock.settimeout(timeout)
        self.reader: IO[bytes] = self.sock.makefile("rb")
        self.reusable = True

    def request(self, head: bytes, body: bytes | None) -> Response:
        self.sock.sendall(head + body if body else head)
        block = self._head_block()
        status_line, _, rest = block.partition(b"\n")
        parts = status_line.split(None, 2)
        if len(parts) < 2 or not parts[0].startswith(b"HTTP/1.") or not parts[1].isdigit():
            raise ProtocolError(f"not an HTTP answer: {status_line[:80]!r}")
        if rest.count(b"\n") > MAX_HEADERS:
            raise ProtocolError("too many header lines")
        framing = {name.lower(): value.lower() for name, value in _FRAMING.findall(rest)}
        status = int(parts[1])
        data = b"" if status in (204, 304) or 100 <= status < 200 else self._body(framing)
        if framing.get(b"connection") == b"close" or parts[0] == b"HTTP/1.0":
            self.reusable = False
        return Response(status, rest, data)

    def _head_block(self) -> bytes:
        """The status line and the header lines, through the blank line that ends them.

        Usually the whole answer came in with one read: found in the read buffer and taken in one call.
        Otherwise line by line (also the way for a server that ends lines with a bare LF)."""
        buffered = self.reader.peek(MAX_LINE)  # type: ignore[attr-defined]  # a BufferedReader
        end = buffered.find(b"\r\n\r\n")
        if end >= 0 and b"\n\n" not in buffered[:end]:
            return self.reader.read(end + 4)
        lines: list[bytes] = []
        for _ in range(MAX_HEADERS + 1):
            line = self.reader.readline(MAX_LINE)
            if not line:
                if lines:
                    raise ProtocolError("the connection closed in the middle of the headers")
                raise ProtocolError("the API server closed the connection before answering")
            lines.append(line)
            if len(lines) > 1 and line in (b"\r\n", b"\n"):
                return b"".join(lines)
        raise ProtocolError("too many header lines")

    def _body(self, framing: dict[bytes, bytes]) -> bytes:
        if framing.get(b"transfer-encoding") == b"chunked":
            return self._chunked()
        length = framing.get(b"content-length")
        if length is None:  # the body runs to the end of the connection
            self.reusable = False
            return self.reader.read()
        if not length.isdigit():
            raise ProtocolError(f"bad Content-Length {length[:40]!r}")
        return self._exactly(int(length))

    def _chunked(self) -> bytes:
        chunks: list[bytes] = []
        while True:
            size_line = self.reader.readline(MAX_LINE)
            try:
                size = int(size_line.split(b";", 1)[0], 16)
            except ValueError:
                raise ProtocolError(f"bad chunk size {size_line[:40]!r}") from None
            if size == 0:
                while self.reader.readline(MAX_LINE) not in (b"\r\n", b"\n", b""):  # trailers
                    pass
                return b"".join(chunks)
            chunks.append(self._exactly(size))
            self.reader.readline(MAX_LINE)  # the CRLF after the chunk

    def _exactly(self, n: int) -> bytes:
        data = self.reader.read(n)
        if len(data) != n:
            raise ProtocolError(f"the connection closed after {len(data)} of {n} body bytes")
        return data

    def close(self) -> None:
        self.reusable = False
        try:
            self.reader.close()
            self.sock.close()
        except OSError:
            pass


class HttpPool:
    """Idle connections to one server, reused most-recent first; a connection that failed is never reused."""

    def __init__(
        self,
        url: str,
        *,
        verify: bool = True,
        ca_file: str | None = None,
        cert: tuple[str | None, str | None] = (None, None),
        server_hostname: str | None = None,
        timeout: float = 60.0,
        maxsize: int = 16,
    ):
        parts = urlsplit(url)
        self.host = parts.hostname or "localhost"
        self.port = parts.port or (443 if parts.scheme == "https" else 80)
        self.host_header = parts.netloc.encode("idna") if parts.netloc else self.host.encode()
        self.base_path = parts.path.rstrip("/")
        self.cert = cert  # the client certificate its connections present
        self.context = _context(verify, ca_file, cert) if parts.scheme == "https" else None
        self.sni = server_hostname
        self.timeout = timeout
        self.maxsize = maxsize
        self._idle: list[Connection] = []
        self._lock = threading.Lock()

    def request(self, method: str, target: str, headers: dict[str, str], body: bytes | None) -> Response:
        head = self._head(method, target, headers, body)
        conn = self._take()
        try:
            resp = conn.request(head, body)
        except BaseException:
            conn.close()
            raise
        self._give_back(conn)
        return resp

    def _head(self, method: str, target: str, headers: dict[str, str], body: bytes | None) -> bytes:
        lines = [f"{method} {self.base_path}{target} HTTP/1.1", f"Host: {self.host_header.decode()}"]
        lines += [f"{k}: {v}" for k, v in headers.items()]
        if body is not None or method in ("POST", "PUT", "PATCH"):
            lines.append(f"Content-Length: {len(body or b'')}")
        return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1")

    def _take(self) -> Connection:
        with self._lock:
            if self._idle:
                return self._idle.pop()
        return Connection(self.host, self.port, self.context, self.sni, self.timeout)

    def _give_back(self, conn: Connection) -> None:
        if conn.reusable:
            with self._lock:
                if len(self._idle) < self.maxsize:
                    self._idle.append(conn)
                    return
        conn.close()

    def clear(self) -> None:
        with self._lock:
            idle, self._idle = self._idle, []
        for conn in idle:
            conn.close()


def _context(verify: bool, ca_file: str | None, cert: tuple[str | None, str | None]) -> ssl.SSLContext:
    context = ssl.create_default_context(cafile=ca_file) if verify else ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    if not verify:
        context.check_hostname = False
        context.verify_mode = ssl.CERT_NONE
    if cert[0]:
        context.load_cert_chain(cert[0], cert[1])
    return context
