"""A LIST page as the API server serves it: etcd's key order, `limit`, continue tokens that expire once their
resourceVersion is compacted away (410), `remainingItemCount`, metadata-only answers. Pure.

Pages are cut from the objects as they are now, not from the first page's snapshot: a test that changes
objects mid-LIST sees the change on a later page (the real server would not)."""

from __future__ import annotations

import base64
import copy
import dataclasses
from typing import Any

import orjson

from statusvault.kube.transport import METADATA_LIST
from statusvault.model import KubeObject
from statusvault.vocabulary.labels import parse_selector
from tests.fake.faults import status_error

EXPIRED = (
    "The provided continue parameter is too old to display a consistent list result. "
    "You can start a new list without the continue parameter."
)


@dataclasses.dataclass(frozen=True)
class Token:
    rv: int  # the first page's resourceVersion
    after: str  # the last key served
    page: int  # the number of the page it asks for (0: the first)

    def encode(self) -> str:
        return base64.urlsafe_b64encode(orjson.dumps(dataclasses.asdict(self))).decode()

    @classmethod
    def decode(cls, text: str) -> Token | None:
        return cls(**orjson.loads(base64.urlsafe_b64decode(text))) if text else None


def sort_key(obj: KubeObject) -> str:
    """etcd's key order: `namespace/name`."""
    meta = obj.get("metadata") or {}
    ns = meta.get("namespace")
    return f"{ns}/{meta.get('name', '')}" if ns else str(meta.get("name", ""))


def check_token(token: Token | None, compacted: int, path: str) -> None:
    if token is not None and token.rv < compacted:
        raise status_error("GET", path, 410, EXPIRED, "Expired")


def page(objects: list[KubeObject], params: dict[str, str], accept: str, revision: int, path: str) -> dict[str, Any]:
    """One page of `objects` (the collection's, any order) for the request's params."""
    token = Token.decode(params.get("continue", ""))
    selector = params.get("labelSelector", "")
    matches = parse_selector(selector)
    items = sorted((o for o in objects if matches((o.get("metadata") or {}).get("labels") or {})), key=sort_key)
    if token is not None:
        items = [o for o in items if sort_key(o) > token.after]
    limit = int(params.get("limit") or 0) or len(items) or 1
    served, rest = items[:limit], items[limit:]
    rv = token.rv if token is not None else revision
    meta: dict[str, Any] = {"resourceVersion": str(rv)}
    if rest:
        meta["continue"] = Token(rv, sort_key(served[-1]), (token.page if token else 0) + 1).encode()
        if not selector:  # the server cannot count what a selector would take
            meta["remainingItemCount"] = len(rest)
    if accept == METADATA_LIST:
        return {"kind": "PartialObjectMetadataList", "metadata": meta, "items": [_metadata(o) for o in served]}
    return {"kind": "List", "apiVersion": "v1", "metadata": meta, "items": copy.deepcopy(served)}


def _metadata(obj: KubeObject) -> KubeObject:
    return {"kind": "PartialObjectMetadata", "metadata": copy.deepcopy(obj["metadata"])}


def page_number(params: dict[str, str]) -> int:
    token = Token.decode(params.get("continue", ""))
    return token.page if token is not None else 0
