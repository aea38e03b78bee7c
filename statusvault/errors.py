"""The error hierarchy and the process exit codes."""

from __future__ import annotations

import enum
from typing import Any


class ExitStatus(enum.IntEnum):
    """Process exit codes; pinned by tests, documented in docs/cli.md."""

    SUCCESS = 0
    ERROR = 1
    USAGE = 2
    PARTIAL_FAILURE = 3
    INTERRUPTED = 130  # SIGINT (Ctrl-C)
    TERMINATED = 143  # SIGTERM (a pod stopping, kill)


class StatusVaultError(Exception):
    """Base of every error statusvault raises on purpose; its message is shown to the user."""

    exit_status = ExitStatus.ERROR


class Interrupted(StatusVaultError):
    """A run stopped by a signal once its writes in flight were done: the same command resumes it."""

    exit_status = ExitStatus.INTERRUPTED


class ConfigError(StatusVaultError):
    """Bad command-line input or configuration (unknown resource, bad URL, bad option)."""

    exit_status = ExitStatus.USAGE


class KubeApiError(StatusVaultError):
    """The API server answered with an error Status; `code` and `reason` carry its facts."""

    def __init__(
        self,
        message: str,
        code: int = 0,
        reason: str = "",
        status: dict[str, Any] | None = None,
        retry_after: float | None = None,
    ):
        super().__init__(message)
        self.code = code
        self.reason = reason
        self.status = status or {}
        self._retry_after = retry_after  # the answer's Retry-After header, in seconds

    @property
    def retry_after(self) -> float | None:
        """How long the server asked the client to wait: its Retry-After header, else the Status's
        `details.retryAfterSeconds`; None when it said neither."""
        if self._retry_after is not None:
            return self._retry_after
        seconds = (self.status.get("details") or {}).get("retryAfterSeconds")
        try:
            return max(0.0, float(seconds)) if seconds is not None else None
        except (TypeError, ValueError):
            return None

    @classmethod
    def of(
        cls,
        message: str,
        code: int = 0,
        reason: str = "",
        status: dict[str, Any] | None = None,
        retry_after: float | None = None,
    ) -> KubeApiError:
        """The error of an answer, typed by its code (NotFound, Conflict, ...), as lightkube and client-go type
        them: callers catch the outcome they handle instead of comparing numbers."""
        kind = _BY_CODE.get(code, KubeApiError)
        if kind is Conflict and reason == "AlreadyExists":
            kind = AlreadyExists
        return kind(message, code, reason, status, retry_after)


class Unauthorized(KubeApiError):
    """401: the credentials were rejected."""


class Forbidden(KubeApiError):
    """403: RBAC (or an admission policy) refused the request."""


class NotFound(KubeApiError):
    """404: no such object, or the resource is not served."""


class Conflict(KubeApiError):
    """409: a resourceVersion or precondition conflict, or the name is taken (AlreadyExists)."""


class AlreadyExists(Conflict):
    """409 AlreadyExists: a create met an object of that name."""


class Gone(KubeApiError):
    """410: the resourceVersion (a continue token, a WATCH position) was compacted away."""


class Invalid(KubeApiError):
    """422: the object (or a JSON patch's test) was refused by validation."""


class TooManyRequests(KubeApiError):
    """429: throttled (API Priority and Fairness); retry_after says how long to wait."""


class Unavailable(KubeApiError):
    """503: the server (or an aggregated API) cannot answer now."""


_BY_CODE: dict[int, type[KubeApiError]] = {
    401: Unauthorized,
    403: Forbidden,
    404: NotFound,
    409: Conflict,
    410: Gone,
    422: Invalid,
    429: TooManyRequests,
    503: Unavailable,
}


class KubeConnectionError(StatusVaultError):
    """The API server could not be reached (refused, timeout, TLS)."""


class StorageError(StatusVaultError):
    """The backup store failed: missing bucket, denied, unreachable, missing backup."""


class BackupNotFoundError(StorageError):
    """The named backup does not exist in the store."""


class BackupExistsError(StorageError):
    """A backup of that name already exists."""


class BackupBusyError(StorageError):
    """Another run is writing a backup of that name: its writer lease is live."""


class BackupHeldError(StorageError):
    """S3 Object Lock (a retention not yet over, or a legal hold) keeps the backup from being deleted."""


class LeaseLostError(StorageError):
    """Another run took over the name of the backup this run was writing; this run landed nothing more."""


class BackupStoppedError(StatusVaultError):
    """The backup was stopped on request (its Backup resource deleted) before it landed: nothing was kept."""


class ArchiveError(StatusVaultError):
    """The archive is malformed, tampered with, incomplete or of an unknown format version."""


class PartialFailure(StatusVaultError):
    """The run finished but some items failed; the report says which."""

    exit_status = ExitStatus.PARTIAL_FAILURE
