"""AWS KMS keys as key-encryption keys, on moto's server over HTTP (its S3 and KMS at one endpoint): a backup's data
key wrapped by a KMS key and a key file opens with either; the wrapping is bound to its backup (KMS's encryption
context); rotation moves backups from a key file to a KMS key and retires the file; a KMS key that does not exist
is refused before anything is written."""

from __future__ import annotations

import json

import boto3
import pytest

from statusvault.archive.envelope import FileKek, Keyring
from statusvault.archive.signing import PublicKey
from statusvault.errors import ArchiveError, ConfigError, ExitStatus
from statusvault.keys.kms import KmsKek, KmsSigner
from statusvault.storage.base import S3Options
from statusvault.storage.s3 import S3Store
from statusvault.store.backups import BackupStore
from tests.builders import unique
from tests.sealed import back_up, cluster, key_file, names_in, store_cli

pytestmark = pytest.mark.version_neutral("KMS and S3 on moto: no API server")

NAMES = ["kc-0", "kc-1", "kc-2"]


@pytest.fixture
def kms(s3_endpoint: str, monkeypatch):
    monkeypatch.setenv("AWS_ENDPOINT_URL_KMS", s3_endpoint)  # how statusvault's KMS client finds moto
    monkeypatch.setenv("AWS_REGION", "us-east-1")
    return boto3.client("kms", endpoint_url=s3_endpoint, region_name="us-east-1")


def new_key(kms) -> tuple[str, str]:
    """A KMS key: (its ARN, an alias of it)."""
    arn = kms.create_key(Description="statusvault test")["KeyMetadata"]["Arn"]
    alias = f"alias/{unique('sv')}"
    kms.create_alias(AliasName=alias, TargetKeyId=arn)
    return arn, alias


@pytest.fixture
def store(s3_endpoint: str, bucket: str) -> S3Store:
    return S3Store(bucket, "p", S3Options(endpoint_url=s3_endpoint, region="us-east-1", addressing_style="path"))


def test_a_data_key_wrapped_by_a_kms_key_and_a_key_file_opens_with_either(store, kms, tmp_path):
    arn, alias = new_key(kms)
    path = key_file(tmp_path, "k")
    back_up(cluster(), store, "b", key=Keyring((KmsKek(alias), FileKek.from_file(path))))

    wrapped = BackupStore(store).manifest("b")["encryption"]["wrappedKeys"]
    assert [(w["kek"], w["algorithm"]) for w in wrapped] == [(f"kms:{arn}", "AWS-KMS"), (FileKek.from_file(path).ref(),
                                                                                          "AES-256-GCM")]  # fmt: skip
    for name in (alias, arn, arn.rsplit("/", 1)[1]):  # every name of the key
        assert names_in(store, "b", Keyring((KmsKek(name),))) == NAMES
    assert names_in(store, "b", Keyring((FileKek.from_file(path),))) == NAMES
    code, out, err = store_cli(store, "verify", "b", "--kms-key-id", alias, "-o", "json")
    assert code == 0 and json.loads(out)["ok"] and json.loads(out)["objectsChecked"], err
    code, out, _ = store_cli(store, "describe", "b")
    assert f"Encrypted:  data key wrapped by kms:{arn}, file:" in out


def test_a_kms_wrapping_moved_to_another_backup_does_not_unwrap(store, kms):
    _, alias = new_key(kms)
    kube = cluster()
    for name in ("x", "y"):
        back_up(kube, store, name, key=Keyring((KmsKek(alias),)))
    x, y = (BackupStore(store).manifest(n) for n in ("x", "y"))
    store.put("backups/y/manifest.json", json.dumps({**y, "encryption": x["encryption"]}).encode())
    with pytest.raises(ArchiveError, match=rf"does not unwrap with KMS key {alias}: its manifest was modified"):
        names_in(store, "y", Keyring((KmsKek(alias),)))


