"""One adapter that sends requests to the API server: auth from kubeconfig, pooling, retries, QPS."""

from __future__ import annotations

import base64
import dataclasses
import functools
import logging
import re
import threading
import time
from collections.abc import Iterable
from typing import Any
from urllib.parse import urlencode

import orjson

from statusvault.errors import ConfigError, KubeApiError, KubeConnectionError
from statusvault.kube.credentials import Credential, CredentialSource
from statusvault.kube.http import HttpPool, Response, Stream, proxy_for
from statusvault.kube.kubeconfig import ClientConfig, load
from statusvault.runtime.throttle import MAX_RETRY_AFTER, POLL_UNAVAILABLE, Backoff, RateLimiter, TokenBucket, spread

log = logging.getLogger(__name__)

RETRYABLE_CODES = frozenset({500, 502, 503, 504})
UNAVAILABLE_CODES = frozenset({502, 503, 504})  # the server (or a proxy before it) is not there: waited out
MAX_THROTTLED_RETRIES = 30  # 429s: API Priority and Fairness asks us to wait, not to give up
JSON = "application/json"
MERGE_PATCH = "application/merge-patch+json"
JSON_PATCH = "application/json-patch+json"
APPLY_PATCH = "application/apply-patch+yaml"
METADATA_LIST = "application/json;as=PartialObjectMetadataList;g=meta.k8s.io;v=v1,application/json"
# One warning of a Warning header (RFC 7234): code, agent, quoted text, an optional quoted date; several per value.
_WARNING_VALUE = re.compile(r'(\d{3})[ \t]+\S+[ \t]+"((?:[^"\\]|\\.)*)"(?:[ \t]+"[^"]*")?')
_QUOTED_PAIR = re.compile(r"\\(.)")


@dataclasses.dataclass(frozen=True, slots=True)
class Request:
    """A request to the API server, built without I/O."""

    method: str
    path: str
    params: tuple[tuple[str, str], ...] = ()
    body: bytes | None = None
    content_type: str = JSON
    accept: str = JSON

    def url_path(self) -> str:
        if not self.params:
            return self.path
        return f"{self.path}?{_query(self.params)}"


@functools.lru_cache(maxsize=64)
def _query(params: tuple[tuple[str, str], ...]) -> str:
    """Encoded once per distinct query: a restore sends the same few (field manager, dry run) every time."""
    return urlencode(params)


@dataclasses.dataclass
class TransportStats:
    requests: int = 0
    retries: int = 0
    throttled_seconds: float = 0.0
    unavailable_seconds: float = 0.0  # the longest a request waited for an unavailable server that came back


