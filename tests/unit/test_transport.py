"""The transport against local HTTP servers: the retry policy (429 Retry-After, 5xx, 4xx) and 401 refreshes."""

from __future__ import annotations

import http.server
import json
import re
import threading
import time
from concurrent.futures import ThreadPoolExecutor

import orjson
import pytest

import statusvault.kube.transport as transport_module
from statusvault.errors import KubeApiError, KubeConnectionError
from statusvault.kube.client import KubeClient
from statusvault.kube.credentials import Credential, ExecPlugin, Static, TokenFile
from statusvault.kube.kubeconfig import ClientConfig
from statusvault.kube.transport import KubeTransport, Request, api_error, warning_texts
from statusvault.runtime.throttle import MAX_RETRY_AFTER, Backoff, spread
from tests.credentials import Plugin, tokens


class Scripted(http.server.BaseHTTPRequestHandler):
    script: list[tuple[int, dict[str, str], dict]] = []
    seen: list[tuple[str, float, str]] = []

    def do_GET(self):
        Scripted.seen.append((self.path, time.monotonic(), self.headers.get("Authorization", "")))
        self.rfile.read(int(self.headers.get("Content-Length") or 0))
        code, headers, body = Scripted.script.pop(0)
        data = json.dumps(body).encode()
        self.send_response(code)
        for k, v in headers.items() if isinstance(headers, dict) else headers:  # pairs: a name may repeat
            self.send_header(k, v)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    do_POST = do_PUT = do_PATCH = do_GET

    def log_message(self, *args):
        pass


@pytest.fixture
def server():
    Scripted.script, Scripted.seen = [], []
    srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Scripted)
    threading.Thread(target=srv.serve_forever, args=(0.05,), daemon=True).start()
    yield f"http://127.0.0.1:{srv.server_address[1]}"
    srv.shutdown()


def transport(host, credentials=None, **kw):
    config = ClientConfig(host=host, credentials=credentials or Static("kubeconfig user 'u'", "tok"))
    wait = kw.pop("unavailable_for", 0.0)
    return KubeTransport(config, backoff=Backoff(base=0.01, cap=0.05, max_retries=3, unavailable_for=wait), **kw)


def status(code, reason):
    return {"kind": "Status", "code": code, "reason": reason, "message": f"{reason} happened"}


def test_429_honours_retry_after(server):
    Scripted.script = [(429, {"Retry-After": "1"}, status(429, "TooManyRequests")), (200, {}, {"ok": 1})]
    t = transport(server)
    assert json.loads(t.send(Request("GET", "/api"))) == {"ok": 1}
    (_, first, auth), (_, second, _) = Scripted.seen
    assert second - first >= 0.95, "waited for Retry-After"
    assert auth == "Bearer tok"
    assert t.stats.retries == 1


def test_5xx_is_retried_with_backoff_then_gives_up(server):
    Scripted.script = [(503, {}, status(503, "ServiceUnavailable"))] * 4
    t = transport(server)
    with pytest.raises(KubeApiError) as err:
        t.send(Request("GET", "/api"))
    assert (err.value.code, err.value.reason) == (503, "ServiceUnavailable")
    assert len(Scripted.seen) == 4, "1 try + 3 bounded retries"


def test_a_server_that_answered_then_goes_away_is_waited_out_past_the_retries(server, monkeypatch):
    """A restarting API server (503 "server is starting") is tried again past the bounded retries until its
    --server-wait-seconds are spent; the transport remembers how long it was away."""
    monkeypatch.setattr(transport_module, "POLL_UNAVAILABLE", 0.01)
    Scripted.script = (
        [(200, {}, {"ok": 1})] + [(503, {}, status(503, "ServiceUnavailable"))] * 8 + [(200, {}, {"ok": 2})]
    )
    t = transport(server, unavailable_for=30)
    assert json.loads(t.send(Request("GET", "/api"))) == {"ok": 1}

    assert json.loads(t.send(Request("GET", "/api"))) == {"ok": 2}, "8 failures: more than the 3 retries"
    assert len(Scripted.seen) == 10 and t.stats.unavailable_seconds > 0


def test_a_server_waited_out_gives_up_once_the_wait_is_spent(server, monkeypatch):
    monkeypatch.setattr(transport_module, "POLL_UNAVAILABLE", 0.01)
    Scripted.script = [(200, {}, {"ok": 1})] + [(503, {}, status(503, "ServiceUnavailable"))] * 1000
    t = transport(server, unavailable_for=0.3)
    t.send(Request("GET", "/api"))
    start = time.monotonic()
    with pytest.raises(KubeApiError):
        t.send(Request("GET", "/api"))
    assert 0.3 <= time.monotonic() - start < 5


