"""The one factory the commands get their dependencies from (clients, discovery, store, progress), built by the
`cli` group from the global options. It is not injectable: the CLI tests run the real commands against a real API
server and store."""

from __future__ import annotations

import dataclasses
import sys
from collections.abc import Callable
from typing import Any

from statusvault.cli.output import LogProgress, RichProgress
from statusvault.kube.client import KubeClient
from statusvault.kube.discovery import Discovery, discover
from statusvault.kube.transport import load_transport
from statusvault.runtime.progress import NullProgress, Progress
from statusvault.storage import ObjectStore, S3Options, open_store


@dataclasses.dataclass
class App:
    kubeconfig: str | None = None
    context: str | None = None
    debug: bool = False
    log_format: str = "text"
    quiet: bool = False  # no progress bar (the library: nothing prints)
    _client: KubeClient | None = None
    _settings: tuple[int, float, int] = (0, 0.0, 0)  # the client's pool size, QPS and burst
    _discovery: Discovery | None = None
    _closers: list[Callable[[], Any]] = dataclasses.field(default_factory=list)

    def worker_context(self) -> str | None:
        """The context worker processes load: the one this process uses, by name."""
        from statusvault.kube.kubeconfig import current_context

        return self.context or current_context(self.kubeconfig)

    def client(self, pool_size: int | None = None, qps: float | None = None, burst: int | None = None) -> KubeClient:
        """The client of the global options' cluster. Asked without settings, the one made so far (or one with the
        defaults); asked with a pool size, QPS or burst, one that has them: never a client made with others."""
        if self._client is not None and (pool_size, qps, burst) == (None, None, None):
            return self._client
        settings = (
            16 if pool_size is None else pool_size,
            0.0 if qps is None else qps,
            100 if burst is None else burst,
        )
        if self._client is None or settings != self._settings:
            transport = load_transport(
                self.kubeconfig, self.context, pool_size=settings[0], qps=settings[1], burst=settings[2]
            )
            self._client, self._settings = KubeClient(transport), settings
            self._closers.append(transport.close)
        return self._client

    def client_of(self, kubeconfig: str | None, context: str | None, pool_size: int = 16) -> KubeClient:
        """A client of a cluster other than the global options' (a move's source or target)."""
        transport = load_transport(kubeconfig, context, pool_size=pool_size)
        self._closers.append(transport.close)
        return KubeClient(transport)

    def discovery(self, refresh: bool = False) -> Discovery:
        if self._discovery is None or refresh:
            self._discovery = discover(self.client())
        return self._discovery

    def store(self, url: str | None, s3: S3Options | None = None) -> ObjectStore:
        return open_store(url, s3)

    def progress(self) -> Progress:
        if self.quiet:
            return NullProgress()
        if sys.stderr.isatty() and self.log_format == "text":
            bar = RichProgress()
            self._closers.append(bar.close)
            return bar
        return LogProgress()

    def close(self) -> None:
        for close in reversed(self._closers):
            close()
        self._closers.clear()
