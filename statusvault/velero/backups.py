"""Velero backups read as a source: a Velero backup tarball holds every object as the API server returned
it, status included, and statusvault writes it into a native, verifiable backup with the ordinary backup engine,
so everything after reading (selection, status filters, modifiers, pause, fencing, order, resume, the verdict) is
the ordinary restore's.

Read (Velero's documented output file format, majors 1: `metadata/version` "1" or "1.1.0"):
- `resources/<resource>.<group>/namespaces/<ns>/<name>.json` and `resources/<resource>.<group>/cluster/<name>.json`:
  the classic layout, each object in its resource's preferred version (format 1 and 1.1);
- `resources/<resource>.<group>/<version>-preferredversion/...` (1.1): the same objects again; used only for a
  resource that has no classic directory;
- `resources/<resource>.<group>/<version>/...` (1.1 with EnableAPIGroupVersions): the other versions of the same
  objects, left out (the preferred version is what the server stores) and counted in the report;
- anything else outside `resources/` (`metadata/`, newer additions) is passed over.
A Velero backup storage location keeps `backups/<name>/<name>.tar.gz`; `source_path` fetches it from a store.

A Velero tarball is untrusted input like any archive: regular files only, bounded inflation, at most MAX_MEMBERS
members and MAX_OBJECTS objects, each at most MAX_OBJECT_BYTES with at most MAX_JSON_VALUES values, no path outside
the layout, no member twice, each object naming the place it is stored at. It is unauthenticated: the imported
backup is a plaintext backup (unless the importer encrypts or signs it, vouching for it), and a restore's trust
rules apply to it."""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import re
import sqlite3
import tempfile
import threading
import types
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import orjson

from statusvault.archive.check import VerifyReport
from statusvault.archive.format import (
    MAX_JSON_VALUES,
    MAX_OBJECT_BYTES,
    MAX_OBJECTS,
    MAX_PATH_BYTES,
    RESOURCES_DIR,
    check_json_size,
    json_document,
    parse_member_path,
    shown,
    stream_bound,
)
from statusvault.archive.reader import file_sha256
from statusvault.archive.stream import TarStream
from statusvault.backup import BackupEngine, BackupRequest, BackupResult
from statusvault.backup.engine import crd_defines
from statusvault.errors import ArchiveError, BackupNotFoundError, ConfigError
from statusvault.kube.discovery import Discovery
from statusvault.model import KubeObject, ResourceType, Selection
from statusvault.storage.base import ObjectStore
from statusvault.storage.local import LocalStore
from statusvault.velero import legacycrd
from statusvault.vocabulary.kinds import CRDS, SECRETS

log = logging.getLogger(__name__)
VERSION_MEMBER = "metadata/version"
PREFERRED = "-preferredversion"
SUPPORTED_MAJOR = "1"
# Format 1.1 keeps each object twice (its classic directory and its preferred-version copy) and, with
# EnableAPIGroupVersions, once more per other API version: members are bounded by that, objects by MAX_OBJECTS.
MAX_MEMBERS = 4 * MAX_OBJECTS + 64
_VERSION_DIR = re.compile(r"v[1-9][0-9]*((alpha|beta)[1-9][0-9]*)?(-preferredversion)?")  # an API version's directory


@dataclasses.dataclass
class _Resource:
    """What is known of one resource's objects in one of its directories without holding them: checked as they
    are read (one kind and one scope per resource), counted, and whether any carries a status."""

    kinds: set[tuple[str, str]] = dataclasses.field(default_factory=set)  # (apiVersion, kind)
    scopes: set[bool] = dataclasses.field(default_factory=set)  # namespaced or not
    count: int = 0
    any_status: bool = False


