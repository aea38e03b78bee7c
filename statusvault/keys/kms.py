"""AWS KMS keys. As a key-encryption key (archive/envelope.py's Kek): it wraps each backup's data key with Encrypt,
the backup's name, archive SHA-256 and data key ID as the encryption context, and unwraps it with Decrypt. As a
signing key (archive/signing.py's Signer): an asymmetric ECC_NIST_P256 key signs with ECDSA_SHA_256, its private
key never leaving KMS; a verifier needs only its public key (GetPublicKey, or the key exported to a PEM file).

The client takes boto3's standard configuration: credentials, AWS_REGION (or the region of a key ARN) and
AWS_ENDPOINT_URL_KMS for a KMS-compatible endpoint."""

from __future__ import annotations

from typing import Any

import boto3
import botocore.config
import botocore.exceptions

from statusvault.archive.signing import ECDSA_SHA_256, PublicKey
from statusvault.errors import ConfigError, StorageError

ALGORITHM = "AWS-KMS"
NOT_THIS_KEY = ("InvalidCiphertextException", "IncorrectKeyException")


class _KmsKey:
    """One KMS key and the client that reaches it."""

    def __init__(self, key_id: str, region: str | None = None, profile: str | None = None, client: Any = None):
        if not key_id:
            raise ConfigError("a KMS key is named by its ID, ARN or alias (alias/NAME)")
        self.given = key_id  # as the user named it: an ID, an ARN or alias/NAME
        self.name = f"KMS key {key_id}"
        self._region = _region_of(key_id) or region
        self._profile = profile
        self._client = client
        self._arn = key_id if key_id.startswith("arn:") and ":key/" in key_id else ""

    @property
    def client(self) -> Any:
        if self._client is None:
            config = botocore.config.Config(retries={"max_attempts": 5, "mode": "standard"}, connect_timeout=10)
            try:
                session = boto3.session.Session(profile_name=self._profile, region_name=self._region)
            except botocore.exceptions.ProfileNotFound as e:
                raise ConfigError(f"AWS profile not found: {self._profile}") from e
            self._client = session.client("kms", config=config)
        return self._client

    def ref(self) -> str:
        """ "kms:" and the key's ARN (an alias or key ID is resolved once, so every name of a key matches)."""
        if not self._arn:
            self._arn = str(self._call("find", self.client.describe_key, KeyId=self.given)["KeyMetadata"]["Arn"])
        return f"kms:{self._arn}"

    def public_key(self) -> PublicKey:
        """The key's public half (GetPublicKey), as a signature verifier."""
        resp = self._call("read the public key of", self.client.get_public_key, KeyId=self.given)
        return PublicKey.from_der(bytes(resp["PublicKey"]), self.name)

    def _call(self, what: str, fn: Any, **kwargs: Any) -> Any:
        try:
            return fn(**kwargs)
        except botocore.exceptions.ClientError as e:
            raise self._error(what, e) from e
        except botocore.exceptions.NoCredentialsError as e:
            raise ConfigError(f"no AWS credentials found to use {self.name}") from e
        except botocore.exceptions.BotoCoreError as e:
            raise StorageError(f"cannot {what} {self.name}: {e}") from e

    def _error(self, what: str, e: botocore.exceptions.ClientError) -> ConfigError | StorageError:
        err = e.response.get("Error", {})
        code = str(err.get("Code", ""))
        said = f"{code}: {err.get('Message', '')}".strip(": ")
        if code in ("NotFoundException", "AccessDeniedException", "DisabledException", "KMSInvalidStateException"):
            return ConfigError(f"cannot {what} {self.name} ({said})")
        return StorageError(f"cannot {what} {self.name}: {said}")


class KmsKek(_KmsKey):
    algorithm = ALGORITHM

    def wrap(self, secret: bytes, context: dict[str, str]) -> bytes:
        arn = self.ref().removeprefix("kms:")
        resp = self._call("encrypt with", self.client.encrypt, KeyId=arn, Plaintext=secret, EncryptionContext=context)
        return bytes(resp["CiphertextBlob"])

    def unwrap(self, wrapped: bytes, context: dict[str, str]) -> bytes | None:
        arn = self.ref().removeprefix("kms:")
        try:
            resp = self.client.decrypt(CiphertextBlob=wrapped, EncryptionContext=context, KeyId=arn)
        except botocore.exceptions.ClientError as e:
            if e.response.get("Error", {}).get("Code") in NOT_THIS_KEY:
                return None
            raise self._error("decrypt with", e) from e
        except botocore.exceptions.BotoCoreError as e:
            raise StorageError(f"cannot decrypt with {self.name}: {e}") from e
        return bytes(resp["Plaintext"])


class KmsSigner(_KmsKey):
    """An asymmetric KMS key (ECC_NIST_P256) that signs backups' statements with ECDSA_SHA_256."""

    algorithm = ECDSA_SHA_256

    def __init__(self, key_id: str, **kwargs: Any):
        super().__init__(key_id, **kwargs)
        self._id = ""

    def key_id(self) -> str:
        if not self._id:
            public = self.public_key()
            if public.algorithm != ECDSA_SHA_256:
                raise ConfigError(f"{self.name} is not an ECC_NIST_P256 signing key")
            self._id = public.id
        return self._id

    def sign(self, message: bytes) -> bytes:
        self.key_id()  # the right kind of key, found, before it signs
        resp = self._call(
            "sign with", self.client.sign, KeyId=self.ref().removeprefix("kms:"), Message=message, MessageType="RAW",
            SigningAlgorithm=ECDSA_SHA_256,
        )  # fmt: skip
        return bytes(resp["Signature"])


def _region_of(key_id: str) -> str | None:
    """The region of a key ARN (arn:aws:kms:REGION:ACCOUNT:key/ID), None for a key ID or an alias."""
    parts = key_id.split(":")
    return parts[3] if len(parts) > 5 and parts[0] == "arn" and parts[3] else None
