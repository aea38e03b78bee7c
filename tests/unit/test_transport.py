"""The transport's retry policy against a scripted local HTTP server (429 Retry-After, 5xx, 4xx)."""

from __future__ import annotations

import http.server
import json
import threading
import time

import pytest

from statusvault.errors import KubeApiError, KubeConnectionError
from statusvault.kube.kubeconfig import ClientConfig
from statusvault.kube.transport import KubeTransport, Request
from statusvault.throttle import Backoff


class Scripted(http.server.BaseHTTPRequestHandler):
    script: list[tuple[int, dict[str, str], dict]] = []
    seen: list[tuple[str, float, str]] = []

    def do_GET(self):
        Scripted.seen.append((self.path, time.monotonic(), self.headers.get("Authorization", "")))
        code, headers, body = Scripted.script.pop(0)
        data = json.dumps(body).encode()
        self.send_response(code)
        for k, v in headers.items():
            self.send_header(k, v)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, *args):
        pass


@pytest.fixture
def server():
    Scripted.script, Scripted.seen = [], []
    srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Scripted)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{srv.server_address[1]}"
    srv.shutdown()


def transport(host, **kw):
    return KubeTransport(
        ClientConfig(host=host, token=lambda: "tok"), backoff=Backoff(base=0.01, cap=0.05, max_retries=3), **kw
    )


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


def test_4xx_is_not_retried_and_carries_the_status(server):
    Scripted.script = [(409, {}, status(409, "Conflict"))]
    with pytest.raises(KubeApiError) as err:
        transport(server).send(Request("GET", "/api"))
    assert (err.value.code, err.value.reason) == (409, "Conflict")
    assert str(err.value) == "GET /api: Conflict happened (409 Conflict)"
    assert len(Scripted.seen) == 1


def test_connection_refused_is_retried_then_reported():
    t = transport("http://127.0.0.1:1")
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
