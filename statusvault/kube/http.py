"""The one HTTP/1.1 client for the API server: keep-alive connections over TLS, a thread-safe pool of them,
WATCH streams read line by line, and HTTP proxies (CONNECT tunnels).

The restore's client CPU per object is mostly HTTP machinery: urllib3 and http.client build header objects,
parse URLs and run the email parser over every response's headers. This client writes each request as one
buffer and reads the status line and headers with C-level readline calls, so a request costs a fraction of
that. It speaks only what the API server needs: Content-Length and chunked bodies, no compression, and
proxies as kubectl does (an `http://` proxy, tunnelled with CONNECT, from the kubeconfig's `proxy-url` or
from `HTTPS_PROXY`/`NO_PROXY`).

Requests run on blocking sockets, their time limit kept by one thread (`Deadlines`), and an idle connection is
checked with a call that keeps the interpreter lock (`Connection.dropped`): a socket with a timeout polls before
every read, and every poll, like every blocking call, hands the interpreter lock to another thread and takes it
back. With 16 writer threads those hand-offs cost about a tenth of a restore's CPU (
docs/development/benchmarks.md)."""

from __future__ import annotations

import base64
import contextlib
import dataclasses
import functools
import io
import ipaddress
import math
import os
import re
import select
import socket
import ssl
import sys
import threading
import time
from collections.abc import Iterator, Mapping
from typing import IO
from urllib.parse import unquote, urlsplit

MAX_LINE = 65536  # a status or header line longer than this is not an API server's answer
MAX_HEADERS = 200
MAX_STREAM_LINE = 32 << 20  # one WATCH event: an object (etcd stores at most 1.5 MiB) plus framing
_FIELD = re.compile(rb"^([^:\r\n]+):[ \t]*([^\r\n]*?)[ \t]*\r?$", re.MULTILINE)  # one header line: name, value
_FRAMING = re.compile(rb"^(content-length|transfer-encoding|connection):[ \t]*([^\r\n]*?)[ \t]*\r?$", re.M | re.I)
_WARNING = re.compile(rb"^warning:[ \t]*([^\r\n]*?)[ \t]*\r?$", re.M | re.I)


_FRAMING_NAMES = (b"content-length", b"transfer-encoding", b"connection")


def _framing(head: bytes) -> dict[bytes, bytes]:
    """The framing headers of an answer's header lines, lower-cased (the last of a repeated one): found with
    C-level searches of the lower-cased block, a regex only for a line whose colon is not right after its name
    or that ends in a bare LF (the API server's are always `Name: value\\r\\n`)."""
    block = b"\n" + head.lower()
    out: dict[bytes, bytes] = {}
    for name in _FRAMING_NAMES:
        at = block.rfind(b"\n" + name + b":")
        if at < 0:
            if block.find(b"\n" + name) >= 0:  # a longer name, or blanks before the colon: the regex decides
                return _framing_by_regex(head)
            continue
        start = at + len(name) + 2
        end = block.find(b"\r\n", start)
        if end < 0 or b"\n" in block[start:end] or b"\r" in block[start:end]:
            return _framing_by_regex(head)
        out[name] = block[start:end].strip(b" \t")
    return out


def _framing_by_regex(head: bytes) -> dict[bytes, bytes]:
    """_framing by the header grammar's regex, line by line: any header block."""
    return {n.lower(): v.lower() for n, v in _FRAMING.findall(head)}


class ProtocolError(OSError):
    """The server's answer was not HTTP/1.1 as expected (or the connection closed mid-answer)."""


class ClosedBeforeAnswer(ProtocolError):
    """The connection ended before one byte of the answer came: on a reused connection, the server had closed it
    while it sat idle (its idle timeout) and never read the request."""


IDEMPOTENT = frozenset({"GET", "HEAD", "PUT", "DELETE", "OPTIONS"})
FRESH = 1.0  # seconds: a connection idle for less carries an idempotent request without Connection.dropped's check


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