class VeleroBackup:
    """What a Velero tarball holds, checked: each resource's objects in its preferred version.

    The objects are spooled, not held: a private SQLite database on disk (deleted when closed), one row per
    object, read back a LIST page at a time in etcd's order; in memory stay a few facts per resource. Close it
    (or use it in a `with` block) when done."""

    def __init__(self, label: str):
        self.label = label
        self.format_version = ""
        self.other_versions: dict[str, set[str]] = {}  # left out, by resource
        self.left_out = 0  # objects of other API versions
        self.sha256 = ""  # of the tarball as read
        self.converted_crds: set[str] = (
            set()
        )  # CRDs in a shape current servers refuse, read as v1 (velero/legacycrd.py)
        self.written_at = 0.0  # the earliest member's time: when Velero wrote the backup (its own tarball says no more)
        self._db = sqlite3.connect("", check_same_thread=False)  # "": on disk, private, deleted on close
        self._db.executescript(_SPOOL)
        self._lock = threading.Lock()  # the backup engine lists resources from several threads
        self._resources: dict[tuple[str, bool], _Resource] = {}  # (resource.group, in a preferredversion dir)

    def __enter__(self) -> VeleroBackup:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        self._db.close()

    def _add_member(self, name: str) -> None:
        """A member's path, once: a path met twice refuses the tarball."""
        try:
            self._db.execute("INSERT INTO members VALUES (?)", (name,))
        except sqlite3.IntegrityError:
            raise ArchiveError(f"Velero backup {self.label} holds member {shown(name)} twice") from None

    def _add(self, place: tuple[str, str, str], preferred: bool, obj: KubeObject, data: bytes) -> None:
        qualified, namespace, name = place
        seen = self._resources.setdefault((qualified, preferred), _Resource())
        seen.kinds.add((str(obj["apiVersion"]), str(obj["kind"])))
        seen.scopes.add(bool(namespace))
        seen.count += 1
        seen.any_status = seen.any_status or "status" in obj
        row = (qualified, int(preferred), namespace, name, data)
        self._db.execute("INSERT INTO objects VALUES (?, ?, ?, ?, ?)", row)

    def _chosen(self) -> dict[str, tuple[bool, _Resource]]:
        """Each resource's directory read: the classic tree, else its preferredversion directory."""
        out: dict[str, tuple[bool, _Resource]] = {}
        for (qualified, preferred), seen in sorted(self._resources.items()):
            if qualified not in out:  # False (classic) sorts first
                out[qualified] = (preferred, seen)
        return out

    @property
    def total(self) -> int:
        return sum(seen.count for _, seen in self._chosen().values())

    def left_out_note(self) -> str:
        """What a command's line adds about the other API versions left out and the CRDs read as v1 ("" when
        neither)."""
        left = f"; {self.left_out} object(s) of other API versions left out" if self.left_out else ""
        converted = len(self.converted_crds)
        return left + (
            f"; {converted} CRD(s) in a shape current servers refuse (v1beta1, or v1 without a schema) "
            "converted to the v1 they accept"
            if converted
            else ""
        )

    def pages(self, qualified: str, namespace: str | None = None, limit: int = 500) -> Iterator[list[KubeObject]]:
        """The resource's objects (in `namespace` when given) in etcd's order (namespace, then name), `limit` a
        page; each page one query, so no cursor stays open between pages."""
        chosen = self._chosen().get(qualified)
        if chosen is None:
            return
        where = "qualified = ? AND preferred = ?" + (" AND namespace = ?" if namespace is not None else "")
        args: tuple[Any, ...] = (qualified, int(chosen[0]), *(() if namespace is None else (namespace,)))
        after = ("", "")
        while True:
            with self._lock:
                rows = self._db.execute(
                    f"SELECT namespace, name, data FROM objects WHERE {where} AND (namespace, name) > (?, ?) "
                    "ORDER BY namespace, name LIMIT ?",
                    (*args, *after, limit),
                ).fetchall()
            if not rows:
                return
            yield [orjson.loads(data) for _, _, data in rows]
            after = (rows[-1][0], rows[-1][1])

    def objects(self, qualified: str) -> dict[tuple[str, str], KubeObject]:
        """One resource's objects by (namespace, name): for a resource of a few objects (its CRDs, a test)."""
        return {
            (o["metadata"].get("namespace") or "", o["metadata"]["name"]): o for p in self.pages(qualified) for o in p
        }

    def types(self) -> list[ResourceType]:
        """Each resource's type as its objects and the backup's CRDs describe it (`custom`: a CRD of the backup
        defines it; `has_status`: its CRD has the status subresource, else an object carries a status)."""
        defined: dict[str, KubeObject] = {}
        for definition in self.objects(CRDS.qualified).values():
            group, plural = crd_defines(definition)
            defined[f"{plural}.{group}"] = definition
        out = []
        for qualified, (_, seen) in self._chosen().items():
            api_version, kind = next(iter(seen.kinds))  # one per resource (_check_types)
            group, _, version = api_version.rpartition("/")
            resource = qualified.split(".", 1)[0]
            crd = defined.get(qualified)
            has_status = _status_subresource(crd, version) if crd else seen.any_status
            namespaced = next(iter(seen.scopes))
            out.append(ResourceType(group, version, resource, kind, namespaced, has_status, crd is not None, ("list",)))
        return out


