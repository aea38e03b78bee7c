"""Typed verbs over the transport: paginated LIST, GET, create, status writes, patches. Raw dicts only."""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any

import orjson

from statusvault.errors import Gone, NotFound
from statusvault.kube.transport import JSON, METADATA_LIST, KubeTransport, Request
from statusvault.kube.watch import WatchEvent, watch_events
from statusvault.model import KubeObject, ResourceType

FIELD_MANAGER = "statusvault"


def _write_params(dry_run: bool, manager: str) -> tuple[tuple[str, str], ...]:
    """Write parameters: the field manager (managedFields then say who wrote), and dryRun when asked."""
    return (("fieldManager", manager), ("dryRun", "All")) if dry_run else (("fieldManager", manager),)


def paginate(
    request_json: Callable[[Request], Any],
    rt: ResourceType,
    namespace: str | None,
    selector: str,
    limit: int,
    accept: str = JSON,
) -> Iterator[list[KubeObject]]:
    """Yield pages of a LIST following `metadata.continue`; the next page is fetched while the caller works.

    An expired continue token (410 Gone) restarts the list and skips what was already yielded, using the key
    order the API server lists in. accept=METADATA_LIST lists metadata only. The one paginator: the tests'
    in-memory API server pages through it too.
    """
    last_key: str | None = None
    token = ""
    # Not a with-block: this generator may be finalized by the garbage collector anywhere, and joining
    # a thread there can deadlock; the prefetch thread ends by itself once its one request is answered.
    prefetch = ThreadPoolExecutor(1, thread_name_prefix="list-prefetch")

    def fetch(token: str) -> Future[Any]:
        return prefetch.submit(request_json, _page_request(rt, namespace, selector, limit, token, accept))

    try:
        pending = fetch(token)
        while True:
            try:
                page = pending.result()
            except Gone:
                if not token:
                    raise
                token = ""  # restart from a fresh snapshot
                pending = fetch(token)
                continue
            token = (page.get("metadata") or {}).get("continue") or ""
            if token:
                pending = fetch(token)
            items: list[KubeObject] = page.get("items") or []
            if last_key is not None:
                items = [o for o in items if _sort_key(o) > last_key]
            if items:
                last_key = _sort_key(items[-1])
                for obj in items:  # LIST items omit kind/apiVersion
                    obj.setdefault("kind", rt.kind)
                    obj.setdefault("apiVersion", rt.api_version)
                yield items
            if not token:
                return
    finally:
        prefetch.shutdown(wait=False, cancel_futures=True)


def _page_request(
    rt: ResourceType, namespace: str | None, selector: str, limit: int, token: str, accept: str = JSON
) -> Request:
    """One page of a LIST (pure)."""
    params: list[tuple[str, str]] = [("limit", str(limit))]
    if selector:
        params.append(("labelSelector", selector))
    if token:
        params.append(("continue", token))
    return Request("GET", rt.path(namespace), tuple(params), accept=accept)


def metadata_of(pages: Iterator[list[KubeObject]]) -> Iterator[dict[str, Any]]:
    """Each listed object's metadata; nothing when the resource is not served (404)."""
    try:
        for page in pages:
            yield from ((o.get("metadata") or {}) for o in page)
    except NotFound:
        pass


def _sort_key(obj: KubeObject) -> str:
    """The order etcd returns a LIST in: by `namespace/name`."""
    meta = obj.get("metadata") or {}
    ns = meta.get("namespace")
    return f"{ns}/{meta.get('name', '')}" if ns else str(meta.get("name", ""))


class ListVerbs:
    """The LIST verbs, derived from `request_json` alone: the client and the tests' fake server share them."""

    def request_json(self, req: Request) -> Any:
        raise NotImplementedError

    def list_pages(
        self,
        rt: ResourceType,
        namespace: str | None = None,
        label_selector: str = "",
        limit: int = 500,
        accept: str = JSON,
    ) -> Iterator[list[KubeObject]]:
        return paginate(self.request_json, rt, namespace, label_selector, limit, accept)

    def list_metadata(
        self, rt: ResourceType, namespace: str | None, selector: str = "", limit: int = 1000
    ) -> Iterator[dict[str, Any]]:
        """Each existing object's metadata, from a metadata-only LIST; nothing when the resource is not served."""
        return metadata_of(self.list_pages(rt, namespace, selector, limit, accept=METADATA_LIST))

    def list_names(self, rt: ResourceType, namespace: str | None, limit: int = 1000, selector: str = "") -> set[str]:
        """Names of the existing objects; empty when the resource is not served."""
        return {meta.get("name", "") for meta in self.list_metadata(rt, namespace, selector, limit)}


class KubeClient(ListVerbs):
    """The verbs statusvault needs, over plain JSON dicts."""

    def __init__(self, transport: KubeTransport):
        self.transport = transport

    def impersonating(self, user: str) -> KubeClient:
        """The same client acting as `user` (Impersonate-User): what it may do is that user's to decide."""
        return KubeClient(self.transport.impersonating(user))

    @property
    def server(self) -> str:
        return self.transport.host

    def request_json(self, req: Request, warnings: list[str] | None = None) -> Any:
        return orjson.loads(self.transport.send(req, warnings))

    def get_path(self, path: str) -> Any:
        return self.request_json(Request("GET", path))

    def server_version(self) -> dict[str, Any]:
        version: dict[str, Any] = self.get_path("/version")
        return version

    def watch(
        self, rt: ResourceType, namespace: str | None, selector: str, rv: str, timeout: int = 300
    ) -> Iterator[WatchEvent]:
        return watch_events(self.transport, rt, namespace, selector, rv, timeout)

    def get(self, rt: ResourceType, namespace: str | None, name: str) -> KubeObject | None:
        """GET one object; None when it does not exist."""
        try:
            obj: KubeObject = self.get_path(rt.path(namespace, name))
        except NotFound:
            return None
        return obj

    def create(
        self,
        rt: ResourceType,
        namespace: str | None,
        body: KubeObject,
        dry_run: bool = False,
        manager: str = FIELD_MANAGER,
        warnings: list[str] | None = None,
    ) -> KubeObject:
        """POST `body`; the server's Warning texts go to `warnings` when given (as for replace and patch)."""
        req = Request("POST", rt.path(namespace), _write_params(dry_run, manager), orjson.dumps(body))
        created: KubeObject = self.request_json(req, warnings)
        return created

    def replace(
        self,
        rt: ResourceType,
        namespace: str | None,
        name: str,
        body: KubeObject,
        dry_run: bool = False,
        sub: str | None = None,
        manager: str = FIELD_MANAGER,
        warnings: list[str] | None = None,
    ) -> KubeObject:
        req = Request("PUT", rt.path(namespace, name, sub), _write_params(dry_run, manager), orjson.dumps(body))
        replaced: KubeObject = self.request_json(req, warnings)
        return replaced

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
        manager: str = FIELD_MANAGER,
        warnings: list[str] | None = None,
    ) -> KubeObject:
        query = _write_params(dry_run, manager) + params
        req = Request("PATCH", rt.path(namespace, name, sub), query, orjson.dumps(patch), content_type)
        patched: KubeObject = self.request_json(req, warnings)
        return patched

    def delete(self, rt: ResourceType, namespace: str | None, name: str) -> None:
        with contextlib.suppress(NotFound):  # gone already
            self.transport.send(Request("DELETE", rt.path(namespace, name), body=b"{}", content_type=JSON))
