"""Archive format v1 (docs/archive-format.md): a gzip'd tar of one JSON file per object plus manifest.json,
optionally encrypted. The package's public face is here; beside it: format.py (rules and limits), stream.py
(bounded tar.gz reading), manifest.py (the manifest's bytes), check.py (the first, full read), reader.py
(ArchiveReader), writer.py (ArchiveWriter), crypto.py (client-side encryption)."""

from statusvault.archive.check import VerifyReport
from statusvault.archive.format import (
    FORMAT_VERSION,
    MANIFEST_MEMBER,
    RESOURCES_DIR,
    SUPPORTED_MAJOR,
    check_format,
    check_manifest,
    check_resources,
    member_path,
    parse_member_path,
)
from statusvault.archive.reader import ArchiveReader, file_sha256
from statusvault.archive.writer import ArchiveWriter

__all__ = [
    "FORMAT_VERSION",
    "MANIFEST_MEMBER",
    "RESOURCES_DIR",
    "SUPPORTED_MAJOR",
    "ArchiveReader",
    "ArchiveWriter",
    "VerifyReport",
    "check_format",
    "check_manifest",
    "check_resources",
    "file_sha256",
    "member_path",
    "parse_member_path",
]
