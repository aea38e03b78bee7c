"""The S3 adapter's wire: the boto3 client statusvault's options make, S3's errors as one-line StorageErrors, and
Object Lock's request arguments and response fields (storage/s3.py is the store built on them)."""

from __future__ import annotations

import datetime as dt
from typing import TYPE_CHECKING, Any

import boto3
import botocore.config
import botocore.exceptions

from statusvault.errors import StorageError
from statusvault.storage.base import LOCK_MODES, ObjectLock, S3Options

if TYPE_CHECKING:
    from statusvault.storage.s3 import S3Store


def lock_args(lock: ObjectLock) -> dict[str, Any]:
    """PutObject's and CreateMultipartUpload's Object Lock arguments."""
    args: dict[str, Any] = {"ObjectLockLegalHoldStatus": "ON"} if lock.legal_hold else {}
    if lock.until is not None:
        args.update(ObjectLockMode=lock.mode, ObjectLockRetainUntilDate=lock.until)
    return args


def lock_from_head(head: dict[str, Any]) -> ObjectLock:
    """The lock HeadObject reports (S3 leaves the fields out when the caller may not read them, or there is none)."""
    until = head.get("ObjectLockRetainUntilDate")
    mode = str(head.get("ObjectLockMode") or "").upper()
    held = head.get("ObjectLockLegalHoldStatus") == "ON"
    if mode not in LOCK_MODES or not isinstance(until, dt.datetime):
        return ObjectLock(legal_hold=held)
    return ObjectLock(mode, until if until.tzinfo else until.replace(tzinfo=dt.UTC), held)


def client_error(store: S3Store, what: str, e: botocore.exceptions.ClientError) -> StorageError:
    err = e.response.get("Error", {})
    code = str(err.get("Code", ""))
    if code == "NoSuchBucket" or (code in ("404", "NotFound") and what == "list"):
        return StorageError(f"bucket {store.bucket!r} does not exist ({store.url})")
    if code in ("AccessDenied", "403", "Forbidden"):
        return StorageError(f"access denied to {store.url}: check the credentials and the bucket policy")
    if code in ("InvalidAccessKeyId", "SignatureDoesNotMatch", "InvalidToken", "ExpiredToken"):
        return StorageError(f"S3 rejected the credentials for {store.url} ({code})")
    if code in ("NoSuchKey", "404", "NotFound"):
        return StorageError(f"{store.url}: object not found")
    return StorageError(f"cannot {what} {store.url}: {code or 'error'}: {err.get('Message', e)}")


def make_client(o: S3Options) -> Any:
    settings: dict[str, Any] = {
        "s3": {"addressing_style": o.addressing_style},
        "request_checksum_calculation": o.checksum,
        "response_checksum_validation": o.checksum,
    }
    config = botocore.config.Config(
        **settings,
        retries={"max_attempts": 5, "mode": "standard"},
        connect_timeout=10,
        read_timeout=60,
    )
    verify: bool | str | None = None
    if o.insecure_skip_tls_verify:
        verify = False
    elif o.ca_bundle:
        verify = o.ca_bundle
    try:
        session = boto3.session.Session(profile_name=o.profile, region_name=o.region)
    except botocore.exceptions.ProfileNotFound as e:
        raise StorageError(f"AWS profile not found: {o.profile}") from e
    return session.client("s3", endpoint_url=o.endpoint_url, config=config, verify=verify)
