"""Archive format v1's rules: member paths, manifest fields, object files, and the reader's limits.

Pure functions over names, dicts and bytes; docs/archive-format.md describes the same rules in prose."""

from __future__ import annotations

import functools
import hashlib
import re
from typing import Any

import orjson

from statusvault.archive import signing
from statusvault.archive.envelope import check_field
from statusvault.errors import ArchiveError
from statusvault.model import ObjectKey

FORMAT_VERSION = "1.2"  # 1.2: object files keep who wrote their status (metadata.managedFields cut down)
ENVELOPE_FORMAT_VERSION = "1.2"  # from 1.1 on, an encrypted backup's data key is wrapped in its summary manifest
SUPPORTED_MAJOR = 1
MANIFEST_MEMBER = "manifest.json"
RESOURCES_DIR = "resources"

# Limits: far above what any backup of a real cluster holds, low enough that a reader's memory and temp
# disk stay bounded whatever the store holds (docs/archive-format.md, "Limits").
MAX_OBJECT_BYTES = 16 << 20  # one object file; the API server takes requests of up to 3 MiB
MAX_JSON_VALUES = 1_000_000  # in one object file, counted as `{`, `[`, `,` and `:` bytes: bounds what parsing costs
MAX_HEAD_VALUES = 200_000  # in a manifest's head (~20 per resource type), which a reader holds throughout
MAX_OBJECTS = 1_000_000  # object files in one archive
MAX_MANIFEST_BYTES = 256 << 20  # the embedded manifest (a 100k-object manifest is ~12 MB)
MAX_HEAD_BYTES = 4 << 20  # the summary manifest; the embedded manifest without its `files`
MAX_PATH_BYTES = 4096  # one member path, UTF-8
MAX_UNCOMPRESSED_BYTES = 64 << 30  # all object files together (totals.uncompressedBytes)
FRAME_BYTES = 10 << 10  # tar headers and padding one member may add to the stream

_NAMESPACE = re.compile(r"[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?")  # a DNS-1123 label, as every namespace is
_FORBIDDEN = re.compile("[\x00-\x1f\x7f%\ud800-\udfff]")  # no Kubernetes name holds these


def shown(text: str | bytes, limit: int = 160) -> str:
    """A name from an archive as an error message shows it: quoted, escaped (one line), cut to `limit`."""
    return repr(text[:limit]) + ("..." if len(text) > limit else "")


def member_path(key: ObjectKey) -> str:
    """Velero's layout: resources/<resource>.<group>/namespaces/<ns>/<name>.json or .../cluster/<name>.json."""
    if key.namespace:
        return f"{RESOURCES_DIR}/{key.qualified}/namespaces/{key.namespace}/{key.name}.json"
    return f"{RESOURCES_DIR}/{key.qualified}/cluster/{key.name}.json"


def parse_member_path(path: str) -> ObjectKey:
    """The inverse of member_path; refuses anything else, so each object has exactly one path."""
    short = len(path) * 4 <= MAX_PATH_BYTES or len(path.encode("utf-8", "surrogatepass")) <= MAX_PATH_BYTES
    key = _split(path) if short else None
    if key is None or not (_segment_ok(key.qualified) and _segment_ok(key.name)):
        raise ArchiveError(f"archive member {shown(path)} is outside the archive layout")
    return key


def _split(path: str) -> ObjectKey | None:
    parts = path.split("/")
    if not path.endswith(".json") or parts[0] != RESOURCES_DIR:
        return None
    if len(parts) == 5 and parts[2] == "namespaces" and _NAMESPACE.fullmatch(parts[3]):
        return ObjectKey(parts[1], parts[3], parts[4][:-5])
    if len(parts) == 4 and parts[2] == "cluster":
        return ObjectKey(parts[1], "", parts[3][:-5])
    return None


def _segment_ok(segment: str) -> bool:
    return segment not in ("", ".", "..") and not _FORBIDDEN.search(segment)


