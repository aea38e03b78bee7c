"""FakeKube: the in-memory API server. Objects are plain dicts keyed by (qualified, namespace, name); every write
takes the next resourceVersion of one counter and goes into the change log WATCHes read."""

from __future__ import annotations

import copy
import itertools
import threading
import uuid
from collections.abc import Callable, Iterator
from typing import Any

import jsonpatch
import orjson

from statusvault.errors import KubeApiError
from statusvault.kube.client import ListVerbs
from statusvault.kube.discovery import Discovery
from statusvault.kube.transport import Request
from statusvault.kube.watch import WatchEvent
from statusvault.model import KubeObject, ResourceType
from statusvault.vocabulary.kinds import CRDS
from tests.fake import crds, listing
from tests.fake.faults import Faults, not_found, status_error
from tests.fake.paths import Route, route
from tests.fake.watching import ChangeLog

Key = tuple[str, str, str]  # (qualified, namespace, name)
VERSION = {"major": "1", "minor": "36", "gitVersion": "v1.36.0-fake", "platform": "linux/amd64"}


class FakeKube(ListVerbs):
    """list_pages, list_metadata and list_names come from ListVerbs: the real paginator (its 410 restart)
    runs against these pages."""

    server = "https://fake.invalid"
    watch_period = 0.05  # seconds a WATCH lasts here before its closing bookmark (the real server: minutes)

    def __init__(self, defaults: Callable[[KubeObject], None] = lambda obj: None):
        self.objects: dict[Key, KubeObject] = {}
        self.defaults = defaults  # a schema default or a mutating webhook: changes what is stored
        self.lose_create_answer: set[str] = set()  # names whose create succeeds but whose answer is lost
        self.race_status_write: set[str] = set()  # names another writer updates just before our status PUT
        self.race_patch: set[str] = set()  # names another writer updates just before our patch
        self.warn: dict[str, str] = {}  # names whose writes are answered with this Warning (a deprecated version)
        self.calls: list[tuple[str, str]] = []  # (verb, name)
        self.unserved: set[str] = set()  # qualified names whose CRD was deleted: 404 until it is created again
        self._on_list: dict[str, Callable[[int], None]] = {}
        self._before: dict[str, Callable[[str], None]] = {}
        self._uid = itertools.count(1)
        self._server = uuid.uuid4().hex[:8]  # UIDs are unique across servers, as a real cluster's are
        self._lock = threading.Condition()
        self.log = ChangeLog(self._lock)
        self.faults = Faults()

    # --- faults and hooks a test arms ---

    def fail(self, verb: str, rt: ResourceType, code: int, times: int | None = 1, name: str = "") -> None:
        """The next `times` (None: every) `verb` requests on `rt` (on its object `name`, if given) fail with
        `code`, worded as the server words it. Verbs are the server's: get, list, watch, create, update (a
        replace), patch, delete."""
        self.faults.arm(verb, rt.qualified, code, times, name)

    def before(self, verb: str, callback: Callable[[str], None] | None) -> None:
        """Call `callback(name)` before the server acts on each `verb` (create, update, patch, delete) request,
        whatever the resource: another writer's move, or a kill (raise). None removes it."""
        if callback is None:
            self._before.pop(verb, None)
        else:
            self._before[verb] = callback

    def _hook(self, verb: str, name: str) -> None:
        hook = self._before.get(verb)
        if hook is not None:
            hook(name)

    def on_list(self, rt: ResourceType, callback: Callable[[int], None]) -> None:
        """Call `callback(page)` before each LIST page of `rt` is served (0: the first page of a LIST)."""
        self._on_list[rt.qualified] = callback

    def compact(self) -> None:
        """etcd compaction: continue tokens and WATCH positions from before now get 410 Gone."""
        self.log.compact()

    def break_watch(self, rt: ResourceType, after: int = 0) -> None:
        """A WATCH of `rt` breaks off (KubeConnectionError) once `after` more events have been delivered."""
        self.log.break_after(rt.qualified, after)

    def discovery(self, *builtins: ResourceType) -> Discovery:
        """What discovery says now: `builtins`, CRDs, and the resources of the CRDs stored here."""
        with self._lock:
            defined = [crds.types_of(o) for (q, _, _), o in sorted(self.objects.items()) if q == CRDS.qualified]
        preferred = [*builtins, CRDS, *(versions[0] for versions in defined if versions)]
        return Discovery(preferred, [*builtins, CRDS, *(rt for versions in defined for rt in versions)])

    # --- reading ---

    def server_version(self) -> dict[str, Any]:
        return dict(VERSION)

    def get(self, rt: ResourceType, namespace: str | None, name: str) -> KubeObject | None:
        """GET one object; None when it does not exist (as KubeClient.get)."""
        try:
            found: KubeObject = self.request_json(Request("GET", rt.path(namespace, name)))
        except KubeApiError as e:
            if e.code == 404:
                return None
            raise
        return found

    def get_path(self, path: str) -> Any:
        return self.request_json(Request("GET", path))

    def request_json(self, req: Request) -> Any:
        """GET of /version, an object or a collection (limit, continue, labelSelector); DELETE of an object
        with preconditions. Writes go through the typed verbs."""
        if req.method == "GET" and req.path == "/version":
            return self.server_version()
        where = route(req.path)
        if req.method == "GET":
            return self._list(where, req) if not where.name else self._get(where, req.path)
        if req.method == "DELETE" and where.name:
            preconditions = orjson.loads(req.body or b"{}").get("preconditions") or {}
            return self._delete(where, req.path, preconditions)
        raise NotImplementedError(f"{req.method} {req.path}")

    def _get(self, where: Route, path: str) -> KubeObject:
        self.faults.check("get", where.qualified, where.namespace, where.name, path)
        with self._lock:
            self._served(where.qualified, "GET", path)
            obj = self.objects.get((where.qualified, where.namespace, where.name))
            if obj is None:
                raise not_found("GET", path, f'{where.qualified} "{where.name}"')
            return copy.deepcopy(obj)

    def _list(self, where: Route, req: Request) -> dict[str, Any]:
        params = dict(req.params)
        hook = self._on_list.get(where.qualified)
        if hook is not None:
            hook(listing.page_number(params))
        self.faults.check("list", where.qualified, where.namespace, "", req.path)
        with self._lock:
            self._served(where.qualified, "GET", req.path)
            listing.check_token(listing.Token.decode(params.get("continue", "")), self.log.compacted, req.path)
            objects = [
                o for (q, ns, _), o in self.objects.items() if q == where.qualified and where.namespace in ("", ns)
            ]
            return listing.page(objects, params, req.accept, self.log.revision, req.path)

    def watch(
        self, rt: ResourceType, namespace: str | None, selector: str, rv: str, timeout: int = 300
    ) -> Iterator[WatchEvent]:
        path = rt.path(namespace)
        self.faults.check("watch", rt.qualified, namespace or "", "", path)
        with self._lock:
            self._served(rt.qualified, "GET", path)
        return self.log.watch(rt, namespace, selector, rv, min(float(timeout), self.watch_period), path)

    def _served(self, qualified: str, method: str, path: str) -> None:
        if qualified in self.unserved:
            raise not_found(method, path)

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
        meta = body["metadata"]
        name = meta.get("name") or f"{meta['generateName']}{next(self._uid):05d}"
        self.calls.append(("create", name))
        path = rt.path(namespace)
        key = self._arrive("create", rt, namespace, name, path)
        with self._lock:
            self._served(rt.qualified, "POST", path)
            if key in self.objects:
                raise status_error("POST", path, 409, f'{rt.qualified} "{name}" already exists', "AlreadyExists")
            obj = copy.deepcopy(body)
            obj["metadata"]["name"] = name
            if rt.has_status:
                obj.pop("status", None)
            if rt.is_crd:
                obj["status"] = crds.established(obj)
            self.defaults(obj)
            meta = obj["metadata"]
            meta.update(uid=f"uid-{self._server}-{next(self._uid)}", resourceVersion=str(self.log.bump()), generation=1)
            meta["creationTimestamp"] = "2099-01-01T00:00:00Z"
            if namespace and rt.namespaced:
                meta["namespace"] = namespace
            _own(meta, obj, manager)
            if not dry_run:
                self.objects[key] = obj
                self.log.record("ADDED", rt.qualified, key[1], obj)
                if rt.is_crd:
                    self.unserved.discard(crds.defined(obj))
            result = copy.deepcopy(obj)
        if name in self.lose_create_answer:
            self.lose_create_answer.discard(name)
            raise status_error("POST", path, 409, f'{rt.qualified} "{name}" already exists', "AlreadyExists")
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
        path = rt.path(namespace, name, sub)
        race = self.race_status_write if sub == "status" else set()
        key = self._arrive("update", rt, namespace, name, path, race)
        with self._lock:
            live = self._live(key, "PUT", path)
            if body["metadata"].get("resourceVersion") != live["metadata"]["resourceVersion"]:
                raise status_error(
                    "PUT",
                    path,
                    409,
                    f'Operation cannot be fulfilled on {rt.qualified} "{name}": the object has been modified',
                )
            new = copy.deepcopy(live)
            if sub == "status":
                new["status"] = copy.deepcopy(body.get("status"))
            else:
                new = {**copy.deepcopy(body), "metadata": {**live["metadata"], **body["metadata"]}}
                if rt.has_status:
                    new["status"] = copy.deepcopy(live.get("status"))
                    new.pop("status") if new["status"] is None else None
            self.defaults(new)
            return self._answer(name, self._store(key, new, manager, dry_run, sub), warnings)

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
        path = rt.path(namespace, name, sub)
        key = self._arrive("patch", rt, namespace, name, path, self.race_patch)
        with self._lock:
            live = self._live(key, "PATCH", path)
            try:
                new = jsonpatch.apply_patch(live, patch)
            except (jsonpatch.JsonPatchException, jsonpatch.JsonPointerException) as e:
                raise status_error("PATCH", path, 422, f"{name}: {e}") from e
            self.defaults(new)
            return self._answer(name, self._store(key, new, manager, dry_run, sub), warnings)

    def _answer(self, name: str, obj: KubeObject, warnings: list[str] | None) -> KubeObject:
        """The answer to a write, with the Warning the test armed for the object when the caller asked for them."""
        if warnings is not None and name in self.warn:
            warnings.append(self.warn[name])
        return obj

    def delete(self, rt: ResourceType, namespace: str | None, name: str) -> None:
        """As KubeClient.delete: gone already is fine."""
        try:
            self._delete(Route(*_key(rt, namespace, name)), rt.path(namespace, name), {})
        except KubeApiError as e:
            if e.code != 404:
                raise

    def _delete(self, where: Route, path: str, preconditions: dict[str, str]) -> dict[str, Any]:
        self._hook("delete", where.name)
        self.faults.check("delete", where.qualified, where.namespace, where.name, path)
        key = (where.qualified, where.namespace, where.name)
        with self._lock:
            live = self._live(key, "DELETE", path)
            for field in ("uid", "resourceVersion"):
                if field in preconditions and preconditions[field] != live["metadata"].get(field):
                    wanted, found = preconditions[field], live["metadata"].get(field)
                    message = f"Precondition failed: {field} in precondition: {wanted}, {field} in object meta: {found}"
                    raise status_error("DELETE", path, 409, message)
            del self.objects[key]
            live["metadata"]["resourceVersion"] = str(self.log.bump())
            self.log.record("DELETED", where.qualified, where.namespace, live)
            if where.qualified == CRDS.qualified:
                self._drop_type(crds.defined(live))
        return {"kind": "Status", "status": "Success"}

    def _drop_type(self, qualified: str) -> None:
        """A deleted CRD: its objects go (a DELETED event each), and its resource is no longer served."""
        for key in [k for k in self.objects if k[0] == qualified]:
            gone = self.objects.pop(key)
            gone["metadata"]["resourceVersion"] = str(self.log.bump())
            self.log.record("DELETED", qualified, key[1], gone)
        self.unserved.add(qualified)

    def _live(self, key: Key, method: str, path: str) -> KubeObject:
        self._served(key[0], method, path)
        live = self.objects.get(key)
        if live is None:
            raise not_found(method, path, f'{key[0]} "{key[2]}"')
        return live

    def _store(self, key: Key, new: KubeObject, manager: str, dry_run: bool, sub: str | None = None) -> KubeObject:
        """A write of an existing object, holding the lock: the next resourceVersion, its writer, a MODIFIED."""
        new["metadata"]["resourceVersion"] = str(self.log.bump())
        _own(new["metadata"], new, manager, sub)
        if not dry_run:
            self.objects[key] = new
            self.log.record("MODIFIED", key[0], key[1], new)
        return copy.deepcopy(new)

    def put(self, rt: ResourceType, obj: KubeObject, manager: str = "someone-else") -> None:
        """Another writer's object, as it would be stored."""
        self.create(rt, obj["metadata"].get("namespace"), obj, manager=manager)

    def _arrive(
        self, verb: str, rt: ResourceType, namespace: str | None, name: str, path: str, race: set[str] | None = None
    ) -> Key:
        """A write's arrival, before it takes the lock: the test's hook, a racing change if `name` is in `race`
        (once), then the faults; returns the object's key."""
        self._hook(verb, name)
        if race is not None and name in race:
            race.discard(name)
            self._touch(rt, namespace, name)
        self.faults.check(verb, rt.qualified, namespace or "", name, path)
        return _key(rt, namespace, name)

    def _touch(self, rt: ResourceType, namespace: str | None, name: str) -> None:
        """Another writer's update: a new resourceVersion."""
        key = _key(rt, namespace, name)
        with self._lock:
            live = self.objects[key]
            live["metadata"]["resourceVersion"] = str(self.log.bump())
            live["metadata"].setdefault("annotations", {})["touched"] = "by another writer"
            self.log.record("MODIFIED", key[0], key[1], live)


def _key(rt: ResourceType, namespace: str | None, name: str) -> Key:
    """Where an object is kept: a cluster-scoped one under no namespace, whatever the caller passed (as its path)."""
    return rt.qualified, (namespace or "") if rt.namespaced else "", name


def _own(meta: dict[str, Any], obj: KubeObject, manager: str, sub: str | None = None) -> None:
    """Name the writer in managedFields, unless it owns nothing (as the API server does); a write through a
    subresource is an entry of its own that says so (Kubernetes 1.22+)."""
    owns = set(obj) - {"apiVersion", "kind", "metadata"} or set(meta) - {
        "name",
        "namespace",
        "uid",
        "resourceVersion",
        "generation",
        "creationTimestamp",
        "managedFields",
    }
    entries = [e for e in meta.get("managedFields") or [] if (e["manager"], e.get("subresource")) != (manager, sub)]
    if owns:
        entries.append({"manager": manager, "operation": "Update", **({"subresource": sub} if sub else {})})
    if entries:
        meta["managedFields"] = entries
