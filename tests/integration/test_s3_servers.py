"""The S3 store on each S3 server over HTTP, moto's and versitygw (a real S3-compatible server): the ObjectStore
contract of tests/unit/test_storage.py, and an encrypted backup's life (made, read, verified, its key rotated
and retired, pruned) end to end. No cluster: backups of an in-memory one (tests/sealed.py)."""

from __future__ import annotations

import boto3
import pytest

from statusvault.archive.envelope import FileKek, Keyring
from statusvault.errors import ConfigError
from statusvault.keys import rotation as keys
from statusvault.storage.base import S3Options
from statusvault.storage.s3 import S3Store
from statusvault.store import catalog
from statusvault.store.retention import RetentionPolicy
from tests.builders import unique
from tests.sealed import back_up, cluster, key_file, names_in
from tests.unit import test_storage as contract

pytestmark = pytest.mark.version_neutral("S3 servers only: no API server")

CONTRACT = [
    contract.test_whole_objects_round_trip,
    contract.test_get_reads_at_most_limit_bytes,
    contract.test_list_is_by_key_prefix,
    contract.test_a_streamed_write_appears_only_when_it_completes,
    contract.test_local_file_holds_the_object_while_open,
    contract.test_a_conditional_write_wins_only_where_the_condition_holds,
]


@pytest.fixture
def store(s3_server: str) -> S3Store:
    name = unique("srv")
    boto3.client("s3", endpoint_url=s3_server, region_name="us-east-1").create_bucket(Bucket=name)
    return S3Store(name, "p", S3Options(endpoint_url=s3_server, region="us-east-1", addressing_style="path"))


@pytest.mark.parametrize("check", CONTRACT, ids=[c.__name__.removeprefix("test_") for c in CONTRACT])
def test_the_object_store_contract_holds(check, store):
    check(store)
    assert store.conditional, "If-None-Match / If-Match are native, not read-and-compare"


def test_an_encrypted_backup_is_made_read_verified_rotated_and_pruned(store, tmp_path):
    old, new = (FileKek.from_file(key_file(tmp_path, n)) for n in ("old", "new"))
    kube = cluster()
    for name in ("nightly-1", "nightly-2"):
        back_up(kube, store, name, key=Keyring((old,)))
    assert names_in(store, "nightly-1", Keyring((old,))) == ["kc-0", "kc-1", "kc-2"]

    rotation = keys.rotate(store, [], old, new, retire=True)

    assert [r.action for r in rotation.results] == ["retired", "retired"]
    assert catalog.verify(store, "nightly-2", Keyring((new,))).ok
    with pytest.raises(ConfigError, match="was retired from backup 'nightly-2'"):
        catalog.verify(store, "nightly-2", Keyring((old,)))
    pruned = catalog.prune(store, RetentionPolicy(keep_last=1))
    assert [(d.name, d.delete) for d in pruned] == [("nightly-1", True), ("nightly-2", False)]
    assert [b.name for b in catalog.list_backups(store)] == ["nightly-2"]