def check_format(manifest: dict[str, Any]) -> None:
    version = str(manifest.get("formatVersion", ""))
    try:
        major = int(version.split(".")[0])
    except ValueError:
        raise ArchiveError(f"manifest has no valid formatVersion ({shown(version)})") from None
    if major != SUPPORTED_MAJOR:
        version = version if re.fullmatch(r"[\w.+-]{1,32}", version) else shown(version)
        raise ArchiveError(
            f"archive format {version} is not supported by this statusvault "
            f"(reads {SUPPORTED_MAJOR}.x); upgrade statusvault"
        )


RESOURCE_FIELDS = {"group": str, "version": str, "resource": str, "kind": str, "namespaced": bool}
OPTIONAL_RESOURCE_FIELDS = {
    "hasStatusSubresource": bool,
    "custom": bool,
    "singular": str,
    "shortNames": list,
    "count": int,
    "withStatus": int,
    "terminating": int,
}


def check_resources(manifest: dict[str, Any]) -> None:
    """The manifest's per-resource entries have the fields readers rely on, each of its type."""
    resources = manifest.get("resources")
    if not isinstance(resources, dict):
        raise ArchiveError("manifest has no resources map")
    for name, entry in resources.items():
        if not isinstance(entry, dict) or not _entry_ok(entry):
            raise ArchiveError(f"manifest entry for {shown(name)} is malformed")
        qualified = f"{entry['resource']}.{entry['group']}" if entry["group"] else entry["resource"]
        if qualified != name:
            raise ArchiveError(f"manifest entry {shown(name)} does not match its group/resource")


def _entry_ok(entry: dict[str, Any]) -> bool:
    if any(not isinstance(entry.get(f), t) for f, t in RESOURCE_FIELDS.items()):
        return False
    optional = ((entry[f], t) for f, t in OPTIONAL_RESOURCE_FIELDS.items() if entry.get(f) is not None)
    if any(not isinstance(v, t) or (t is int and isinstance(v, bool)) for v, t in optional):
        return False
    return all(isinstance(s, str) for s in entry.get("shortNames") or ())


TOTALS_FIELDS = ("objects", "withStatus", "terminating", "uncompressedBytes")


def summary_objects(summary: dict[str, Any]) -> int:
    """The object count a summary manifest states (0 when it states none)."""
    totals = summary.get("totals")
    count = totals.get("objects") if isinstance(totals, dict) else 0
    return count if isinstance(count, int) and not isinstance(count, bool) else 0


def check_totals(manifest: dict[str, Any]) -> None:
    """`totals`, when there, holds counts; uncompressedBytes bounds what reading the archive may inflate."""
    totals = manifest.get("totals")
    if totals is None:
        return
    if not isinstance(totals, dict):
        raise ArchiveError("manifest totals are malformed")
    for field in TOTALS_FIELDS:
        value = totals.get(field)
        if value is not None and (not isinstance(value, int) or isinstance(value, bool) or value < 0):
            raise ArchiveError(f"manifest totals.{field} is not a count")
    if totals.get("uncompressedBytes", 0) > MAX_UNCOMPRESSED_BYTES:
        raise ArchiveError(f"manifest totals.uncompressedBytes is above the limit of {MAX_UNCOMPRESSED_BYTES:,}")


def check_manifest(manifest: dict[str, Any]) -> None:
    """Every rule a manifest (embedded or summary) must meet before anything in it is used."""
    check_format(manifest)
    check_resources(manifest)
    check_totals(manifest)


_SHA256 = re.compile(r"[0-9a-f]{64}")


def check_summary(manifest: dict[str, Any]) -> None:
    """The summary manifest beside the archive: the embedded manifest's rules, and well-formed `archive`,
    `encryption` and `signature` fields when there (reading the archive requires `archive`: see archive_field)."""
    check_manifest(manifest)
    if manifest.get("archive") is not None:
        archive_field(manifest)
    if manifest.get("encryption") is not None:
        check_field(manifest["encryption"])
    if manifest.get(signing.FIELD) is not None:
        signing.check_field(manifest[signing.FIELD], "manifest")


