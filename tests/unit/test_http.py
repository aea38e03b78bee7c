"""The lean HTTP/1.1 client against a raw socket server that answers exactly what each test scripts."""

from __future__ import annotations

import base64
import os
import socket
import ssl
import threading
import time
from collections.abc import Iterator

import pytest

from statusvault.kube import http
from statusvault.kube.http import HttpPool, ProtocolError, Proxy, Response, proxy_for, redacted
from tests.faultproxy import self_signed

HANG_UP = b"hang up"
SILENT = b"silent"  # read the request and never answer, the connection left open


class RawServer:
    """Answers each request with the next scripted bytes; None closes the connection (instead of answering,
    or right after the answer before it); HANG_UP closes it instead of answering, never before."""

    def __init__(self, answers: list[bytes | None], context: ssl.SSLContext | None = None):
        self.answers = answers
        self.context = context
        self.stopped = threading.Event()
        self.requests: list[bytes] = []
        self.connections = 0
        self.sock = socket.create_server(("127.0.0.1", 0))
        self.port = self.sock.getsockname()[1]
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self) -> None:
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            self.connections += 1
            threading.Thread(target=self._one, args=(conn,), daemon=True).start()

    def _one(self, conn: socket.socket) -> None:
        if self.context is not None:
            conn = self.context.wrap_socket(conn, server_side=True)
        reader = conn.makefile("rb")
        with conn:
            while self.answers:
                head = b""
                while not head.endswith(b"\r\n\r\n"):
                    line = reader.readline()
                    if not line:
                        return
                    head += line
                length = next(
                    (int(h.split(b":")[1]) for h in head.split(b"\r\n") if h.lower().startswith(b"content-length")), 0
                )
                self.requests.append(head + reader.read(length))
                answer = self.answers.pop(0)
                if answer is SILENT:
                    self.stopped.wait()
                if answer is None or answer is HANG_UP or answer is SILENT:
                    return
                conn.sendall(answer)
                if self.answers and self.answers[0] is None:  # a None after an answer: close once it is sent
                    self.answers.pop(0)
                    return

    def pool(self, timeout: float = 5) -> HttpPool:
        scheme = "https" if self.context else "http"
        return HttpPool(f"{scheme}://127.0.0.1:{self.port}/prefix", verify=False, timeout=timeout)


@pytest.fixture
def serve() -> Iterator:
    servers: list[RawServer] = []

    def _serve(answers: list[bytes | None], context: ssl.SSLContext | None = None) -> RawServer:
        servers.append(RawServer(answers, context))
        return servers[-1]

    yield _serve
    for s in servers:
        s.stopped.set()
        s.sock.close()


def ok(body: bytes, extra: bytes = b"") -> bytes:
    return (
        b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n"
        + extra
        + b"Content-Length: %d\r\n\r\n" % len(body)
        + body
    )


def test_requests_reuse_one_connection_and_carry_path_headers_and_body(serve):
    server = serve([ok(b'{"a":1}'), ok(b'{"b":2}')])
    pool = server.pool()
    first = pool.request("POST", "/apis/x?fieldManager=m", {"Authorization": "Bearer t"}, b'{"k":"v"}')
    second = pool.request("GET", "/api", {}, None)
    assert (first.status, first.data, second.data) == (200, b'{"a":1}', b'{"b":2}')
    assert first.headers["content-type"] == "application/json"
    assert server.connections == 1
    head = server.requests[0]
    assert head.startswith(b"POST /prefix/apis/x?fieldManager=m HTTP/1.1\r\n")
    assert b"\r\nAuthorization: Bearer t\r\n" in head and b"\r\nContent-Length: 9\r\n" in head
    assert head.endswith(b'\r\n\r\n{"k":"v"}')


def test_a_chunked_body_with_trailers_is_joined(serve):
    chunked = (
        b'HTTP/1.1 201 Created\r\nTransfer-Encoding: chunked\r\n\r\n4\r\n{"a"\r\n3;ext=1\r\n:1}\r\n0\r\nX-T: 1\r\n\r\n'
    )
    server = serve([chunked, ok(b"{}")])
    pool = server.pool()
    resp = pool.request("GET", "/x", {}, None)
    assert (resp.status, resp.data) == (201, b'{"a":1}')
    assert pool.request("GET", "/y", {}, None).data == b"{}", "the connection is still in step"
    assert server.connections == 1


