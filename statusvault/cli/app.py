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
from statusvault.progress import Progress
from statusvault.storage import ObjectStore, S3Options, open_store


@dataclasses.dataclass
class App:
    kubeconfig: str | None = None
    context: str | None = None
    debug: bool = False
    log_format: str = "text"
    _client: KubeClient | None = None
    _discovery: Discovery | None = None
    _closers: list[Callable[[], Any]] = dataclasses.field(default_factory=list)

    def worker_context(self) -> str | None:
        """The context worker processes load: the one this process uses, by name."""
        from statusvault.kube.kubeconfig import current_context

        return self.context or current_context(self.kubeconfig)

    def client(self, pool_size: int = 16, qps: float = 0.0, burst: int = 100) -> KubeClient:
        if self._client is None:
            transport = load_transport(self.kubeconfig, self.context, pool_size=pool_size, qps=qps, burst=burst)
            self._client = KubeClient(transport)
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
        if sys.stderr.isatty() and self.log_format == "text":
            bar = RichProgress()
            self._closers.append(bar.close)
            return bar
        return LogProgress()

    def close(self) -> None:
        for close in reversed(self._closers):
            close()
        self._closers.clear()