def test_4xx_is_not_retried_and_carries_the_status(server):
    Scripted.script = [(409, {}, status(409, "Conflict"))]
    with pytest.raises(KubeApiError) as err:
        transport(server).send(Request("GET", "/api"))
    assert (err.value.code, err.value.reason) == (409, "Conflict")
    assert str(err.value) == "GET /api: Conflict happened (409 Conflict)"
    assert len(Scripted.seen) == 1


def test_connection_refused_is_retried_then_reported():
    """A server never reached (a wrong address) is an error at once, whatever --server-wait-seconds says."""
    t = transport("http://127.0.0.1:1", unavailable_for=60)
    start = time.monotonic()
    with pytest.raises(KubeConnectionError, match="cannot reach the API server at http://127.0.0.1:1"):
        t.send(Request("GET", "/api"))
    assert time.monotonic() - start < 5


def test_qps_limit_paces_requests(server):
    Scripted.script = [(200, {}, {})] * 6
    t = transport(server, qps=20, burst=1)
    start = time.monotonic()
    for _ in range(6):
        t.send(Request("GET", "/api"))
    assert time.monotonic() - start >= 0.24, "5 paced requests at 20/s"


def test_429_has_its_own_budget(server):
    Scripted.script = [(429, {"Retry-After": "0"}, status(429, "TooManyRequests"))] * 5 + [(200, {}, {"ok": 2})]
    assert json.loads(transport(server).send(Request("GET", "/api"))) == {"ok": 2}, "more 429s than 5xx retries"


class Guarded(http.server.BaseHTTPRequestHandler):
    """200 for `Bearer <valid>`, 401 for any other Authorization."""

    valid = "good"
    seen: list[str] = []

    def do_GET(self):
        auth = self.headers.get("Authorization", "")
        Guarded.seen.append(auth)
        ok = auth == f"Bearer {Guarded.valid}"
        data = json.dumps({"ok": 1} if ok else status(401, "Unauthorized")).encode()
        self.send_response(200 if ok else 401)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, *args):
        pass


@pytest.fixture
def guarded():
    Guarded.valid, Guarded.seen = "good", []
    srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Guarded)
    threading.Thread(target=srv.serve_forever, args=(0.05,), daemon=True).start()
    yield f"http://127.0.0.1:{srv.server_address[1]}"
    srv.shutdown()


def test_401_re_reads_a_rewritten_token_file_at_once(guarded, tmp_path):
    path = tmp_path / "token"
    path.write_text("old")
    t = transport(guarded, TokenFile(path))
    with pytest.raises(KubeApiError) as err:
        t.send(Request("GET", "/api"))
    assert str(err.value) == (
        f"the API server rejected the credentials from token file {path} (401 Unauthorized) even after re-reading it"
    )
    assert (err.value.code, err.value.reason) == (401, "Unauthorized")
    path.write_text("good\n")  # the kubelet rotated it; the minute's re-read is not due yet
    assert json.loads(t.send(Request("GET", "/api"))) == {"ok": 1}
    assert Guarded.seen == ["Bearer old", "Bearer old", "Bearer old", "Bearer good"]
    assert t.send(Request("GET", "/api")) and Guarded.seen[-1] == "Bearer good"


def test_a_burst_of_401s_runs_the_plugin_once(guarded, tmp_path):
    plugin = Plugin(tmp_path, *tokens("expired", "good"))
    t = transport(guarded, ExecPlugin(plugin.spec()), pool_size=16)
    with ThreadPoolExecutor(16) as pool:
        answers = list(pool.map(lambda _: t.send(Request("GET", "/api")), range(64)))
    assert all(json.loads(a) == {"ok": 1} for a in answers)
    assert plugin.runs == 2, "the first run, then one refresh for every thread's 401"
    assert Guarded.seen.count("Bearer good") == 64


def test_a_plugin_still_rejected_runs_once_more_then_fails(guarded, tmp_path):
    plugin = Plugin(tmp_path, *tokens("expired"))
    source = ExecPlugin(plugin.spec())
    t = transport(guarded, source)
    message = (
        f"the API server rejected the credentials from exec plugin {str(plugin.script)!r} (401 Unauthorized) "
        "even after re-running it"
    )
    with pytest.raises(KubeApiError, match="^" + re.escape(message) + "$"):
        t.send(Request("GET", "/api"))
    assert (plugin.runs, len(Guarded.seen)) == (2, 2)
    with pytest.raises(KubeApiError, match=re.escape(message)):
        t.send(Request("GET", "/api"))
    assert (plugin.runs, len(Guarded.seen)) == (2, 3), "the credential a refresh just produced is not refreshed again"
    source.cooldown = 0.0  # as after 10 s
    with pytest.raises(KubeApiError, match=re.escape(message)):
        t.send(Request("GET", "/api"))
    assert (plugin.runs, len(Guarded.seen)) == (3, 5)


