"""An in-memory API server for fast engine tests: the behaviour a restore depends on, nothing more.

Modelled: `.status` dropped on create (and on update) where the type has the subresource; `/status` writes
that take only the status; `409 AlreadyExists`; `resourceVersion` conflicts (409) and JSON-patch `test`
failures (422); managedFields naming each writer's field manager (none for a body with nothing to own);
server-side defaults and pruning (a hook); Warning headers (by name). Faults: an answer lost after the server
acted (the resent create meets 409 AlreadyExists), another writer winning a race. Not modelled: garbage
collection, admission, watches.
"""

from __future__ import annotations

import copy
import itertools
import threading
from collections.abc import Callable, Iterator
from typing import Any

import jsonpatch

from statusvault.errors import KubeApiError
from statusvault.model import KubeObject, ResourceType

Key = tuple[str, str, str]  # (qualified, namespace, name)


def _error(code: int, reason: str, what: str) -> KubeApiError:
    return KubeApiError(f"{what}: {reason} ({code})", code, reason, {"code": code, "reason": reason})


class FakeKube:
    server = "https://fake.invalid"

    def __init__(self, defaults: Callable[[KubeObject], None] = lambda obj: None):
        self.objects: dict[Key, KubeObject] = {}
        self.defaults = defaults  # a schema default or a mutating webhook: changes what is stored
        self.lose_create_answer: set[str] = set()  # names whose create succeeds but whose answer is lost
        self.race_status_write: set[str] = set()  # names another writer updates just before our status PUT
        self.race_patch: set[str] = set()  # names another writer updates just before our patch
        self.warn: dict[str, str] = {}  # names whose writes are answered with this Warning (a deprecated version)
        self.on_create: Callable[[str], None] = lambda name: None
        self.calls: list[tuple[str, str]] = []  # (verb, name)
        self._rv = itertools.count(1)
        self._uid = itertools.count(1)
        self._lock = threading.Lock()

    # --- reading ---

    def get(self, rt: ResourceType, namespace: str | None, name: str) -> KubeObject | None:
        with self._lock:
            obj = self.objects.get((rt.qualified, namespace or "", name))
            return copy.deepcopy(obj) if obj is not None else None

    def get_path(self, path: str) -> Any:
        raise NotImplementedError(path)

    def list_pages(
        self,
        rt: ResourceType,
        namespace: str | None = None,
        label_selector: str = "",
        limit: int = 500,
        accept: str = "",
    ) -> Iterator[list[KubeObject]]:
        with self._lock:
            items = [
                copy.deepcopy(o)
                for (q, ns, _), o in sorted(self.objects.items())
                if q == rt.qualified and ns == (namespace or ns)
            ]
        for i in range(0, len(items), limit):
            yield items[i : i + limit]

    def list_metadata(
        self, rt: ResourceType, namespace: str | None, selector: str = "", limit: int = 1000
    ) -> Iterator[dict[str, Any]]:
        for page in self.list_pages(rt, namespace, selector, limit):
            yield from (o["metadata"] for o in page)

    def list_names(self, rt: ResourceType, namespace: str | None, limit: int = 1000, selector: str = "") -> set[str]:
        return {m["name"] for m in self.list_metadata(rt, namespace, selector, limit)}

    # --- writing ---

    def create(
        self,
        rt: ResourceType,
        namespace: str | None,
        body: KubeObject,
        dry_run: bool = False,
        manager: str = "x",
        warnings: list[str] | None = None,
    ) -> KubeObject:
        name = body["metadata"]["name"]
        self.calls.append(("create", name))
        self.on_create(name)
        key = (rt.qualified, namespace or "", name)
        with self._lock:
            if key in self.objects:
                raise _error(409, "AlreadyExists", f"{rt.qualified} {name}")
            obj = copy.deepcopy(body)
            if rt.has_status:
                obj.pop("status", None)
            self.defaults(obj)
            meta = obj["metadata"]
            meta.update(uid=f"uid-{next(self._uid)}", resourceVersion=str(next(self._rv)), generation=1)
            meta["creationTimestamp"] = "2099-01-01T00:00:00Z"
            _own(meta, obj, manager)
            if not dry_run:
                self.objects[key] = obj
            result = copy.deepcopy(obj)
        if name in self.lose_create_answer:
            self.lose_create_answer.discard(name)
            raise _error(409, "AlreadyExists", f"{rt.qualified} {name} (the resent POST)")
        return self._answer(name, result, warnings)

    def replace(
        self,
        rt: ResourceType,
        namespace: str | None,
        name: str,
        body: KubeObject,
        dry_run: bool = False,
        sub: str | None = None,
        manager: str = "x",
        warnings: list[str] | None = None,
    ) -> KubeObject:
        self.calls.append((f"replace/{sub or ''}", name))
        if sub == "status" and name in self.race_status_write:
            self.race_status_write.discard(name)
            self._touch(rt, namespace, name)
        key = (rt.qualified, namespace or "", name)
        with self._lock:
            live = self.objects.get(key)
            if live is None:
                raise _error(404, "NotFound", name)
            if body["metadata"].get("resourceVersion") != live["metadata"]["resourceVersion"]:
                raise _error(409, "Conflict", f"{name}: the object has been modified")
            new = copy.deepcopy(live)
            if sub == "status":
                new["status"] = copy.deepcopy(body.get("status"))
            else:
                new = {**copy.deepcopy(body), "metadata": {**live["metadata"], **body["metadata"]}}
                if rt.has_status:
                    new["status"] = copy.deepcopy(live.get("status"))
                    new.pop("status") if new["status"] is None else None
            self.defaults(new)
            new["metadata"]["resourceVersion"] = str(next(self._rv))
            _own(new["metadata"], new, manager)
            if not dry_run:
                self.objects[key] = new
            return self._answer(name, copy.deepcopy(new), warnings)

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
        manager: str = "x",
        warnings: list[str] | None = None,
    ) -> KubeObject:
        self.calls.append(("patch", name))
        if name in self.race_patch:
            self.race_patch.discard(name)
            self._touch(rt, namespace, name)
        key = (rt.qualified, namespace or "", name)
        with self._lock:
            live = self.objects.get(key)
            if live is None:
                raise _error(404, "NotFound", name)
            try:
                new = jsonpatch.apply_patch(live, patch)
            except (jsonpatch.JsonPatchException, jsonpatch.JsonPointerException) as e:
                raise _error(422, "Invalid", f"{name}: {e}") from e
            self.defaults(new)
            new["metadata"]["resourceVersion"] = str(next(self._rv))
            _own(new["metadata"], new, manager)
            if not dry_run:
                self.objects[key] = new
            return self._answer(name, copy.deepcopy(new), warnings)

    def _answer(self, name: str, obj: KubeObject, warnings: list[str] | None) -> KubeObject:
        if warnings is not None and name in self.warn:
            warnings.append(self.warn[name])
        return obj

    def delete(self, rt: ResourceType, namespace: str | None, name: str) -> None:
        with self._lock:
            self.objects.pop((rt.qualified, namespace or "", name), None)

    def put(self, rt: ResourceType, obj: KubeObject, manager: str = "someone-else") -> None:
        """Another writer's object, as it would be stored."""
        self.create(rt, obj["metadata"].get("namespace"), obj, manager=manager)

    def _touch(self, rt: ResourceType, namespace: str | None, name: str) -> None:
        """Another writer's update: a new resourceVersion."""
        with self._lock:
            live = self.objects[(rt.qualified, namespace or "", name)]
            live["metadata"]["resourceVersion"] = str(next(self._rv))
            live.setdefault("metadata", {}).setdefault("annotations", {})["touched"] = "by another writer"


def _own(meta: dict[str, Any], obj: KubeObject, manager: str) -> None:
    """Name the writer in managedFields, unless it owns nothing (as the API server does)."""
    owns = set(obj) - {"apiVersion", "kind", "metadata"} or set(meta) - {
        "name",
        "namespace",
        "uid",
        "resourceVersion",
        "generation",
        "creationTimestamp",
        "managedFields",
    }
    entries = [e for e in meta.get("managedFields") or [] if e["manager"] != manager]
    if owns:
        entries.append({"manager": manager, "operation": "Update"})
    if entries:
        meta["managedFields"] = entries
