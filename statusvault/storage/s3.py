"""An S3-compatible bucket as an ObjectStore: streamed multipart writes, clear errors."""

from __future__ import annotations

import base64
import contextlib
import copy
import dataclasses
import datetime as dt
import email.utils
import hashlib
import io
import logging
import tempfile
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, TypeVar

import boto3
import boto3.exceptions
import botocore.config
import botocore.exceptions
from boto3.s3.transfer import TransferConfig

from statusvault.errors import StorageError
from statusvault.storage.base import ObjectLock, S3Options, StoredObject, Versioned, Writer
from statusvault.storage.s3client import client_error, lock_args, lock_from_head, make_client

log = logging.getLogger(__name__)

PART_SIZE = 8 * 1024 * 1024  # S3 needs >= 5 MiB for every part but the last
WRITE_ID = "statusvault-write"  # user metadata naming one write, so that its object is recognised as its own
NOT_FOUND = ("NoSuchKey", "404", "NotFound")
CONDITION_FAILED = ("PreconditionFailed", "412", "ConditionalRequestConflict", "409", *NOT_FOUND)
T = TypeVar("T")


class S3Store:
    def __init__(self, bucket: str, prefix: str, options: S3Options, client: Any = None):
        self.bucket = bucket
        self.prefix = prefix.strip("/") + "/" if prefix.strip("/") else ""
        self.options = options
        self.url = f"s3://{bucket}/{self.prefix}".rstrip("/")
        self.client = client or make_client(options)
        self.transfer = TransferConfig(multipart_threshold=PART_SIZE, multipart_chunksize=PART_SIZE)
        self.conditional = True  # If-None-Match / If-Match writes, until the store says it has none
        self.lock: ObjectLock | None = None  # carried by every write (with_lock)
        self._lock_enabled: bool | None = None

    def _key(self, key: str) -> str:
        return self.prefix + key

    def _sse_args(self, body: bytes | None = None) -> dict[str, Any]:
        """A write's server-side encryption and Object Lock arguments; `body`: its bytes, whose MD5 S3 requires
        with a lock (botocore sends no checksum with when_required)."""
        args: dict[str, Any] = {}
        if self.options.sse:
            args["ServerSideEncryption"] = self.options.sse
            if self.options.kms_key_id:
                args["SSEKMSKeyId"] = self.options.kms_key_id
        if self.lock is not None:
            args.update(lock_args(self.lock))
            if body is not None:
                args["ContentMD5"] = base64.b64encode(hashlib.md5(body).digest()).decode()
        return args

    def object_lock_enabled(self) -> bool:
        if self._lock_enabled is None:
            try:
                resp = self.client.get_object_lock_configuration(Bucket=self.bucket)
            except botocore.exceptions.ClientError as e:
                if e.response.get("Error", {}).get("Code") != "ObjectLockConfigurationNotFoundError":
                    raise client_error(self, "read the Object Lock configuration of", e) from e
                resp = {}
            except botocore.exceptions.BotoCoreError as e:
                raise StorageError(f"cannot read the Object Lock configuration of {self.url}: {e}") from e
            enabled = (resp.get("ObjectLockConfiguration") or {}).get("ObjectLockEnabled")
            self._lock_enabled = enabled == "Enabled"
        return self._lock_enabled

    def with_lock(self, lock: ObjectLock) -> S3Store:
        view = copy.copy(self)  # the same client and bucket
        view.lock = lock
        return view

    def lock_of(self, key: str) -> ObjectLock:
        head = self._call("read from", self.client.head_object, Bucket=self.bucket, Key=self._key(key))
        return lock_from_head(head)

    def set_legal_hold(self, key: str, on: bool) -> int:
        versions = self._versions(self._key(key))
        for version in versions:
            self._call("set a legal hold in", self.client.put_object_legal_hold, Bucket=self.bucket,
                       Key=self._key(key), VersionId=version, LegalHold={"Status": "ON" if on else "OFF"})  # fmt: skip
        return len(versions)

    def _versions(self, key: str) -> list[str]:
        """The version IDs of `key` (delete markers left out), newest first."""
        pages = self.client.get_paginator("list_object_versions").paginate(Bucket=self.bucket, Prefix=key)
        with self._errors("list"):
            return [v["VersionId"] for page in pages for v in page.get("Versions") or [] if v["Key"] == key]

    def _call(self, what: str, fn: Callable[..., T], **kwargs: Any) -> T:
        with self._errors(what):
            return fn(**kwargs)

    @contextmanager
    def _errors(self, what: str) -> Iterator[None]:
        """botocore's and boto3's exceptions as one-line StorageErrors that say what to check."""
        try:
            yield
        except botocore.exceptions.ClientError as e:
            raise client_error(self, what, e) from e
        except botocore.exceptions.NoCredentialsError as e:
            raise StorageError(
                f"no S3 credentials found for {self.url}: set AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY or AWS_PROFILE"
            ) from e
        except (botocore.exceptions.BotoCoreError, boto3.exceptions.Boto3Error) as e:
            raise StorageError(f"cannot {what} {self.url}: {e}") from e

    def _write(self, key: str, write_id: str, fn: Callable[..., Any], **kwargs: Any) -> None:
        """A write whose answer was lost may have been done all the same (and its retry then refused, as S3
        refuses a completed upload's id): it failed only if the key does not hold this very write."""
        try:
            self._call("write to", fn, Key=key, **kwargs)
        except StorageError:
            if not self._holds(key, write_id):
                raise
            log.info("the answer to a write of %s was lost, but S3 holds it", key)

    def _holds(self, key: str, write_id: str) -> bool:
        return self._etag_of(key, write_id) is not None

    def _etag_of(self, key: str, write_id: str) -> str | None:
        """The object's ETag if `key` holds the write `write_id`, else None."""
        try:
            head = self.client.head_object(Bucket=self.bucket, Key=key)
        except (botocore.exceptions.ClientError, botocore.exceptions.BotoCoreError):
            return None
        return str(head["ETag"]) if (head.get("Metadata") or {}).get(WRITE_ID) == write_id else None

    def read_versioned(self, key: str, limit: int = -1) -> Versioned | None:
        """The object with its ETag, aged by the S3 server's clock: its Date header minus LastModified."""
        try:
            resp = self.client.get_object(Bucket=self.bucket, Key=self._key(key))
        except botocore.exceptions.ClientError as e:
            if e.response.get("Error", {}).get("Code") in NOT_FOUND:
                return None
            raise client_error(self, "read from", e) from e
        except botocore.exceptions.BotoCoreError as e:
            raise StorageError(f"cannot read from {self.url}: {e}") from e
        body = resp["Body"]
        try:
            data: bytes = self._call("read from", body.read, amt=limit if limit >= 0 else None)
        finally:
            body.close()
        date = (resp.get("ResponseMetadata") or {}).get("HTTPHeaders", {}).get("date")
        now = email.utils.parsedate_to_datetime(date) if date else dt.datetime.now(dt.UTC)
        if now.tzinfo is None:  # "-0000" (or a proxy's rewrite) reads as naive: HTTP dates are UTC
            now = now.replace(tzinfo=dt.UTC)
        return Versioned(data, str(resp["ETag"]), (now - resp["LastModified"]).total_seconds())

    def put_if(self, key: str, data: bytes, version: str | None) -> str | None:
        written = self._put_if(key, data, version)
        if written is not None:
            self._ensure_lock(key)
        return written

    def _put_if(self, key: str, data: bytes, version: str | None) -> str | None:
        """PutObject with If-None-Match: * or If-Match: ETag. A refusal met by a retry whose first attempt was
        done (its answer lost) is recognised by the write's own id."""
        if not self.conditional:
            return self._put_compared(key, data, version)
        write_id = uuid.uuid4().hex
        condition = {"IfNoneMatch": "*"} if version is None else {"IfMatch": version}
        try:
            resp = self.client.put_object(
                Bucket=self.bucket,
                Key=self._key(key),
                Body=data,
                Metadata={WRITE_ID: write_id},
                **condition,
                **self._sse_args(data),
            )
        except botocore.exceptions.ClientError as e:
            code = e.response.get("Error", {}).get("Code")
            if code in ("NotImplemented", "501"):
                log.warning("%s has no conditional writes: reading and comparing instead, which leaves two "
                            "writers racing for one backup name a moment", self.url)  # fmt: skip
                self.conditional = False
                return self._put_compared(key, data, version)
            if code not in CONDITION_FAILED:
                raise client_error(self, "write to", e) from e
            return self._etag_of(self._key(key), write_id)
        except botocore.exceptions.BotoCoreError as e:  # every answer lost: done if S3 holds this very write
            etag = self._etag_of(self._key(key), write_id)
            if etag is None:
                raise StorageError(f"cannot write to {self.url}: {e}") from e
            log.info("the answer to a write of %s was lost, but S3 holds it", key)
            return etag
        return str(resp["ETag"])

    def _put_compared(self, key: str, data: bytes, version: str | None) -> str | None:
        """put_if on an S3-compatible store without conditional writes: read, compare, write."""
        current = self.read_versioned(key)
        if (current.version if current else None) != version:
            return None
        write_id = uuid.uuid4().hex
        self._write(self._key(key), write_id, self.client.put_object, Bucket=self.bucket, Body=data,
                    Metadata={WRITE_ID: write_id}, **self._sse_args(data))  # fmt: skip
        return self._etag_of(self._key(key), write_id)

    def sweep(self, older_than: float) -> int:
        """Abort multipart uploads under the prefix started more than older_than seconds ago (a killed
        backup's); without s3:ListBucketMultipartUploads this is skipped and the bucket lifecycle rule
        remains the safety net."""
        cutoff = dt.datetime.now(dt.UTC) - dt.timedelta(seconds=older_than)
        aborted = 0
        try:
            pages = self.client.get_paginator("list_multipart_uploads").paginate(Bucket=self.bucket, Prefix=self.prefix)
            for page in pages:
                for upload in page.get("Uploads") or []:
                    if upload["Initiated"] < cutoff:
                        self.client.abort_multipart_upload(
                            Bucket=self.bucket, Key=upload["Key"], UploadId=upload["UploadId"]
                        )
                        aborted += 1
        except (botocore.exceptions.ClientError, botocore.exceptions.BotoCoreError) as e:
            log.info("not sweeping stale multipart uploads in %s: %s", self.url, e)
        return aborted

    def put(self, key: str, data: bytes) -> None:
        write_id = uuid.uuid4().hex
        self._write(
            self._key(key),
            write_id,
            self.client.put_object,
            Bucket=self.bucket,
            Body=data,
            Metadata={WRITE_ID: write_id},
            **self._sse_args(data),
        )
        self._ensure_lock(key)

    @contextmanager
    def open_write(self, key: str) -> Iterator[Writer]:
        writer = _MultipartWriter(self, self._key(key))
        try:
            yield writer
            writer.finish()
        except BaseException:
            writer.abort()
            raise
        self._ensure_lock(key)

    def _ensure_lock(self, key: str) -> None:
        self.ensure_lock(key)

    def ensure_lock(self, key: str) -> bool:
        """After a write with a lock: the object holds it, or is given it now (moto drops a multipart upload's, and
        an S3-compatible store may ignore the headers); a store that still does not report it fails the write."""
        wanted = self.lock
        if wanted is None or (found := self.lock_of(key)).covers(wanted):
            return False
        if wanted.until is not None and not found.covers(dataclasses.replace(wanted, legal_hold=False)):
            retention = {"Mode": wanted.mode, "RetainUntilDate": wanted.until}
            self._call("lock an object in", self.client.put_object_retention, Bucket=self.bucket,
                       Key=self._key(key), Retention=retention)  # fmt: skip
        if wanted.legal_hold and not found.legal_hold:
            self._call("set a legal hold in", self.client.put_object_legal_hold, Bucket=self.bucket,
                       Key=self._key(key), LegalHold={"Status": "ON"})  # fmt: skip
        if not self.lock_of(key).covers(wanted):
            raise StorageError(f"{self.url}/{key} was written, but the store does not report the Object Lock asked "
                               f"for ({wanted.describe()}): it cannot be relied on to keep backups")  # fmt: skip
        return True

    def get(self, key: str, limit: int = -1) -> bytes:
        resp = self._call("read from", self.client.get_object, Bucket=self.bucket, Key=self._key(key))
        body = resp["Body"]
        try:
            data: bytes = self._call("read from", body.read, amt=limit if limit >= 0 else None)
        finally:
            body.close()  # the rest of a longer object is not downloaded
        return data

    @contextmanager
    def local_file(self, key: str) -> Iterator[Path]:
        with tempfile.TemporaryDirectory(prefix="statusvault-") as tmp:
            dest = Path(tmp) / key.rsplit("/", 1)[-1]
            self._call(
                "download from",
                self.client.download_file,
                Bucket=self.bucket,
                Key=self._key(key),
                Filename=str(dest),
                Config=self.transfer,
            )
            yield dest

    def exists(self, key: str) -> bool:
        try:
            self.client.head_object(Bucket=self.bucket, Key=self._key(key))
        except botocore.exceptions.ClientError as e:
            if e.response.get("Error", {}).get("Code") in ("404", "NoSuchKey", "NotFound"):
                return False
            raise client_error(self, "read from", e) from e
        except botocore.exceptions.BotoCoreError as e:
            raise StorageError(f"cannot read from {self.url}: {e}") from e
        return True

    def list(self, prefix: str) -> Iterator[StoredObject]:
        pages = self.client.get_paginator("list_objects_v2").paginate(Bucket=self.bucket, Prefix=self._key(prefix))
        with self._errors("list"):
            for page in pages:
                for item in page.get("Contents") or []:
                    yield StoredObject(item["Key"][len(self.prefix) :], item["Size"], item["LastModified"])

    def delete(self, key: str) -> None:
        self._call("delete from", self.client.delete_object, Bucket=self.bucket, Key=self._key(key))