@dataclasses.dataclass(frozen=True)
class Proxy:
    """An HTTP proxy that tunnels with CONNECT."""

    host: str
    port: int
    authorization: str = ""  # the Proxy-Authorization value, from user:password in its URL

    @classmethod
    def parse(cls, url: str) -> Proxy:
        parts = urlsplit(url if "://" in url else f"http://{url}")
        if parts.scheme != "http" or not parts.hostname:
            raise ValueError(
                f"proxy {redacted(url)!r}: only http:// proxies are supported (they tunnel TLS with CONNECT)"
            )
        auth = ""
        if parts.username:
            pair = f"{unquote(parts.username)}:{unquote(parts.password or '')}"
            auth = "Basic " + base64.b64encode(pair.encode()).decode()
        return cls(parts.hostname, parts.port or 80, auth)


def redacted(url: str) -> str:
    """The URL without the password of its user:password part: fit for an error line or a log."""
    scheme, sep, rest = url.rpartition("://")
    userinfo, at, host = rest.rpartition("@")
    if not at:
        return url
    user = userinfo.split(":", 1)[0]
    return f"{scheme}{sep}{user}:***@{host}" if ":" in userinfo else url


def proxy_for(url: str, explicit: str | None = None, env: Mapping[str, str] | None = None) -> Proxy | None:
    """The proxy for the API server at `url`, as kubectl picks it: the kubeconfig's proxy-url when given; else
    HTTPS_PROXY (HTTP_PROXY for an http:// server) unless NO_PROXY names the host, and never for localhost or a
    loopback address."""
    if explicit:
        return Proxy.parse(explicit)
    env = os.environ if env is None else env
    parts = urlsplit(url)
    name = "https_proxy" if parts.scheme == "https" else "http_proxy"
    chosen = env.get(name.upper()) or env.get(name)
    host = parts.hostname or ""
    if not chosen or _loopback(host) or _bypassed(host, parts.port, env.get("NO_PROXY") or env.get("no_proxy") or ""):
        return None
    return Proxy.parse(chosen)


def _loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def _bypassed(host: str, port: int | None, no_proxy: str) -> bool:
    """NO_PROXY as Go reads it: `*`, host names (a leading dot or not: the domain and its subdomains), IP
    addresses, CIDR ranges, each optionally with a port."""
    for entry in (e.strip().lower() for e in no_proxy.split(",")):
        if not entry:
            continue
        if entry == "*":
            return True
        name, _, entry_port = entry.rpartition(":") if entry.count(":") == 1 else (entry, "", "")
        if entry_port and port is not None and entry_port != str(port):
            continue
        try:
            if ipaddress.ip_address(host) in ipaddress.ip_network(name, strict=False):
                return True
            continue
        except ValueError:
            pass
        domain = name.lstrip(".")
        if host == domain or host.endswith("." + domain):
            return True
    return False


@dataclasses.dataclass
class Stream:
    """An answer read as it comes: its status, header lines, and body lines (a WATCH's events)."""

    status: int
    head: bytes
    lines: Iterator[bytes]
    conn: Connection

    @functools.cached_property
    def headers(self) -> dict[str, str]:
        return {name.decode("latin-1").lower(): value.decode("latin-1") for name, value in _FIELD.findall(self.head)}

    def read(self) -> bytes:
        """The whole (error) body."""
        return b"\n".join(self.lines)

    def close(self) -> None:
        self.conn.close()


class _Received(io.RawIOBase):
    """What a blocking connection's read buffer reads from: the socket's own recv_into (a TLS socket's reads
    and decrypts), where socket.makefile's SocketIO adds a Python call to every read for the non-blocking and
    timed-out cases a blocking socket never meets."""

    def __init__(self, sock: socket.socket):
        self.readinto = sock.recv_into  # type: ignore[method-assign]

    def readable(self) -> bool:
        return True