_SPOOL = """
PRAGMA journal_mode = OFF;
PRAGMA synchronous = OFF;
CREATE TABLE members (name TEXT PRIMARY KEY) WITHOUT ROWID;
CREATE TABLE objects (qualified TEXT, preferred INTEGER, namespace TEXT, name TEXT, data BLOB,
                      PRIMARY KEY (qualified, preferred, namespace, name));
"""


def read_tarball(path: Path) -> VeleroBackup:
    """Read and check a Velero backup tarball (close what it returns); ArchiveError (one line naming the member and
    the rule) otherwise."""
    backup = VeleroBackup(path.name)
    try:
        backup.sha256 = file_sha256(path)
        _read(path, backup)
        if not backup.format_version:
            raise ArchiveError(f"{path.name} is not a Velero backup: it has no {VERSION_MEMBER}")
        _check_types(backup)
        if backup.total > MAX_OBJECTS:
            raise ArchiveError(f"Velero backup {path.name} holds more than {MAX_OBJECTS:,} objects (the limit)")
    except OSError as e:
        backup.close()
        raise ArchiveError(f"cannot read Velero backup {path.name}: {e}") from None
    except BaseException:
        backup.close()
        raise
    return backup


def _read(path: Path, backup: VeleroBackup) -> None:
    members = 0
    with TarStream(path, stream_bound({}), "a Velero backup") as tar:
        for member in tar.members():
            name = member.name.removeprefix("./")
            members += 1
            if members > MAX_MEMBERS:
                raise ArchiveError(f"Velero backup {path.name} has more than {MAX_MEMBERS:,} members (the limit)")
            _check_path(name, path.name)
            backup._add_member(name)
            if member.mtime > 0 and (not backup.written_at or member.mtime < backup.written_at):
                backup.written_at = float(member.mtime)
            if name == VERSION_MEMBER:
                backup.format_version = _version(tar.read(member) if member.size <= 64 else b"", path.name)
                continue
            if not name.startswith(f"{RESOURCES_DIR}/"):
                continue  # metadata/ and what a newer minor version adds
            place, version = _place(name, path.name)
            if version and not version.endswith(PREFERRED):
                backup.other_versions.setdefault(place[0], set()).add(version)
                backup.left_out += 1
                continue
            if member.size > MAX_OBJECT_BYTES:
                raise ArchiveError(f"member {shown(name)} is larger than {MAX_OBJECT_BYTES:,} bytes (the limit)")
            data = tar.read(member)
            obj = _object(data, name, place)
            if place[0] == CRDS.qualified and legacycrd.refused_shape(obj):  # v1beta1, or v1 with no schema
                obj = legacycrd.as_v1(obj)
                data = orjson.dumps(obj)
                backup.converted_crds.add(place[2])
            backup._add(place, bool(version), obj, data)


