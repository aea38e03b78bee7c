"""WATCH one collection over raw JSON: events as plain dicts, bookmarks included, 410 Gone as KubeApiError."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

import orjson

from statusvault.errors import KubeApiError, KubeConnectionError
from statusvault.kube.transport import KubeTransport, Request
from statusvault.model import KubeObject, ResourceType

if TYPE_CHECKING:
    from statusvault.kube.api import KubeApi


@dataclasses.dataclass(frozen=True, slots=True)
class WatchEvent:
    type: str  # ADDED | MODIFIED | DELETED | BOOKMARK
    object: KubeObject

    @property
    def resource_version(self) -> str:
        return str((self.object.get("metadata") or {}).get("resourceVersion") or "")


def watch_request(rt: ResourceType, namespace: str | None, selector: str, rv: str, timeout: int) -> Request:
    """The WATCH request (pure): from `rv`, with bookmarks, ended by the server after `timeout` seconds."""
    params = [("watch", "1"), ("allowWatchBookmarks", "true"), ("resourceVersion", rv)]
    params.append(("timeoutSeconds", str(timeout)))
    if selector:
        params.append(("labelSelector", selector))
    return Request("GET", rt.path(namespace), tuple(params))


def collection_version(client: KubeApi, rt: ResourceType, namespace: str | None, selector: str) -> str:
    """The collection's current resourceVersion (a one-item LIST): a WATCH from it misses nothing after."""
    params: list[tuple[str, str]] = [("limit", "1")]
    if selector:
        params.append(("labelSelector", selector))
    page: dict[str, Any] = client.request_json(Request("GET", rt.path(namespace), tuple(params)))
    return str((page.get("metadata") or {}).get("resourceVersion") or "")


def watch_events(
    transport: KubeTransport, rt: ResourceType, namespace: str | None, selector: str, rv: str, timeout: int = 300
) -> Iterator[WatchEvent]:
    """Events after `rv` until the server ends the WATCH; raises KubeApiError(410) when `rv` is too old (what
    KubeClient.watch serves)."""
    req = watch_request(rt, namespace, selector, rv, timeout)
    stream = transport.open_stream(req, read_timeout=timeout + 30.0)
    try:
        for line in stream.lines:
            event = orjson.loads(line)
            kind, obj = event.get("type"), event.get("object") or {}
            if kind == "ERROR":
                code = int(obj.get("code") or 0)
                raise KubeApiError.of(
                    f"WATCH {req.path}: {obj.get('message', '')} ({code})", code, obj.get("reason", "")
                )
            obj.setdefault("kind", rt.kind)
            obj.setdefault("apiVersion", rt.api_version)
            yield WatchEvent(str(kind), obj)
    except OSError as e:
        raise KubeConnectionError(f"WATCH {req.path} broke off: {type(e).__name__}: {e}") from e
    finally:
        stream.close()