def test_connection_close_and_no_content_answers(serve):
    server = serve([ok(b"{}", b"Connection: close\r\n"), b"HTTP/1.1 204 No Content\r\n\r\n", ok(b"[]")])
    pool = server.pool()
    assert pool.request("GET", "/a", {}, None).data == b"{}"
    assert pool.request("DELETE", "/b", {}, None).status == 204
    assert pool.request("GET", "/c", {}, None).data == b"[]"
    assert server.connections == 2, "a connection the server closes is not reused"


def test_a_connection_closed_before_answering_or_mid_body_is_an_error_and_not_reused(serve):
    server = serve([None, b"HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\n{}", ok(b"{}")])
    pool = server.pool()
    with pytest.raises(ProtocolError, match="closed the connection before answering"):
        pool.request("GET", "/a", {}, None)
    server.answers.insert(1, None)  # the short body is followed by a close
    with pytest.raises(ProtocolError, match="after 2 of 10 body bytes"):
        pool.request("GET", "/b", {}, None)
    assert pool.request("GET", "/c", {}, None).data == b"{}"
    assert server.connections == 3


def closed_while_idle(serve) -> tuple[RawServer, HttpPool]:
    """A pool whose one idle connection the server has closed after answering (its FIN arrived), and the server,
    which answers the next request on a new connection."""
    server = serve([ok(b"{}"), None, ok(b"[]")])  # the server closes the connection once it has answered
    pool = server.pool()
    pool.request("GET", "/a", {}, None)
    deadline = time.monotonic() + 5
    while not pool._idle[0].dropped():  # the server's FIN arrives
        assert time.monotonic() < deadline, "the closed connection never looked closed"
        time.sleep(0.01)
    return server, pool


def test_an_idle_connection_the_server_closed_is_dropped_before_it_is_used(serve):
    server, pool = closed_while_idle(serve)
    assert pool.request("POST", "/b", {}, b"{}").data == b"[]", "even a POST: it never went out on the dead one"
    assert server.connections == 2


def test_a_put_on_a_connection_closed_just_now_goes_again_on_a_new_one(serve):
    """Within FRESH seconds of its last answer, an idempotent request takes the connection without asking whether
    the server closed it: found closed as the request goes out, the request is sent again, once."""
    server, pool = closed_while_idle(serve)
    pool._idle[0].idle_since = time.monotonic()  # as fresh as a restore's connections, whatever this machine's speed
    assert pool.request("PUT", "/b", {}, b"{}").data == b"[]"
    assert server.connections == 2


@pytest.mark.parametrize(
    "head",
    [
        b"Content-Type: application/json\r\nContent-Length: 12\r\n\r\n",  # the API server's
        b"content-length:12\r\nconnection: Close\r\n\r\n",  # lower-case, no blank after the colon
        b"Transfer-Encoding:  chunked \t\r\nX-A: b\r\n\r\n",  # blanks around the value
        b"Content-Length: 1\r\nContent-Length: 2\r\n\r\n",  # repeated: the last
        b"Content-Length: 3\nConnection: close\n\n",  # bare LF line ends
        b"Content-Length : 3\r\n\r\n",  # a blank before the colon: not the header
        b"Connection-Id: 7\r\nX-Content-Length: 5\r\n\r\n",  # names that only start or end like one
        b"Content-Length: 1\r2\r\n\r\n",  # a CR inside the value
        b"X-B: c\r\n\r\n",  # none of them
    ],
)
def test_framing_headers_are_read_as_the_header_grammar_reads_them(head):
    """The C-level search gives what the line-by-line regex gives, for every kind of header block."""
    assert http._framing(head) == http._framing_by_regex(head)


@pytest.mark.parametrize("method", ["GET", "PUT", "DELETE"])
def test_an_idempotent_request_the_server_closed_on_is_sent_once_more_on_a_new_connection(serve, method):
    server = serve([ok(b"{}"), HANG_UP, ok(b"[]")])  # the connection looks open, and closes on the request
    pool = server.pool()
    pool.request("GET", "/a", {}, None)
    assert pool.request(method, "/b", {}, b"{}" if method == "PUT" else None).data == b"[]"
    assert server.connections == 2
    assert [r.split(b" ")[1] for r in server.requests] == [b"/prefix/a", b"/prefix/b", b"/prefix/b"]


def test_a_post_the_server_closed_on_is_not_sent_again_nor_a_request_on_a_new_connection(serve):
    server = serve([ok(b"{}"), HANG_UP, HANG_UP])
    pool = server.pool()
    pool.request("GET", "/a", {}, None)
    with pytest.raises(OSError):  # closed or reset: the server may have created the object
        pool.request("POST", "/b", {}, b"{}")
    with pytest.raises(OSError):  # on a new connection: the server's own failure, the caller's to retry
        pool.request("GET", "/c", {}, None)
    assert len(server.requests) == 3