class _MultipartWriter:
    """Buffers one part at a time and uploads it; memory stays at one part whatever the size."""

    def __init__(self, store: S3Store, key: str):
        self.store = store
        self.key = key
        self.write_id = uuid.uuid4().hex
        self.buffer = io.BytesIO()
        self.upload_id: str | None = None
        self.parts: list[dict[str, Any]] = []
        self.aborted = False

    def write(self, data: bytes) -> int:
        if self.aborted:  # a tar or gzip stream closed by the garbage collector after a failure: dropped
            return len(data)
        self.buffer.write(data)
        if self.buffer.tell() >= PART_SIZE:
            self._flush_part()
        return len(data)

    def _flush_part(self) -> None:
        s = self.store
        if self.upload_id is None:
            resp = s._call(
                "write to",
                s.client.create_multipart_upload,
                Bucket=s.bucket,
                Key=self.key,
                Metadata={WRITE_ID: self.write_id},
                **s._sse_args(),
            )
            self.upload_id = resp["UploadId"]
        number = len(self.parts) + 1
        body = self.buffer.getvalue()
        md5 = {"ContentMD5": s._sse_args(body)["ContentMD5"]} if s.lock is not None else {}
        resp = s._call(
            "write to",
            s.client.upload_part,
            Bucket=s.bucket,
            Key=self.key,
            UploadId=self.upload_id,
            PartNumber=number,
            Body=body,
            **md5,
        )
        self.parts.append({"PartNumber": number, "ETag": resp["ETag"]})
        self.buffer = io.BytesIO()

    def finish(self) -> None:
        s = self.store
        if self.upload_id is None:  # small: one PUT
            body = self.buffer.getvalue()
            s._write(
                self.key,
                self.write_id,
                s.client.put_object,
                Bucket=s.bucket,
                Body=body,
                Metadata={WRITE_ID: self.write_id},
                **s._sse_args(body),
            )
            return
        if self.buffer.tell():
            self._flush_part()
        s._write(
            self.key,
            self.write_id,
            s.client.complete_multipart_upload,
            Bucket=s.bucket,
            UploadId=self.upload_id,
            MultipartUpload={"Parts": self.parts},
        )

    def abort(self) -> None:
        self.aborted = True
        self.buffer = io.BytesIO()
        if self.upload_id is not None:
            # if this fails too, the bucket's lifecycle rule for incomplete uploads cleans up the rest
            with contextlib.suppress(botocore.exceptions.ClientError, botocore.exceptions.BotoCoreError):
                self.store.client.abort_multipart_upload(
                    Bucket=self.store.bucket, Key=self.key, UploadId=self.upload_id
                )
