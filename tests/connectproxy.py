"""A real HTTP CONNECT proxy on loopback, for the tests of proxied connections: it tunnels bytes to the target it
is asked for (names it maps, such as `kube.test`, resolve only here), records every target, and can demand
Basic credentials."""

from __future__ import annotations

import base64
import contextlib
import socket
import socketserver
import threading
from collections.abc import Iterator


class ConnectProxy:
    def __init__(self, hosts: dict[str, str] | None = None, credentials: str = ""):
        self.hosts = hosts or {}  # name -> address: what the proxy resolves that the client cannot
        self.credentials = credentials  # "user:password" the proxy demands, "" for none
        self.targets: list[str] = []  # every CONNECT target it was asked for, granted or not
        proxy = self

        class Handler(socketserver.StreamRequestHandler):
            def handle(self) -> None:
                proxy._handle(self.connection, self.rfile)

        self.server = socketserver.ThreadingTCPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"

    def _handle(self, client: socket.socket, rfile) -> None:  # type: ignore[no-untyped-def]
        request = rfile.readline().decode("latin-1").split()
        headers = {}
        while (line := rfile.readline()) not in (b"\r\n", b"\n", b""):
            name, _, value = line.decode("latin-1").partition(":")
            headers[name.strip().lower()] = value.strip()
        if len(request) < 2 or request[0] != "CONNECT":
            client.sendall(b"HTTP/1.1 405 Method Not Allowed\r\n\r\n")
            return
        self.targets.append(request[1])
        wanted = "Basic " + base64.b64encode(self.credentials.encode()).decode()
        if self.credentials and headers.get("proxy-authorization") != wanted:
            client.sendall(b"HTTP/1.1 407 Proxy Authentication Required\r\nContent-Length: 0\r\n\r\n")
            return
        host, _, port = request[1].rpartition(":")
        try:
            upstream = socket.create_connection((self.hosts.get(host, host), int(port)), timeout=10)
        except OSError:
            client.sendall(b"HTTP/1.1 502 Bad Gateway\r\nContent-Length: 0\r\n\r\n")
            return
        client.sendall(b"HTTP/1.1 200 Connection established\r\n\r\n")
        pump = threading.Thread(target=_pump, args=(upstream, client), daemon=True)
        pump.start()
        _pump(client, upstream)
        pump.join(timeout=5)

    @contextlib.contextmanager
    def running(self) -> Iterator[ConnectProxy]:
        thread = threading.Thread(target=self.server.serve_forever, args=(0.05,), daemon=True)
        thread.start()
        try:
            yield self
        finally:
            self.server.shutdown()
            self.server.server_close()


def _pump(src: socket.socket, dst: socket.socket) -> None:
    try:
        while data := src.recv(65536):
            dst.sendall(data)
    except OSError:
        pass
    finally:
        with contextlib.suppress(OSError):
            dst.shutdown(socket.SHUT_WR)