def _check_path(name: str, label: str) -> None:
    parts = name.split("/")
    if (
        not name
        or name.startswith("/")
        or any(p in ("", ".", "..") for p in parts)
        or len(name.encode("utf-8", "surrogatepass")) > MAX_PATH_BYTES
        or any(ord(c) < 0x20 or c == "\x7f" for c in name)
    ):
        raise ArchiveError(f"Velero backup {label} has member {shown(name)}: not a safe relative path")


def _version(data: bytes, label: str) -> str:
    text = data.decode("ascii", "replace").strip()
    if not text or len(text) > 32 or text.split(".")[0] != SUPPORTED_MAJOR:
        raise ArchiveError(
            f"Velero backup {label} has format version {shown(text or data)}: statusvault reads Velero's format "
            f"{SUPPORTED_MAJOR}.x (1 and 1.1.0)"
        )
    return text


def _place(name: str, label: str) -> tuple[tuple[str, str, str], str]:
    """((resource.group, namespace, name), version directory or "") of a member under resources/."""
    parts = name.split("/")
    version = ""
    if len(parts) in (5, 6) and parts[2] not in ("namespaces", "cluster"):
        version = parts[2]
        if not _VERSION_DIR.fullmatch(version):
            raise ArchiveError(f"Velero backup {label} has member {shown(name)} outside Velero's layout")
        parts = [parts[0], parts[1], *parts[3:]]
    try:
        key = parse_member_path("/".join(parts))
    except ArchiveError:
        raise ArchiveError(f"Velero backup {label} has member {shown(name)} outside Velero's layout") from None
    return (key.qualified, key.namespace, key.name), version


def _object(data: bytes, name: str, place: tuple[str, str, str]) -> KubeObject:
    check_json_size(f"member {shown(name)}", data, MAX_JSON_VALUES)
    obj = json_document(f"member {shown(name)}", data)
    meta = obj.get("metadata") if isinstance(obj, dict) else None
    if not isinstance(meta, dict) or not isinstance(obj.get("apiVersion"), str) or not isinstance(obj.get("kind"), str):
        raise ArchiveError(f"member {shown(name)} is not a Kubernetes object (apiVersion, kind, metadata)")
    qualified, namespace, object_name = place
    if meta.get("name") != object_name or (meta.get("namespace") or "") != namespace:
        raise ArchiveError(f"member {shown(name)} holds another object ({shown(str(meta.get('name')))})")
    group = qualified.split(".", 1)[1] if "." in qualified else ""
    if str(obj["apiVersion"]).rpartition("/")[0] != group:
        raise ArchiveError(f"member {shown(name)} is a {shown(obj['apiVersion'])} object, not of group {group!r}")
    return dict(obj)


def _check_types(backup: VeleroBackup) -> None:
    for (qualified, _), seen in backup._resources.items():
        if len(seen.kinds) > 1:
            raise ArchiveError(f"Velero backup {backup.label} mixes {sorted(seen.kinds)[:2]} under {shown(qualified)}")
        if len(seen.scopes) > 1:
            raise ArchiveError(f"Velero backup {backup.label} has {shown(qualified)} both namespaced and not")


def _status_subresource(crd: KubeObject, version: str) -> bool:
    spec = crd.get("spec") or {}
    for v in spec.get("versions") or []:
        if isinstance(v, dict) and v.get("name") == version and "subresources" in v:
            return "status" in (v.get("subresources") or {})
    return "status" in (spec.get("subresources") or {})  # apiextensions v1beta1: one for every version


class TarballLister:
    """What the backup engine asks of a cluster, answered from a read Velero backup (as the bench's synthetic
    lister is): LIST pages of each resource, in etcd's order (namespace, then name)."""

    def __init__(self, backup: VeleroBackup):
        self.backup = backup
        self.server = f"velero:{backup.label}"
        self.transport = types.SimpleNamespace(host=self.server)

    def server_version(self) -> dict[str, Any]:
        return {"gitVersion": f"velero-format-{self.backup.format_version}"}

    def list_pages(
        self, rt: ResourceType, namespace: str | None, selector: str = "", limit: int = 500
    ) -> Iterator[Any]:
        return self.backup.pages(rt.qualified, namespace, limit)