def archive_field(manifest: dict[str, Any]) -> dict[str, Any]:
    """The summary manifest's `archive`: the stored archive's size and SHA-256."""
    archive = manifest.get("archive")
    if (
        not isinstance(archive, dict)
        or not isinstance(archive.get("sha256"), str)
        or not _SHA256.fullmatch(archive["sha256"])
        or not isinstance(archive.get("size"), int)
        or isinstance(archive["size"], bool)
    ):
        raise ArchiveError("manifest has no valid archive size and sha256")
    return archive


def uncompressed_bound(manifest: dict[str, Any]) -> int | None:
    """The most bytes the object files may hold: totals.uncompressedBytes (absent in some hand-made archives)."""
    value = (manifest.get("totals") or {}).get("uncompressedBytes")
    return value if isinstance(value, int) else None


def stream_bound(manifest: dict[str, Any]) -> int:
    """The most bytes an archive described by this manifest may inflate to, tar framing included."""
    objects = (manifest.get("totals") or {}).get("objects")
    data = uncompressed_bound(manifest)
    if not isinstance(objects, int) or data is None:
        objects, data = MAX_OBJECTS, MAX_UNCOMPRESSED_BYTES
    return data + (objects + 8) * FRAME_BYTES + MAX_MANIFEST_BYTES  # 8 more: the manifest's, the end, read-ahead


def json_document(what: str, data: bytes) -> Any:
    """`data` parsed (check_json_size it first), or one line naming `what`: "<what> is not valid JSON: ..."."""
    try:
        return orjson.loads(data)
    except orjson.JSONDecodeError as e:
        raise ArchiveError(f"{what} is not valid JSON: {e}") from None


def json_object(what: str, data: bytes) -> dict[str, Any]:
    """As json_document, for a document that must be a JSON object: "<what> is not a JSON object" otherwise."""
    value = json_document(what, data)
    if not isinstance(value, dict):
        raise ArchiveError(f"{what} is not a JSON object")
    return value


def check_json_size(what: str, data: bytes, limit: int = MAX_HEAD_VALUES) -> None:
    """Refuse a document whose parse would cost more memory than `limit` values (about 100 bytes each)."""
    if len(data) <= limit:  # each value counted is one byte: no need to count
        return
    values = data.count(b"{") + data.count(b"[") + data.count(b",") + data.count(b":")
    if values > limit:
        raise ArchiveError(f"{what} holds more than {limit:,} JSON values (the limit)")


@functools.lru_cache(maxsize=4096)  # an archive holds few kinds, met once per member
def kind_digest(kind: str) -> str:
    """A fixed-size stand-in for a kind, to remember one per member without holding what a member says."""
    return hashlib.sha256(kind.encode("utf-8", "surrogatepass")).hexdigest()[:16]


def checked_object(path: str, key: ObjectKey, data: bytes) -> dict[str, Any]:
    """The object, after checking the file holds one JSON object with a kind, named as its path says."""
    if len(data) > MAX_JSON_VALUES:
        check_json_size(shown(path), data, MAX_JSON_VALUES)
    obj = json_document(shown(path), data)
    if not isinstance(obj, dict):
        raise ArchiveError(f"{shown(path)} does not hold a JSON object")
    meta, kind = obj.get("metadata"), obj.get("kind")
    if (
        not isinstance(meta, dict)
        or not isinstance(kind, str)
        or meta.get("name") != key.name
        or (meta.get("namespace") or "") != key.namespace
    ):
        raise ArchiveError(f"{shown(path)} holds an object whose kind, namespace or name does not match its path")
    checked: dict[str, Any] = obj
    return checked


def check_member_type(path: str, qualified: str, namespaced: bool, kind: str, resources: dict[str, Any]) -> None:
    """The member's resource is described in the manifest, with its scope and (by digest) its kind."""
    entry = resources.get(qualified)
    if entry is None:
        raise ArchiveError(f"{shown(path)} belongs to a resource the manifest does not describe")
    if namespaced != entry["namespaced"]:
        raise ArchiveError(f"{shown(path)} has a {'namespaced' if namespaced else 'cluster'} path, unlike its resource")
    if kind != kind_digest(entry["kind"]):
        raise ArchiveError(f"{shown(path)} holds an object whose kind, namespace or name does not match its path")