def test_another_kms_key_is_one_line_naming_the_key_that_would_open_it(store, kms):
    (arn, alias), (_, other) = new_key(kms), new_key(kms)
    back_up(cluster(), store, "b", key=Keyring((KmsKek(alias),)))
    code, out, err = store_cli(store, "verify", "b", "--kms-key-id", other)
    assert code == ExitStatus.USAGE and out == ""
    assert err == f"error: backup 'b' was encrypted with key 'kms:{arn}', not with the given key (KMS key {other})\n"


def test_a_kms_key_that_does_not_exist_is_refused_before_anything_is_written(store, kms, s3_endpoint):
    with pytest.raises(ConfigError, match=r"^cannot find KMS key alias/nope \(NotFoundException"):
        back_up(cluster(), store, "b", key=Keyring((KmsKek("alias/nope"),)))
    assert boto3.client("s3", endpoint_url=s3_endpoint).list_objects_v2(Bucket=store.bucket)["KeyCount"] == 0


def test_rotating_from_a_key_file_to_a_kms_key_retires_the_file(store, kms, tmp_path):
    arn, alias = new_key(kms)
    path = key_file(tmp_path, "old")
    kube = cluster()
    for name in ("a", "b"):
        back_up(kube, store, name, key=Keyring((FileKek.from_file(path),)))

    rotate = ["keys", "rotate", "--from", str(path), "--to", f"kms:{alias}"]
    code, out, err = store_cli(store, *rotate, "--all", "--retire", "-o", "json")

    assert code == 0, err
    assert [(r["name"], r["action"]) for r in json.loads(out)["results"]] == [("a", "retired"), ("b", "retired")]
    assert names_in(store, "a", Keyring((KmsKek(arn),))) == NAMES
    with pytest.raises(ConfigError, match=rf"^key file {path} was retired from backup 'a'"):
        names_in(store, "a", Keyring((FileKek.from_file(path),)))
    code, out, err = store_cli(store, *rotate, "a")
    assert code == 0 and "unchanged" in out, "a second run finds nothing to do"


def test_a_backup_signed_by_a_kms_key_verifies_with_its_public_key_and_refuses_a_change(store, kms, tmp_path):
    """An asymmetric KMS key signs (its private key never leaves KMS); a verifier needs only GetPublicKey, or the
    public key exported to a PEM file."""
    arn = kms.create_key(KeySpec="ECC_NIST_P256", KeyUsage="SIGN_VERIFY")["KeyMetadata"]["Arn"]
    back_up(cluster(), store, "b", signer=KmsSigner(arn))
    signature = BackupStore(store).manifest("b")["signature"]
    public = KmsKek(arn).public_key()
    assert (signature["algorithm"], signature["keyId"]) == ("ECDSA_SHA_256", public.id)

    code, out, err = store_cli(store, "verify", "b", "--verify-kms-key-id", arn, "-o", "json")
    assert code == 0 and json.loads(out)["signedBy"] == public.id, err
    pem = tmp_path / "kms.pub"
    pem.write_bytes(_pem(kms.get_public_key(KeyId=arn)["PublicKey"]))
    assert names_in(store, "b", Keyring((), (PublicKey.from_file(pem),))) == NAMES

    m = BackupStore(store).manifest("b")
    store.put("backups/b/manifest.json", json.dumps({**m, "schedule": "nightly"}).encode())
    with pytest.raises(ArchiveError, match=f"the signature of backup 'b' does not verify with key {public.id}"):
        names_in(store, "b", Keyring((), (public,)))


def test_a_kms_key_that_cannot_sign_is_refused_before_anything_is_written(store, kms):
    arn, _ = new_key(kms)  # a symmetric key: it encrypts, it does not sign (moto serves a public key all the same)
    with pytest.raises(ConfigError, match=f"(cannot read the public key of KMS key {arn}|KMS key {arn} is not an)"):
        back_up(cluster(), store, "b", signer=KmsSigner(arn))
    assert list(store.list("backups/")) == []


def _pem(der: bytes) -> bytes:
    from cryptography.hazmat.primitives import serialization

    public = serialization.load_der_public_key(der)
    return public.public_bytes(serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo)