def import_backup(backup: VeleroBackup, store: ObjectStore, name: str, **request: Any) -> BackupResult:
    """Write the Velero backup as the native backup `name` (`request`: BackupRequest's key, signer, lock)."""
    kinds = backup.types()
    if not kinds:
        raise ArchiveError(f"Velero backup {backup.label} holds no object")
    secrets = any(rt.qualified == SECRETS.qualified for rt in kinds)
    if secrets and not request.get("key") and not request.get("allow_plaintext_secrets"):
        raise ConfigError(
            f"Velero backup {backup.label} holds Secrets, and the native backup would hold their data in clear: "
            "encrypt it (--encryption-key-file or --kms-key-id), or say it may be stored in clear with "
            "--allow-plaintext-secrets"
        )
    selection = Selection(include_resources=tuple(rt.qualified for rt in kinds), include_cluster_resources=True)
    req = BackupRequest(
        store=store,
        name=name,
        selection=selection,
        schedule=f"velero:{backup.label}",
        imported_from={
            "velero": {
                "tarball": backup.label,
                "sha256": backup.sha256,
                "formatVersion": backup.format_version,
                "otherVersionsLeftOut": backup.left_out,
                "convertedCRDs": sorted(backup.converted_crds),
            }
        },
        with_dependencies=False,  # the Velero backup holds what it holds: no cluster to follow references in
        **request,
    )
    lister: Any = TarballLister(backup)
    return BackupEngine(lister, Discovery(kinds, kinds), req).run()


def velero_key(name: str) -> str:
    """Where a Velero backup storage location keeps a backup's tarball."""
    return f"backups/{name}/{name}.tar.gz"


def velero_json_key(name: str) -> str:
    """... and its Backup resource as Velero kept it (status.phase, formatVersion, errors)."""
    return f"backups/{name}/velero-backup.json"


USABLE_PHASES = ("Completed", "PartiallyFailed")  # the tarball is whole; PartiallyFailed: some items were not taken
MAX_BACKUP_JSON = 1 << 20


@dataclasses.dataclass(frozen=True)
class StoredVelero:
    """A backup in a Velero backup storage location, as its velero-backup.json describes it."""

    name: str
    size: int
    phase: str = ""  # "" when it has no readable velero-backup.json
    format_version: str = ""
    started: str = ""
    errors: int = 0

    def to_dict(self) -> dict[str, Any]:
        return {"name": self.name, "phase": self.phase or None, "formatVersion": self.format_version or None,
                "started": self.started or None, "errors": self.errors, "sizeBytes": self.size}  # fmt: skip


def stored(store: ObjectStore) -> list[StoredVelero]:
    """The backups of a Velero backup storage location (each `backups/NAME/NAME.tar.gz`), oldest first."""
    found = []
    for obj in store.list("backups/"):
        parts = obj.key.split("/")
        if len(parts) == 3 and parts[2] == f"{parts[1]}.tar.gz":
            found.append(_described(store, parts[1], obj.size))
    return sorted(found, key=lambda b: (b.started, b.name))


def _described(store: ObjectStore, name: str, size: int) -> StoredVelero:
    found = velero_json(store, name).get("status")
    status: dict[str, Any] = found if isinstance(found, dict) else {}
    errors = status.get("errors")
    return StoredVelero(
        name, size, str(status.get("phase") or "")[:32], str(status.get("formatVersion") or "")[:32],
        str(status.get("startTimestamp") or "")[:40], errors if isinstance(errors, int) else 0,
    )  # fmt: skip