class Connection:
    """One keep-alive connection, through a proxy's tunnel when given. Not thread-safe: the pool hands it to one
    thread at a time."""

    def __init__(
        self,
        host: str,
        port: int,
        context: ssl.SSLContext | None,
        sni: str | None,
        timeout: float | None,
        proxy: Proxy | None = None,
    ):
        raw = socket.create_connection((proxy.host, proxy.port) if proxy else (host, port), timeout=10.0)
        raw.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        if proxy is not None:
            try:
                _tunnel(raw, host, port, proxy)
            except BaseException:
                raw.close()
                raise
        self.sock: socket.socket = context.wrap_socket(raw, server_hostname=sni or host) if context else raw
        self.sock.settimeout(timeout)  # None: blocking, its requests timed by Deadlines
        blocking = timeout is None
        self.reader: IO[bytes] = io.BufferedReader(_Received(self.sock)) if blocking else self.sock.makefile("rb")
        self.reusable = True
        self.expired = False  # shut down by Deadlines: its answer did not come in time
        self.idle_since = 0.0  # when its last answer was read (time.monotonic)

    def dropped(self) -> bool:
        """Whether this idle connection can no longer carry a request: the server closed it (or sent something
        unasked, which only a closing server does, and closes right after). On Linux the TCP state says so
        (`getsockopt` keeps the interpreter lock: a restore asks this before every create); elsewhere the socket
        is polled without waiting, as urllib3 does (poll where the platform has it: select is limited to low
        descriptor numbers)."""
        try:
            if _TCP_INFO:
                return self.sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_INFO, 1)[0] != _TCP_ESTABLISHED
            if hasattr(select, "poll"):
                poller = select.poll()
                poller.register(self.sock, select.POLLIN)
                return bool(poller.poll(0))
            return bool(select.select([self.sock], [], [], 0)[0])
        except (OSError, ValueError):
            return True

    def request(self, head: bytes, body: bytes | None) -> Response:
        self._send_all(head + body if body else head)
        version, status, rest, framing = self._answer_head()
        data = b"" if status in (204, 304) or 100 <= status < 200 else self._body(framing)
        if framing.get(b"connection") == b"close" or version == b"HTTP/1.0":
            self.reusable = False
        return Response(status, rest, data)

    def _answer_head(self) -> tuple[bytes, int, bytes, dict[bytes, bytes]]:
        """The answer's HTTP version, status, header lines, and framing headers (lower-cased)."""
        block = self._head_block()
        status_line, _, rest = block.partition(b"\n")
        parts = status_line.split(None, 2)
        if len(parts) < 2 or not parts[0].startswith(b"HTTP/1.") or not parts[1].isdigit():
            raise ProtocolError(f"not an HTTP answer: {status_line[:80]!r}")
        if rest.count(b"\n") > MAX_HEADERS:
            raise ProtocolError("too many header lines")
        return parts[0], int(parts[1]), rest, _framing(rest)

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
                raise ClosedBeforeAnswer("the API server closed the connection before answering")
            lines.append(line)
            if len(lines) > 1 and line in (b"\r\n", b"\n"):
                return b"".join(lines)
        raise ProtocolError("too many header lines")

    def _send_all(self, data: bytes) -> None:
        """One send: a blocking TLS socket's writes all of it (OpenSSL without partial writes), with no sendall loop
        above it; what a plain socket leaves goes with sendall."""
        sent = self.sock.send(data)
        if sent < len(data):
            self.sock.sendall(memoryview(data)[sent:])

    def stream(self, head: bytes) -> tuple[int, bytes, Iterator[bytes]]:
        """Send a request whose answer is read as it comes (a WATCH): the status, the header lines, and the body's
        non-empty lines. The connection is not reused afterwards."""
        self.reusable = False
        self._send_all(head)
        _, status, rest, framing = self._answer_head()
        return status, rest, self._lines(framing)

    def _lines(self, framing: dict[bytes, bytes]) -> Iterator[bytes]:
        """The body's lines (without their ends, blank ones skipped), chunk by chunk as the server sends them."""
        buf = b""
        for chunk in self._chunks(framing):
            buf += chunk
            while b"\n" in buf:
                line, buf = buf.split(b"\n", 1)
                if line.strip():
                    yield line
            if len(buf) > MAX_STREAM_LINE:
                raise ProtocolError("a streamed line is larger than 32 MiB")
        if buf.strip():
            yield buf

    def _chunks(self, framing: dict[bytes, bytes]) -> Iterator[bytes]:
        if framing.get(b"transfer-encoding") == b"chunked":
            while True:
                size_line = self.reader.readline(MAX_LINE)
                if not size_line:
                    raise ProtocolError("the connection closed in the middle of a chunked answer")
                try:
                    size = int(size_line.split(b";", 1)[0], 16)
                except ValueError:
                    raise ProtocolError(f"bad chunk size {size_line[:40]!r}") from None
                if size == 0:
                    return
                yield self._exactly(size)
                self.reader.readline(MAX_LINE)  # the CRLF after the chunk
        length = framing.get(b"content-length")
        if length is not None:
            yield self._exactly(int(length)) if length.isdigit() else b""
            return
        while chunk := self.reader.read1(64 * 1024):  # type: ignore[attr-defined]  # a BufferedReader
            yield chunk

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

    def expire(self) -> None:
        """End the request blocked on this connection (from another thread): shut the socket down, which makes its
        read or write return. The socket's own shutdown, not SSLSocket's, which would drop its TLS state under the
        blocked call."""
        self.expired = True
        self.reusable = False
        with contextlib.suppress(OSError):  # already closed: nothing is blocked on it
            socket.socket.shutdown(self.sock, socket.SHUT_RDWR)

    def close(self) -> None:
        self.reusable = False
        try:
            self.reader.close()
            self.sock.close()
        except OSError:
            pass


