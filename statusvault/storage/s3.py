"""An S3-compatible bucket as an ObjectStore: streamed multipart writes, clear errors."""

from __future__ import annotations

import contextlib
import datetime as dt
import email.utils
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
from statusvault.storage.base import S3Options, StoredObject, Versioned, Writer

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
        self.client = client or _make_client(options)
        self.transfer = TransferConfig(multipart_threshold=PART_SIZE, multipart_chunksize=PART_SIZE)
        self.conditional = True  # If-None-Match / If-Match writes, until the store says it has none

    def _key(self, key: str) -> str:
        return self.prefix + key

    def _sse_args(self) -> dict[str, str]:
        args: dict[str, str] = {}
        if self.options.sse:
            args["ServerSideEncryption"] = self.options.sse
            if self.options.kms_key_id:
                args["SSEKMSKeyId"] = self.options.kms_key_id
        return args

    def _call(self, what: str, fn: Callable[..., T], **kwargs: Any) -> T:
        with self._errors(what):
            return fn(**kwargs)

    @contextmanager
    def _errors(self, what: str) -> Iterator[None]:
        """botocore's and boto3's exceptions as one-line StorageErrors that say what to check."""
        try:
            yield
        except botocore.exceptions.ClientError as e:
            raise _client_error(self, what, e) from e
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
            raise _client_error(self, "read from", e) from e
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
                **self._sse_args(),
            )
        except botocore.exceptions.ClientError as e:
            code = e.response.get("Error", {}).get("Code")
            if code in ("NotImplemented", "501"):
                log.warning("%s has no conditional writes: reading and comparing instead, which leaves two "
                            "writers racing for one backup name a moment", self.url)  # fmt: skip
                self.conditional = False
                return self._put_compared(key, data, version)
            if code not in CONDITION_FAILED:
                raise _client_error(self, "write to", e) from e
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
                    Metadata={WRITE_ID: write_id}, **self._sse_args())  # fmt: skip
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
            **self._sse_args(),
        )

    @contextmanager
    def open_write(self, key: str) -> Iterator[Writer]:
        writer = _MultipartWriter(self, self._key(key))
        try:
            yield writer
            writer.finish()
        except BaseException:
            writer.abort()
            raise

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
            raise _client_error(self, "read from", e) from e
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
        resp = s._call(
            "write to",
            s.client.upload_part,
            Bucket=s.bucket,
            Key=self.key,
            UploadId=self.upload_id,
            PartNumber=number,
            Body=self.buffer.getvalue(),
        )
        self.parts.append({"PartNumber": number, "ETag": resp["ETag"]})
        self.buffer = io.BytesIO()

    def finish(self) -> None:
        s = self.store
        if self.upload_id is None:  # small: one PUT
            s._write(
                self.key,
                self.write_id,
                s.client.put_object,
                Bucket=s.bucket,
                Body=self.buffer.getvalue(),
                Metadata={WRITE_ID: self.write_id},
                **s._sse_args(),
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


def _client_error(store: S3Store, what: str, e: botocore.exceptions.ClientError) -> StorageError:
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


def _make_client(o: S3Options) -> Any:
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