class KubeTransport:
    """Sends `Request`s with connection reuse, a client-side token bucket and bounded retries."""

    def __init__(
        self,
        config: ClientConfig,
        *,
        pool_size: int = 16,
        qps: float = 0.0,
        burst: int = 100,
        backoff: Backoff | None = None,
        timeout: float = 60.0,
        bucket: RateLimiter | None = None,  # a budget shared with other processes; else qps/burst
    ):
        self.config = config
        self.host = config.host
        self.bucket: RateLimiter = bucket if bucket is not None else TokenBucket(qps, burst)
        self.backoff = backoff or Backoff()
        self.read_timeout = timeout
        self.stats = TransportStats()
        self._stats_lock = threading.Lock()
        self._waiting = threading.Event()  # an outage is being waited out (said once)
        self._answered_at: float | None = None  # the last success: none since a request failed is an outage
        self._pool_size = max(1, pool_size)
        self._pool_lock = threading.Lock()
        self._certs = (config.cert_file, config.key_file)
        try:
            self.proxy = proxy_for(config.host, config.proxy)
        except ValueError as e:
            raise ConfigError(str(e)) from None
        self.pool = self._new_pool(self._certs)

    def _new_pool(self, certs: tuple[str | None, str | None]) -> HttpPool:
        config = self.config
        return HttpPool(
            config.host,
            verify=config.verify,
            ca_file=config.ca_file,
            cert=certs,
            server_hostname=config.server_hostname,
            timeout=self.read_timeout,
            maxsize=self._pool_size,
            proxy=self.proxy,
        )

    def _pool_for(self, credential: Credential) -> HttpPool:
        """The pool presenting `credential`'s client certificate; a plugin's new certificate needs new connections."""
        certs = (credential.cert_file, credential.key_file)
        if not credential.cert_file:
            certs = (self.config.cert_file, self.config.key_file)
        with self._pool_lock:
            if certs != self._certs:
                old, self.pool, self._certs = self.pool, self._new_pool(certs), certs
                old.clear()
            return self.pool

    def _headers(self, req: Request, credential: Credential) -> dict[str, str]:
        headers = {"Accept": req.accept, "User-Agent": "statusvault"}
        if req.body is not None:
            headers["Content-Type"] = req.content_type
        if credential.token:
            headers["Authorization"] = f"Bearer {credential.token}"
        elif self.config.basic_auth:
            headers["Authorization"] = "Basic " + base64.b64encode(self.config.basic_auth.encode()).decode()
        if self.config.impersonate:
            headers["Impersonate-User"] = self.config.impersonate
        return headers

    def impersonating(self, user: str) -> KubeTransport:
        """A transport with these settings and this budget (its token bucket shared) that acts as `user`: every
        request is authorized as that user's, the credentials only proving who may impersonate it."""
        return KubeTransport(
            dataclasses.replace(self.config, impersonate=user),
            pool_size=self._pool_size,
            backoff=self.backoff,
            timeout=self.read_timeout,
            bucket=self.bucket,
        )

    def send(self, req: Request, warnings: list[str] | None = None) -> bytes:
        """Send `req`; return the response body, or raise KubeApiError / KubeConnectionError. The texts of the
        successful answer's Warning headers are added to `warnings` when given.

        429 (never executed by the server, so always safe to resend) has its own, larger budget and honours
        Retry-After up to a cap; 5xx, timeouts and connection errors back off exponentially with jitter. A 401
        (never executed either) refreshes the credential once and resends; a second 401 is an error naming it.
        """
        attempt = throttled = 0
        refreshed = False
        failed_at: float | None = None  # the first failure of this request that is retried
        while True:
            waited = self.bucket.acquire()
            credential = self.config.credentials.current()
            try:
                resp = self._request(req, credential)
            except OSError as e:
                error: Exception = KubeConnectionError(
                    f"cannot reach the API server at {self.host}: {type(e).__name__}: {e}"
                )
                retry_after = None
                code = 0
            else:
                if resp.status < 500:  # the server is there (a 4xx is its answer too)
                    self._answered_at = time.monotonic()
                if resp.status < 400:
                    self._count(waited, retried=False)
                    if failed_at is not None:
                        self._came_back(time.monotonic() - failed_at)
                    if refreshed:
                        log.info("renewed the credentials from %s after a 401", self.config.credentials.description)
                    if warnings is not None and (values := resp.warning_headers()):
                        warnings += warning_texts(values)
                    return bytes(resp.data)
                error = api_error(req, resp.status, resp.data, resp.headers.get("retry-after"))
                retry_after = error.retry_after
                code = resp.status
            if code == 401:
                self._refresh_or_raise(credential, refreshed)
                refreshed = True
                self._count(waited, retried=True)
                continue
            if code == 429:
                if throttled >= MAX_THROTTLED_RETRIES:
                    raise error
                delay = self.backoff.delay(throttled) if retry_after is None else spread(retry_after)
                throttled += 1
                self._count(waited + delay, retried=True)
                time.sleep(delay)
                continue
            if code and code not in RETRYABLE_CODES:
                raise error
            failed_at = time.monotonic() if failed_at is None else failed_at
            if attempt >= self.backoff.max_retries and not self._waits_out(code, failed_at, error):
                raise error
            delay = min(retry_after, MAX_RETRY_AFTER) if retry_after is not None else self._delay(attempt)
            log.debug("retrying %s %s in %.2fs after %s", req.method, req.path, delay, error)
            self._count(waited + delay, retried=True)
            time.sleep(delay)
            attempt += 1

    def _request(self, req: Request, credential: Credential) -> Response:
        return self._pool_for(credential).request(req.method, req.url_path(), self._headers(req, credential), req.body)

    def open_stream(self, req: Request, read_timeout: float) -> Stream:
        """Send `req` once and return the answer unread (a WATCH): the caller reads it line by line, closes it,
        and reconnects itself; an error status is raised as KubeApiError, a lost connection as
        KubeConnectionError."""
        credential = self.config.credentials.current()
        self.bucket.acquire()
        try:
            stream = self._pool_for(credential).stream(
                req.method, req.url_path(), self._headers(req, credential), read_timeout
            )
            if stream.status >= 400:
                data = stream.read()
                stream.close()
        except OSError as e:
            raise KubeConnectionError(f"cannot reach the API server at {self.host}: {type(e).__name__}: {e}") from e
        if stream.status >= 400:
            if stream.status == 401:
                self.config.credentials.refresh(credential)
            raise api_error(req, stream.status, data, stream.headers.get("retry-after"))
        return stream

    def _refresh_or_raise(self, rejected: Credential, refreshed: bool) -> None:
        """After a 401: refresh the credential, once per request, or raise the error naming its source."""
        source = self.config.credentials
        fresh = None if refreshed else source.refresh(rejected)
        if fresh is None or fresh.serial == rejected.serial:  # the same: a refresh has just produced it
            raise rejected_error(source, refreshed or fresh is not None)

    def _waits_out(self, code: int, failed_at: float, error: Exception) -> bool:
        """Whether a request whose retries are spent tries again: the server, which has answered this client before
        but nothing since this request first failed, is unavailable (unreachable, or a 502/503/504) for less than the
        backoff's `unavailable_for` so far. A request that keeps failing while others succeed fails as before."""
        now = time.monotonic()
        if (code and code not in UNAVAILABLE_CODES) or now - failed_at >= self.backoff.unavailable_for:
            return False
        if self._answered_at is None or self._answered_at > failed_at + POLL_UNAVAILABLE:
            return False  # never reached (a wrong address), or up for others since: this request's own failure
        if not self._waiting.is_set():  # once per outage, whichever request meets it first
            self._waiting.set()
            log.warning("the API server at %s is unavailable (%s): waiting up to %.0fs for it to come back",
                        self.host, error, self.backoff.unavailable_for)  # fmt: skip
        return True

    def _delay(self, attempt: int) -> float:
        """Exponential backoff while the retries last; then a try about every POLL_UNAVAILABLE seconds."""
        if attempt < self.backoff.max_retries:
            return self.backoff.delay(attempt)
        return spread(POLL_UNAVAILABLE)

    def _came_back(self, seconds: float) -> None:
        with self._stats_lock:
            self.stats.unavailable_seconds = max(self.stats.unavailable_seconds, seconds)
        if self._waiting.is_set():
            self._waiting.clear()
            log.warning("the API server at %s answers again (away for about %.0fs)", self.host, seconds)

    def _count(self, throttled: float, retried: bool) -> None:
        with self._stats_lock:
            self.stats.requests += 1
            self.stats.retries += int(retried)
            self.stats.throttled_seconds += throttled

    def close(self) -> None:
        self.pool.clear()