def _tunnel(sock: socket.socket, host: str, port: int, proxy: Proxy) -> None:
    """Ask the proxy for a tunnel to host:port (CONNECT); raise ProtocolError unless it grants one."""
    target = f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
    lines = [f"CONNECT {target} HTTP/1.1", f"Host: {target}"]
    if proxy.authorization:
        lines.append(f"Proxy-Authorization: {proxy.authorization}")
    sock.sendall(("\r\n".join(lines) + "\r\n\r\n").encode("latin-1"))
    status = _readline(sock)  # byte by byte: the tunnel's first TLS bytes must stay in the socket
    parts = status.split(None, 2)
    while _readline(sock) not in (b"\r\n", b"\n"):
        pass
    if len(parts) < 2 or parts[1] != b"200":
        raise ProtocolError(
            f"the proxy {proxy.host}:{proxy.port} refused a tunnel to {target}: {status.strip()[:80]!r}"
        )


def _readline(sock: socket.socket) -> bytes:
    """A line of the proxy's answer (a few short lines), bounded."""
    line = b""
    while not line.endswith(b"\n"):
        byte = sock.recv(1)
        if not byte:
            raise ProtocolError("the proxy closed the connection while answering CONNECT")
        line += byte
        if len(line) > MAX_LINE:
            raise ProtocolError("the proxy's answer to CONNECT has an overlong line")
    return line


_TCP_INFO = sys.platform == "linux" and hasattr(socket, "TCP_INFO")  # struct tcp_info's first byte: tcpi_state
_TCP_ESTABLISHED = 1  # the kernel's TCP_ESTABLISHED; a FIN received makes it CLOSE_WAIT


class Deadlines:
    """The deadlines of the requests in flight, kept by one thread: a connection whose answer is late is shut
    down (`Connection.expire`), which ends the read or write blocked on it, and the request fails with a
    TimeoutError as a socket timeout would have. Registering a request is a dict entry under a lock; the thread
    wakes only when the earliest deadline comes (or an earlier one is registered)."""

    def __init__(self) -> None:
        self.reset()

    def reset(self) -> None:
        """Nothing watched and no thread: as made, and as a forked child must start (register_at_fork below)."""
        # every request takes the lock itself (a C-level `with`, where the Condition's is two Python calls); the
        # Condition over the same lock only wakes the thread
        self._lock = threading.Lock()
        self._cond = threading.Condition(self._lock)
        self._due: dict[Connection, float] = {}
        self._wake = math.inf  # when the thread next looks
        self._started = False

    def watch(self, conn: Connection, seconds: float) -> None:
        due = time.monotonic() + seconds
        with self._lock:
            self._due[conn] = due
            if not self._started:
                self._started = True
                threading.Thread(target=self._run, name="http-deadlines", daemon=True).start()
            if due < self._wake:
                self._wake = due
                self._cond.notify()

    def clear(self, conn: Connection) -> None:
        """The request on `conn` is over: once this returns, `conn` is not expired by this thread."""
        with self._lock:
            self._due.pop(conn, None)

    def _run(self) -> None:
        with self._cond:
            while True:
                now = time.monotonic()
                for conn, due in list(self._due.items()):
                    if due <= now:
                        del self._due[conn]
                        conn.expire()
                self._wake = min(self._due.values(), default=math.inf)
                self._cond.wait(None if self._wake == math.inf else self._wake - now)