@pytest.mark.parametrize("tls", [False, True], ids=["http", "https"])
def test_an_answer_that_never_comes_times_out_and_its_connection_is_not_reused(serve, tmp_path, tls):
    """Requests run on blocking sockets: their time limit is kept by the deadline thread, which shuts the late
    connection down (over TLS too) and the request fails as a socket timeout did."""
    context = None
    if tls:
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.load_cert_chain(*self_signed(tmp_path))
    server = serve([ok(b"{}"), SILENT, ok(b"[]")], context)
    pool = server.pool(timeout=0.5)
    assert pool.request("GET", "/a", {}, None).data == b"{}"
    time.sleep(0.7)  # longer than the limit: a finished request's deadline is cleared, its connection kept
    started = time.monotonic()
    with pytest.raises(TimeoutError, match=r"no answer from the API server within 0.5s"):
        pool.request("PUT", "/b", {}, b"{}")  # idempotent, yet not sent again: a timeout is the caller's to retry
    assert 0.45 <= time.monotonic() - started < 3
    assert pool.request("GET", "/c", {}, None).data == b"[]"
    assert server.connections == 2, "the first connection outlived a deadline; the late one was dropped"
    assert [r.split(b" ")[1] for r in server.requests] == [b"/prefix/a", b"/prefix/b", b"/prefix/c"]


def test_a_body_the_server_never_reads_times_out(tmp_path):
    """A write blocked on a server that reads nothing (its buffers full) ends at the deadline too."""
    listener = socket.create_server(("127.0.0.1", 0))
    accepted: list[socket.socket] = []
    threading.Thread(target=lambda: accepted.append(listener.accept()[0]), daemon=True).start()
    try:
        pool = HttpPool(f"http://127.0.0.1:{listener.getsockname()[1]}", timeout=0.5)
        with pytest.raises(TimeoutError, match="within 0.5s"):
            pool.request("POST", "/x", {}, b"x" * (64 << 20))
    finally:
        for conn in accepted:
            conn.close()
        listener.close()


def test_the_deadline_thread_expires_only_what_is_late():
    """Unit-level: of two connections watched, only the one past its deadline is shut down; a cleared one never
    is, and an earlier deadline registered later wakes the thread for it."""
    deadlines = http.Deadlines()

    class Conn:
        def __init__(self) -> None:
            self.expired_at = 0.0

        def expire(self) -> None:
            self.expired_at = time.monotonic()

    slow, fast, cleared = Conn(), Conn(), Conn()
    start = time.monotonic()
    deadlines.watch(slow, 5.0)  # type: ignore[arg-type]
    deadlines.watch(cleared, 0.1)  # type: ignore[arg-type]
    deadlines.clear(cleared)  # type: ignore[arg-type]
    deadlines.watch(fast, 0.2)  # type: ignore[arg-type]
    deadline = start + 3
    while not fast.expired_at and time.monotonic() < deadline:
        time.sleep(0.01)
    assert 0.2 <= fast.expired_at - start < 2
    time.sleep(0.2)
    assert not slow.expired_at and not cleared.expired_at
    deadlines.clear(slow)  # type: ignore[arg-type]


def test_a_forked_child_keeps_deadlines_with_a_thread_of_its_own(serve):
    """A fork copies neither the deadline thread nor a usable lock: the child's deadlines still expire."""
    server = serve([ok(b"{}")])
    server.pool().request("GET", "/a", {}, None)  # the parent's deadline thread runs
    late = type("Late", (), {"expire": lambda self: os._exit(0)})()
    pid = os.fork()
    if pid == 0:  # the child: exit 0 from its own deadline thread, else 1
        http.DEADLINES.watch(late, 0.05)  # type: ignore[arg-type]
        time.sleep(3)
        os._exit(1)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0, "the child's deadline never expired"


def test_garbage_is_not_taken_for_an_answer(serve):
    server = serve([b"SSH-2.0-OpenSSH\r\n\r\n"])
    with pytest.raises(ProtocolError, match="not an HTTP answer"):
        server.pool().request("GET", "/", {}, None)