def warning_texts(values: Iterable[str]) -> list[str]:
    """The warnings in Warning header values (`299 - "unknown field \\"spec.foo\\""`), read as client-go reads
    them: code 299 (the API server's, e.g. unknown fields, deprecated APIs) with a text; escapes undone."""
    return [
        _QUOTED_PAIR.sub(r"\1", text)
        for value in values
        for code, text in _WARNING_VALUE.findall(value)
        if code == "299" and text
    ]


def _retry_after(value: str | None) -> float | None:
    if not value:
        return None
    try:
        return max(0.0, float(value))
    except ValueError:
        return None


def api_error(req: Request, code: int, data: bytes, retry_after: str | None = None) -> KubeApiError:
    """Turn an error response into a KubeApiError carrying the server's Status and Retry-After."""
    status: dict[str, Any] = {}
    try:
        parsed = orjson.loads(data)
        if isinstance(parsed, dict):
            status = parsed
    except orjson.JSONDecodeError:
        pass
    reason = str(status.get("reason") or "")
    message = str(status.get("message") or data[:200].decode("utf-8", "replace").strip() or f"HTTP {code}")
    text = f"{req.method} {req.path}: {message} ({code} {reason})".rstrip()
    return KubeApiError.of(text, code, reason, status, _retry_after(retry_after))


def rejected_error(source: CredentialSource, refreshed: bool) -> KubeApiError:
    """The one-line error for credentials the API server rejects (after refreshing them, if it could)."""
    after = f" even after {source.refresh_action}" if refreshed else ""
    message = f"the API server rejected the credentials from {source.description} (401 Unauthorized){after}"
    return KubeApiError.of(message, 401, "Unauthorized")


def load_transport(
    kubeconfig: str | None = None, context: str | None = None, impersonate: str = "", **kwargs: Any
) -> KubeTransport:
    """A transport to the kubeconfig's (or the pod's) cluster; acting as `impersonate` when given."""
    config = load(kubeconfig, context)
    if impersonate:
        config = dataclasses.replace(config, impersonate=impersonate)
    return KubeTransport(config, **kwargs)