def test_a_static_token_is_not_resent(guarded):
    with pytest.raises(KubeApiError) as err:
        transport(guarded).send(Request("GET", "/api"))
    assert str(err.value) == "the API server rejected the credentials from kubeconfig user 'u' (401 Unauthorized)"
    assert Guarded.seen == ["Bearer tok"]


class Rotating:
    """A source whose every refresh yields a new client certificate pair (paths only: the server is plain HTTP)."""

    description, refresh_action = "exec plugin 'certs'", "re-running it"

    def __init__(self):
        self.credential = Credential(None, "/certs/0.crt", "/certs/0.key", serial=0)

    def current(self):
        return self.credential

    def refresh(self, rejected):
        n = rejected.serial + 1
        self.credential = Credential(None, f"/certs/{n}.crt", f"/certs/{n}.key", serial=n)
        return self.credential


def test_a_new_client_certificate_gets_a_new_pool(server):
    Scripted.script = [(401, {}, status(401, "Unauthorized")), (200, {}, {"ok": 1})]
    t = transport(server, Rotating())
    assert json.loads(t.send(Request("GET", "/api"))) == {"ok": 1}
    assert t.pool.cert == ("/certs/1.crt", "/certs/1.key")


@pytest.mark.parametrize(
    ("values", "texts"),
    [
        (['299 - "unknown field \\"spec.zone\\""'], ['unknown field "spec.zone"']),
        (['299 - "a, b", 299 - "c"'], ["a, b", "c"]),  # several in one value; commas inside quotes
        (['299 - "x"', '299 kube-apiserver "y" "Tue, 15 Nov 1994 08:12:31 GMT"'], ["x", "y"]),
        (['199 - "not the API server\'s"', '299 - ""', "garbage"], []),  # client-go shows only 299 with a text
        ([], []),
    ],
)
def test_warning_texts(values, texts):
    assert warning_texts(values) == texts


def test_writes_hand_back_the_warning_headers_of_their_answer(server):
    from statusvault.model import ResourceType

    rt = ResourceType("x.example.com", "v1", "things", "Thing", True, True, True, ("create",))
    deprecated = ("Warning", '299 - "x.example.com/v1 Thing is deprecated"')
    Scripted.script = [
        (200, [deprecated, ("Warning", '299 - "unknown field \\"spec.zone\\""')], {"kind": "Thing"}),
        (200, [deprecated], {"kind": "Thing"}),
        (200, [], {"kind": "Thing"}),
        (200, [deprecated], {"kind": "Thing"}),
    ]
    client = KubeClient(transport(server))
    heard: list[str] = []
    assert client.create(rt, "ns", {"metadata": {"name": "a"}}, warnings=heard) == {"kind": "Thing"}
    client.replace(rt, "ns", "a", {"metadata": {"name": "a"}}, sub="status", warnings=heard)
    client.patch(rt, "ns", "a", [], "application/json-patch+json", warnings=heard)
    assert heard == [
        "x.example.com/v1 Thing is deprecated",
        'unknown field "spec.zone"',
        "x.example.com/v1 Thing is deprecated",
    ]
    client.create(rt, "ns", {"metadata": {"name": "b"}})  # not asked: not read


def test_a_retry_after_is_waited_in_full_and_spread_over_a_quarter_more():
    """Clients turned away together by API Priority and Fairness do not all come back at the same moment."""
    waits = [spread(2.0) for _ in range(200)]
    assert all(2.0 <= w <= 2.5 for w in waits)
    assert max(waits) - min(waits) > 0.25, "spread, not one moment"
    assert spread(0.0) == 0.0
    assert spread(600.0) == MAX_RETRY_AFTER, "a server asking for minutes is capped"


@pytest.mark.parametrize(
    ("header", "status", "expected"),
    [
        ("3", {}, 3.0),
        (None, {"details": {"retryAfterSeconds": 7}}, 7.0),
        ("2", {"details": {"retryAfterSeconds": 7}}, 2.0),  # the header wins, as client-go reads it
        ("soon", {}, None),
        (None, {"details": {"retryAfterSeconds": "x"}}, None),
        (None, {}, None),
    ],
)
def test_an_api_error_carries_the_servers_retry_after(header, status, expected):
    body = orjson.dumps({"kind": "Status", "code": 429, "reason": "TooManyRequests", **status})
    assert api_error(Request("GET", "/api/v1/pods"), 429, body, header).retry_after == expected