DEADLINES = Deadlines()
os.register_at_fork(after_in_child=DEADLINES.reset)  # a child has neither the thread nor a usable lock


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
        proxy: Proxy | None = None,
    ):
        parts = urlsplit(url)
        self.proxy = proxy
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
        """One request and its answer. A reused connection that the server closed while it sat idle is not the
        request's failure: found closed before the request goes out, it is dropped; found closed as it went out
        (no byte of an answer), an idempotent request is sent once more on a new connection, as Go's transport
        does. Neither spends the caller's retries."""
        head = self._head(method, target, headers, body)
        conn, reused = self._take(method in IDEMPOTENT)
        try:
            return self._exchange(conn, head, body)
        except (ClosedBeforeAnswer, ConnectionResetError, BrokenPipeError):
            if not reused or method not in IDEMPOTENT:
                raise
        return self._exchange(self._connect(None), head, body)

    def _exchange(self, conn: Connection, head: bytes, body: bytes | None) -> Response:
        """One request on a blocking connection, given `timeout` seconds to be sent and answered."""
        DEADLINES.watch(conn, self.timeout)
        try:
            resp = conn.request(head, body)
        except BaseException as e:
            DEADLINES.clear(conn)
            conn.close()
            if conn.expired:
                raise TimeoutError(f"no answer from the API server within {self.timeout:g}s") from e
            raise
        DEADLINES.clear(conn)
        self._give_back(conn)  # not kept when it expired as the answer came in
        return resp

    def stream(self, method: str, target: str, headers: dict[str, str], read_timeout: float) -> Stream:
        """A request on a connection of its own whose answer is read as it comes (close the Stream when done)."""
        conn = self._connect(read_timeout)
        try:
            status, head, lines = conn.stream(self._head(method, target, headers, None))
        except BaseException:
            conn.close()
            raise
        return Stream(status, head, lines, conn)

    def _connect(self, timeout: float | None) -> Connection:
        """A new connection; its socket times out each read after `timeout` seconds, or (None) is blocking."""
        return Connection(self.host, self.port, self.context, self.sni, timeout, self.proxy)

    def _head(self, method: str, target: str, headers: dict[str, str], body: bytes | None) -> bytes:
        fields = _header_lines(self.host_header, tuple(headers.items()))
        length = f"Content-Length: {len(body or b'')}\r\n" if body is not None or method in _WITH_BODY else ""
        return f"{method} {self.base_path}{target} HTTP/1.1\r\n{fields}{length}\r\n".encode("latin-1")

    def _take(self, resendable: bool) -> tuple[Connection, bool]:
        """An idle connection the server has not closed (and True), or a new one (and False). For a `resendable`
        request, a connection idle for less than FRESH seconds is taken without asking (one system call fewer for
        a restore's status writes): should the server have closed it, the request goes again on a new one."""
        while True:
            with self._lock:
                conn = self._idle.pop() if self._idle else None
            if conn is None:
                return self._connect(None), False
            if (resendable and time.monotonic() - conn.idle_since < FRESH) or not conn.dropped():
                return conn, True
            conn.close()

    def _give_back(self, conn: Connection) -> None:
        if conn.reusable:
            conn.idle_since = time.monotonic()
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


_WITH_BODY = frozenset({"POST", "PUT", "PATCH"})


@functools.lru_cache(maxsize=64)
def _header_lines(host: bytes, headers: tuple[tuple[str, str], ...]) -> str:
    """The Host line and the header lines, each ended: the same few for every request of a run (its credential,
    what it sends and accepts), so rendered once each."""
    return f"Host: {host.decode()}\r\n" + "".join(f"{k}: {v}\r\n" for k, v in headers)


def _context(verify: bool, ca_file: str | None, cert: tuple[str | None, str | None]) -> ssl.SSLContext:
    context = ssl.create_default_context(cafile=ca_file) if verify else ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    if not verify:
        context.check_hostname = False
        context.verify_mode = ssl.CERT_NONE
    if cert[0]:
        context.load_cert_chain(cert[0], cert[1])
    return context
