"""KubeClient's paginated LIST: the one paginator, its 410 Gone restart, metadata-only listing."""

from __future__ import annotations

import json
import threading
from typing import Any

import pytest

from statusvault.errors import KubeApiError
from statusvault.kube.client import KubeClient
from statusvault.kube.transport import METADATA_LIST, Request
from tests.builders import resource_type

KC = resource_type("xyz.example.com", "KubernetesCluster")


class PagedTransport:
    """Serves `objects` in pages of `limit`; the continue token of page `expire_at` has expired (410)."""

    host = "https://fake.invalid"

    def __init__(self, names: list[str], expire_at: int | None = None, missing: bool = False):
        self.names = sorted(names)
        self.expire_at = expire_at
        self.missing = missing
        self.requests: list[Request] = []

    def send(self, req: Request, warnings: list[str] | None = None) -> bytes:
        self.requests.append(req)
        if self.missing:
            raise KubeApiError.of("not found", 404, "NotFound")
        params = dict(req.params)
        limit, start = int(params["limit"]), int(params.get("continue") or 0)
        if start and start == self.expire_at:
            self.expire_at = None
            raise KubeApiError.of("the continue token has expired", 410, "Expired")
        page = self.names[start : start + limit]
        body: dict[str, Any] = {"items": [{"metadata": {"name": n, "namespace": "ns"}} for n in page]}
        if start + limit < len(self.names):
            body["metadata"] = {"continue": str(start + limit)}
        return json.dumps(body).encode()


def test_pages_follow_continue_and_set_kind():
    transport = PagedTransport([f"o{i}" for i in range(5)])
    pages = list(KubeClient(transport).list_pages(KC, "ns", limit=2))  # type: ignore[arg-type]
    assert [[o["metadata"]["name"] for o in p] for p in pages] == [["o0", "o1"], ["o2", "o3"], ["o4"]]
    assert {o["kind"] for p in pages for o in p} == {"KubernetesCluster"}


def test_an_expired_continue_token_restarts_the_list_and_skips_what_was_yielded():
    transport = PagedTransport([f"o{i}" for i in range(5)], expire_at=4)
    names = [o["metadata"]["name"] for p in KubeClient(transport).list_pages(KC, "ns", limit=2) for o in p]  # type: ignore[arg-type]
    assert names == ["o0", "o1", "o2", "o3", "o4"], "each object once, in order"
    assert [dict(r.params).get("continue", "") for r in transport.requests] == ["", "2", "4", "", "2", "4"]


def test_metadata_listing_asks_for_partial_objects_and_treats_unserved_as_empty():
    transport = PagedTransport(["a", "b"])
    assert KubeClient(transport).list_names(KC, "ns") == {"a", "b"}  # type: ignore[arg-type]
    assert {r.accept for r in transport.requests} == {METADATA_LIST}
    assert KubeClient(PagedTransport([], missing=True)).list_names(KC, "ns") == set()  # type: ignore[arg-type]


def test_a_first_page_410_is_not_retried_forever():
    transport = PagedTransport(["a"])
    transport.send = lambda req, warnings=None: (_ for _ in ()).throw(KubeApiError.of("gone", 410, "Expired"))  # type: ignore[method-assign]
    with pytest.raises(KubeApiError):
        list(KubeClient(transport).list_pages(KC, "ns"))  # type: ignore[arg-type]


def test_dropping_a_pager_never_waits_for_its_prefetch():
    """The pager is a generator: the garbage collector may finalize it anywhere, where a join can hang."""
    release = threading.Event()
    transport = PagedTransport([f"o{i}" for i in range(4)])
    serve = transport.send

    def slow(req: Request, warnings: list[str] | None = None) -> bytes:
        if dict(req.params).get("continue"):
            release.wait(10)  # the prefetch of page 2 hangs until the test lets it go
        return serve(req, warnings)

    transport.send = slow  # type: ignore[method-assign]
    pages = KubeClient(transport).list_pages(KC, "ns", limit=2)  # type: ignore[arg-type]
    assert len(next(pages)) == 2
    closer = threading.Thread(target=pages.close)
    closer.start()
    closer.join(5)
    release.set()
    assert not closer.is_alive(), "closing the pager waited for the page being prefetched"
