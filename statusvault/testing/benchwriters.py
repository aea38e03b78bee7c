"""What the writer's thread model costs (`BENCH_ONLY=writers make bench`): the same writes as the Go writer's (POST
an object, decode the answer, PUT its status, decode the answer; PARALLEL in flight) done two ways in Python, each
in a process of its own, alternated:

- threads: PARALLEL threads, each blocking on a TLS socket of its own, as the restore's writer threads do;
- loop: one thread waiting on PARALLEL non-blocking TLS sockets at once (epoll), each answer handled as it comes.

Both build their requests and read their answers with the same few lines (`_Link`), and neither does any of the
restore's own work (planning, the journal, the report, the audit), nor goes through statusvault's transport: the
difference is only what waking a thread per answer costs against one thread woken for whatever is ready
(docs/development/benchmarks.md).

python -m statusvault.testing.benchwriters threads|loop SERVER N PREFIX   # one run; prints {"objects": N}
"""

from __future__ import annotations

import itertools
import os
import select
import socket
import ssl
import statistics
import sys
import threading
from collections.abc import Iterator
from typing import Any
from urllib.parse import urlsplit

import orjson

from statusvault.testing.benchcore import (
    GROUP,
    PARALLEL,
    PLURAL,
    Http,
    cli_figures,
    log,
    make_namespaces,
    objects,
    run_measured,
)
from statusvault.testing.cluster import ADMIN_TOKEN, LocalCluster

MODES = ("threads", "loop")
BASE = f"/apis/{GROUP}/v1"


def _paths(obj: dict[str, Any]) -> tuple[str, str]:
    meta = obj["metadata"]
    collection = f"{BASE}/namespaces/{meta['namespace']}/{PLURAL}"
    return collection, f"{collection}/{meta['name']}/status"


