"""Back up selected custom resources, status included: engine.py (BackupEngine: discovery -> paged LISTs ->
ArchiveWriter -> store), selection.py (which resource types a backup lists), spools.py (parallel LIST streams read
back in order), listers.py (LIST streams in worker processes)."""

from statusvault.backup.engine import (
    LIST_CONCURRENCY,
    BackupEngine,
    BackupRequest,
    BackupResult,
    ResourceSummary,
    backup_with,
    default_backup_name,
    prepare_object,
)

__all__ = [
    "LIST_CONCURRENCY",
    "BackupEngine",
    "BackupRequest",
    "BackupResult",
    "ResourceSummary",
    "backup_with",
    "default_backup_name",
    "prepare_object",
]