def test_headers_read_line_by_line_when_not_all_buffered_or_ended_by_bare_lf(serve):
    big = b"X-Big: " + b"v" * 9000 + b"\r\n"  # a head larger than the read buffer
    bare_lf = b"HTTP/1.1 200 OK\nRetry-After: 3 \nContent-Length: 2\n\n{}"
    server = serve([ok(b'{"a":1}', big), bare_lf, ok(b"[]")])
    pool = server.pool()
    first = pool.request("GET", "/a", {}, None)
    assert (first.data, len(first.headers["x-big"])) == (b'{"a":1}', 9000)
    second = pool.request("GET", "/b", {}, None)
    assert (second.data, second.headers["retry-after"]) == (b"{}", "3")
    assert pool.request("GET", "/c", {}, None).data == b"[]", "the connection is still in step"
    assert server.connections == 1


def test_a_bad_content_length_is_a_protocol_error(serve):
    server = serve([b"HTTP/1.1 200 OK\r\nContent-Length: ten\r\n\r\n{}"])
    with pytest.raises(ProtocolError, match="bad Content-Length"):
        server.pool().request("GET", "/", {}, None)


@pytest.mark.parametrize(
    "url, explicit, env, expected",
    [
        ("https://kube.test:6443", None, {}, None),
        ("https://kube.test:6443", "http://proxy:3128", {}, ("proxy", 3128)),
        ("https://kube.test:6443", None, {"HTTPS_PROXY": "http://proxy:3128"}, ("proxy", 3128)),
        ("https://kube.test:6443", None, {"https_proxy": "proxy:8080"}, ("proxy", 8080)),
        ("http://kube.test:8080", None, {"HTTPS_PROXY": "http://proxy:3128"}, None),
        ("http://kube.test:8080", None, {"HTTP_PROXY": "http://proxy:3128"}, ("proxy", 3128)),
        ("https://127.0.0.1:6443", None, {"HTTPS_PROXY": "http://proxy:3128"}, None),  # loopback: never
        ("https://localhost:6443", None, {"HTTPS_PROXY": "http://proxy:3128"}, None),
        ("https://127.0.0.1:6443", "http://proxy:3128", {}, ("proxy", 3128)),  # proxy-url: always
        ("https://kube.test:6443", None, {"HTTPS_PROXY": "http://p:1", "NO_PROXY": "kube.test"}, None),
        ("https://api.kube.test:6443", None, {"HTTPS_PROXY": "http://p:1", "NO_PROXY": ".kube.test"}, None),
        ("https://api.kube.test:6443", None, {"HTTPS_PROXY": "http://p:1", "no_proxy": "kube.test"}, None),
        ("https://kube.test:6443", None, {"HTTPS_PROXY": "http://p:1", "NO_PROXY": "*"}, None),
        ("https://10.1.2.3:6443", None, {"HTTPS_PROXY": "http://p:1", "NO_PROXY": "10.0.0.0/8"}, None),
        ("https://11.1.2.3:6443", None, {"HTTPS_PROXY": "http://p:1", "NO_PROXY": "10.0.0.0/8"}, ("p", 1)),
        ("https://kube.test:6443", None, {"HTTPS_PROXY": "http://p:1", "NO_PROXY": "kube.test:443"}, ("p", 1)),
        ("https://kube.test:6443", None, {"HTTPS_PROXY": "http://p:1", "NO_PROXY": "kube.test:6443"}, None),
        ("https://notkube.test:6443", None, {"HTTPS_PROXY": "http://p:1", "NO_PROXY": "kube.test"}, ("p", 1)),
    ],
)
def test_the_proxy_is_picked_as_kubectl_picks_it(url, explicit, env, expected):
    proxy = proxy_for(url, explicit, env)
    assert ((proxy.host, proxy.port) if proxy else None) == expected


def test_proxy_credentials_and_refused_schemes():
    assert Proxy.parse("http://u:p%40ss@proxy:3128").authorization == "Basic " + base64.b64encode(b"u:p@ss").decode()
    with pytest.raises(ValueError, match="only http:// proxies"):
        Proxy.parse("socks5://proxy:1080")


def test_warning_headers_may_repeat_and_their_name_is_any_case():
    head = b'Content-Length: 2\r\nWarning: 299 - "a"\r\nwarning:  299 - "b" \r\nX-Warning: no\r\n\r\n'
    assert Response(200, head, b"{}").warning_headers() == ['299 - "a"', '299 - "b"']
    assert Response(200, b"Content-Length: 2\r\n\r\n", b"{}").warning_headers() == []


def test_a_proxy_password_never_reaches_an_error_line():
    with pytest.raises(ValueError) as refused:
        Proxy.parse("socks5://alice:s3cret@proxy.example.com:1080")
    assert "s3cret" not in str(refused.value) and "alice:***@proxy.example.com:1080" in str(refused.value)
    assert redacted("http://proxy:3128") == "http://proxy:3128"
