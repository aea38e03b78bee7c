"""The hostile corpus (tests/hostile_corpus.py) against the code paths a restore and verify take before any
write: each archive is refused with one line naming the rule. tests/integration/test_hostile.py runs the
same corpus through the CLI against the real API server."""

from __future__ import annotations

import pytest

from statusvault import catalog
from statusvault.errors import StatusVaultError
from statusvault.restore.service import open_backup
from statusvault.storage.local import LocalStore
from tests.hostile import KEY, Backup
from tests.hostile_corpus import CASES, Case


def plant(case: Case, store, ns: str = "hostile"):
    name = f"hostile-{case.id.replace('_', '-')}"
    case.build(Backup.base(name, ns, case.encrypted)).write(store, name)
    return name, KEY if case.encrypted else None


def test_the_corpus_is_large_and_named():
    assert len(CASES) >= 30
    assert len({c.id for c in CASES}) == len(CASES)


@pytest.mark.parametrize("encrypted", [False, True])
def test_the_untwisted_base_reads_and_verifies(tmp_path, encrypted):
    """The base every case twists is a good backup: a refusal below is the twist's doing."""
    Backup.base("base", "hostile", encrypted).planted().write(tmp_path, "base")
    store, key = LocalStore(tmp_path), KEY if encrypted else None
    with open_backup(store, "base", key) as reader:
        assert len(list(reader.objects())) == 4
    assert catalog.verify(store, "base", key).ok


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_restore_refuses_before_any_write(tmp_path, case):
    name, key = plant(case, tmp_path)
    with pytest.raises(StatusVaultError) as refused, open_backup(LocalStore(tmp_path), name, key) as reader:
        reader.head()
        for _ in reader.objects():
            pass
    message = str(refused.value)
    assert case.error in message
    assert "\n" not in message and len(message) < 400


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_verify_fails(tmp_path, case):
    name, key = plant(case, tmp_path)
    try:
        report = catalog.verify(LocalStore(tmp_path), name, key)
    except StatusVaultError as e:
        assert "\n" not in str(e)
        return
    assert not report.ok
    assert "\n" not in catalog.describe_problems(report)
