"""The verbs the engines use, as a protocol: the real KubeClient and the tests' in-memory fake both fit."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any, Protocol

from statusvault.kube.transport import Request
from statusvault.kube.watch import WatchEvent
from statusvault.model import KubeObject, ResourceType


class KubeApi(Protocol):
    @property
    def server(self) -> str:
        """The API server's URL (part of a restore's identity)."""
        ...

    def get(self, rt: ResourceType, namespace: str | None, name: str) -> KubeObject | None: ...

    def get_path(self, path: str) -> Any: ...

    def request_json(self, req: Request) -> Any:
        """Any request, its JSON answer: what the typed verbs do not cover (a one-item LIST's count, a DELETE
        with preconditions)."""
        ...

    def server_version(self) -> dict[str, Any]: ...

    def watch(
        self, rt: ResourceType, namespace: str | None, selector: str, rv: str, timeout: int = 300
    ) -> Iterator[WatchEvent]:
        """Events after `rv` until the server ends the WATCH; KubeApiError(410) when `rv` is too old."""
        ...

    def create(
        self,
        rt: ResourceType,
        namespace: str | None,
        body: KubeObject,
        dry_run: bool = False,
        manager: str = ...,
        warnings: list[str] | None = None,
    ) -> KubeObject:
        """Writes (create, replace, patch) add the texts of the server's Warning headers to `warnings`, if given."""
        ...

    def replace(
        self,
        rt: ResourceType,
        namespace: str | None,
        name: str,
        body: KubeObject,
        dry_run: bool = False,
        sub: str | None = None,
        manager: str = ...,
        warnings: list[str] | None = None,
    ) -> KubeObject: ...

    def patch(
        self,
        rt: ResourceType,
        namespace: str | None,
        name: str,
        patch: Any,
        content_type: str,
        dry_run: bool = False,
        sub: str | None = None,
        params: tuple[tuple[str, str], ...] = (),
        manager: str = ...,
        warnings: list[str] | None = None,
    ) -> KubeObject: ...

    def delete(self, rt: ResourceType, namespace: str | None, name: str) -> None: ...

    def list_pages(
        self,
        rt: ResourceType,
        namespace: str | None = None,
        label_selector: str = "",
        limit: int = 500,
        accept: str = ...,
    ) -> Iterator[list[KubeObject]]: ...

    def list_metadata(
        self, rt: ResourceType, namespace: str | None, selector: str = "", limit: int = 1000
    ) -> Iterator[dict[str, Any]]: ...

    def list_names(
        self, rt: ResourceType, namespace: str | None, limit: int = 1000, selector: str = ""
    ) -> set[str]: ...