def write_threads(server: str, objs: Iterator[dict[str, Any]]) -> int:
    """PARALLEL threads, each on a blocking TLS socket of its own, with the loop's request and answer code."""
    host, port, context = _target(server)
    netloc = f"{host}:{port}"
    lock, done = threading.Lock(), itertools.count()

    def work() -> None:
        link = _Link.connect(host, port, context, blocking=True)
        chunk = bytearray(65536)
        while True:
            with lock:
                obj = next(objs, None)
            if obj is None:
                return
            collection, status = _paths(obj)
            link.send("POST", collection, orjson.dumps(obj), netloc)
            live = orjson.loads(_answered(link, chunk, 201))
            live["status"] = obj["status"]
            link.send("PUT", status, orjson.dumps(live), netloc)
            orjson.loads(_answered(link, chunk, 200))
            next(done)

    threads = [threading.Thread(target=work) for _ in range(PARALLEL)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return next(done)


def _answered(link: _Link, chunk: bytearray, expected: int) -> bytes:
    """Read from a blocking socket until the whole answer came; its body (the status checked)."""
    while (answer := link.answer()) is None:
        got = link.sock.recv_into(chunk)
        if not got:
            raise RuntimeError("the API server closed a connection")
        link.received += memoryview(chunk)[:got]
    status, body = answer
    if status != expected:
        raise RuntimeError(f"{status} {body[:200]!r}")
    return body


def _target(server: str) -> tuple[str, int, ssl.SSLContext]:
    parts = urlsplit(server)
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    context.check_hostname, context.verify_mode = False, ssl.CERT_NONE
    return parts.hostname or "127.0.0.1", parts.port or 443, context


class _Link:
    """One TLS connection of a writer: the answer's bytes as they come and, in the loop (non-blocking), the object it
    writes and which of its two requests is out."""

    def __init__(self, sock: ssl.SSLSocket, blocking: bool = False):
        self.sock = sock
        self.blocking = blocking
        self.obj: dict[str, Any] = {}
        self.putting = False
        self.received = bytearray()

    @classmethod
    def connect(cls, host: str, port: int, context: ssl.SSLContext, blocking: bool) -> _Link:
        raw = socket.create_connection((host, port))
        raw.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        link = cls(context.wrap_socket(raw), blocking)
        link.sock.setblocking(blocking)
        return link

    def send(self, method: str, path: str, body: bytes, host: str) -> None:
        head = (
            f"{method} {path} HTTP/1.1\r\nHost: {host}\r\nAccept: application/json\r\n"
            f"Content-Type: application/json\r\nAuthorization: Bearer {ADMIN_TOKEN}\r\n"
            f"Content-Length: {len(body)}\r\n\r\n"
        )
        if not self.blocking:
            self.sock.setblocking(True)  # a request of a few KB: sent whole, the socket's buffer takes it
        self.sock.sendall(head.encode() + body)
        if not self.blocking:
            self.sock.setblocking(False)

    def answer(self) -> tuple[int, bytes] | None:
        """The answer's status and body once all of it came (Content-Length or chunked), else None."""
        buf = self.received
        end = buf.find(b"\r\n\r\n")
        if end < 0:
            return None
        head = bytes(buf[:end]).lower()
        at = head.find(b"\r\ncontent-length:")
        if at >= 0:
            stop = head.find(b"\r\n", at + 2)
            length = int(head[at + 17 : stop if stop > 0 else None])
            if len(buf) < end + 4 + length:
                return None
            body, used = bytes(buf[end + 4 : end + 4 + length]), end + 4 + length
        else:  # chunked: the API server's answers above 2 KB
            last = buf.find(b"\r\n0\r\n\r\n", end + 2)
            if last < 0:
                return None
            parts, pos = [], end + 4
            while (size := int(buf[pos : buf.find(b"\r\n", pos)], 16)) > 0:
                start = buf.find(b"\r\n", pos) + 2
                parts.append(bytes(buf[start : start + size]))
                pos = start + size + 2
            body, used = b"".join(parts), last + 7
        status = int(buf[9:12])
        del buf[:used]
        return status, body


def write_loop(server: str, objs: Iterator[dict[str, Any]]) -> int:
    host, port, context = _target(server)
    poller, links, done = select.epoll(), {}, 0
    netloc = f"{host}:{port}"

    def start(link: _Link) -> bool:
        obj = next(objs, None)
        if obj is None:
            return False
        link.obj, link.putting = obj, False
        link.send("POST", _paths(obj)[0], orjson.dumps(obj), netloc)
        return True

    busy = 0
    for _ in range(PARALLEL):
        link = _Link.connect(host, port, context, blocking=False)
        links[link.sock.fileno()] = link
        poller.register(link.sock.fileno(), select.EPOLLIN)
        busy += start(link)
    chunk = bytearray(65536)
    view = memoryview(chunk)
    while busy:
        for fd, _ in poller.poll():
            link = links[fd]
            while True:
                try:
                    got = link.sock.recv_into(chunk)
                except ssl.SSLWantReadError:
                    break
                if not got:
                    raise RuntimeError("the API server closed a connection")
                link.received += view[:got]
                if not link.sock.pending():
                    break
            answer = link.answer()
            if answer is None:
                continue
            status, body = answer
            if not link.putting:
                if status != 201:
                    raise RuntimeError(f"POST: {status} {body[:200]!r}")
                live = orjson.loads(body)
                live["status"] = link.obj["status"]
                link.putting = True
                link.send("PUT", _paths(link.obj)[1], orjson.dumps(live), netloc)
                continue
            if status != 200:
                raise RuntimeError(f"PUT: {status} {body[:200]!r}")
            orjson.loads(body)
            done += 1
            if not start(link):
                busy -= 1
    return done


def measure_writers(cluster: LocalCluster, n: int, rounds: int) -> dict[str, Any]:
    """`rounds` alternated rounds of both modes, n objects each into fresh namespaces: CPU per object and rate."""
    http = Http(cluster.server, PARALLEL)
    runs: dict[str, list[dict[str, float]]] = {mode: [] for mode in MODES}
    for r in range(rounds):
        for mode in MODES if r % 2 == 0 else MODES[::-1]:
            prefix = f"w{mode[0]}{r}"
            make_namespaces(http, prefix)
            log(f"writers round {r + 1}/{rounds}: {mode}")
            argv = [sys.executable, "-m", "statusvault.testing.benchwriters", mode, cluster.server, str(n), prefix]
            run = run_measured(argv, dict(os.environ))
            if orjson.loads(run.out)["objects"] != n:
                raise RuntimeError(f"the {mode} writer did not write {n} objects: {run.out[:200]!r}")
            runs[mode].append(cli_figures(run, n))
    cpu = {mode: [f["cpu_ms_per_object"] for f in figures] for mode, figures in runs.items()}
    ratios = [loop / threads for threads, loop in zip(cpu["threads"], cpu["loop"], strict=True)]
    return {"n": n, "rounds": runs, "loop_over_threads": ratios, "median_ratio": statistics.median(ratios)}


def table(results: dict[str, Any]) -> str:
    lines = [f"writer models, {results['n']} objects, {PARALLEL} in flight (CPU ms/object, objects/s)"]
    for mode in MODES:
        figures = results["rounds"][mode]
        cpu = ", ".join(f"{f['cpu_ms_per_object']:.3f}" for f in figures)
        rate = ", ".join(f"{f['objects_per_s']:.0f}" for f in figures)
        lines.append(f"  {mode:8s} CPU {cpu}   rate {rate}")
    ratios = ", ".join(f"{r:.2f}" for r in results["loop_over_threads"])
    lines.append(f"  loop / threads, per round: {ratios} (median {results['median_ratio']:.2f})")
    return "\n".join(lines)


def main(argv: list[str]) -> int:
    mode, server, n, prefix = argv[0], argv[1], int(argv[2]), argv[3]
    write = write_threads if mode == "threads" else write_loop
    done = write(server, objects(n, prefix))
    print(orjson.dumps({"objects": done}).decode())
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