def velero_json(store: ObjectStore, name: str) -> dict[str, Any]:
    """The backup's velero-backup.json ({} when it has none, or it is not a bounded JSON object)."""
    key = velero_json_key(name)
    if not store.exists(key):
        return {}
    data = store.get(key, MAX_BACKUP_JSON + 1)
    try:
        check_json_size(f"velero-backup.json of {name}", data)
        value = orjson.loads(data) if len(data) <= MAX_BACKUP_JSON else {}
    except (ArchiveError, orjson.JSONDecodeError):
        return {}
    return value if isinstance(value, dict) else {}


def check_phase(store: ObjectStore, name: str) -> StoredVelero:
    """A backup Velero did not complete (Failed, InProgress ...) is refused: its tarball may be partial. One it
    marked PartiallyFailed is read, with a warning: some of its items were not taken."""
    described = _described(store, name, 0)
    if described.phase and described.phase not in USABLE_PHASES:
        raise ArchiveError(
            f"Velero backup {name!r} is {described.phase}, not Completed: its tarball may not hold every object"
        )
    if described.phase == "PartiallyFailed":
        log.warning("Velero marked backup %s PartiallyFailed (%d error(s)): what it could not take is not in it",
                    name, described.errors)  # fmt: skip
    return described


@contextlib.contextmanager
def source_path(source: str, store: ObjectStore | None) -> Iterator[Path]:
    """A Velero backup as a local tarball: `source` a path to one, else the name of a backup in `store`, read as a
    Velero backup storage location (backups/NAME/NAME.tar.gz)."""
    path = Path(source).expanduser()
    if path.is_file():
        yield path
        return
    if store is None or "/" in source:
        raise BackupNotFoundError(f"Velero backup {source!r} not found: no such tarball")
    key = velero_key(source)
    if not store.exists(key):
        raise BackupNotFoundError(f"Velero backup {source!r} not found in {store.url} (no {key})")
    check_phase(store, source)
    with store.local_file(key) as local:
        yield local


@contextlib.contextmanager
def imported(source: str, store: ObjectStore | None) -> Iterator[tuple[ObjectStore, str, VeleroBackup]]:
    """The Velero backup as a native backup in a temporary directory (a restore, verify or describe of it)."""
    with source_path(source, store) as path, tempfile.TemporaryDirectory(prefix="statusvault-velero-") as tmp:
        name = native_name(path.name)
        temp = LocalStore(Path(tmp))
        where = path.resolve() if Path(source).expanduser().is_file() or store is None else f"{store.url}#{source}"
        temp.url = f"velero:{where}"  # the journal's key names the Velero source: the same restore resumes
        with read_tarball(path) as backup, _quiet(logging.getLogger("statusvault.backup")):  # its own lines, not
            import_backup(backup, temp, name, allow_plaintext_secrets=True)  # a backup the user ran; Secrets as held
        yield temp, name, backup


def verify(source: str, store: ObjectStore | None) -> tuple[VerifyReport, VeleroBackup]:
    """A Velero backup read whole and checked as any archive: the one judge (catalog.verify) of the native backup
    made of it, for the CLI and the API alike; with what was read (its format, counts, what was left out)."""
    from statusvault.store import catalog

    with imported(source, store) as (temp, native, read):
        return catalog.verify(temp, native), read


@contextlib.contextmanager
def _quiet(logger: logging.Logger) -> Iterator[None]:
    """The logger's INFO lines left out while inside (its warnings still said)."""
    level = logger.level
    logger.setLevel(max(level, logging.WARNING))
    try:
        yield
    finally:
        logger.setLevel(level)


def native_name(filename: str) -> str:
    """A native backup name for a Velero tarball's file name (its backup's name, as Velero names the file)."""
    stem = filename.removesuffix(".gz").removesuffix(".tar").removesuffix(".tgz")
    cleaned = "".join(c if c.isascii() and (c.isalnum() or c in "-_.") else "-" for c in stem).strip(".-")
    return (cleaned or "velero")[:200]
