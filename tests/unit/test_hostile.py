"""The hostile corpus (tests/hostile_corpus.py) against the code paths a restore and verify take before any
write: each archive is refused with one line naming the rule. tests/integration/test_hostile.py runs the
same corpus through the CLI against the real API server."""

from __future__ import annotations

import orjson
import pytest

from statusvault.archive import check as archivecheck
from statusvault.archive import reader as archivereader
from statusvault.archive.format import MAX_MANIFEST_BYTES, stream_bound
from statusvault.archive.stream import STEP, TarStream
from statusvault.errors import ArchiveError, StatusVaultError
from statusvault.kube.discovery import Discovery
from statusvault.restore.runner import RestoreRequest, open_backup, run_restore
from statusvault.storage.local import LocalStore
from statusvault.store import catalog
from statusvault.vocabulary.kinds import NAMESPACES
from tests.fake import FakeKube
from tests.hostile import KC, KEY, POOL, Backup
from tests.hostile_cases import MiB
from tests.hostile_corpus import CASES, Case


def plant(case: Case, store, ns: str = "hostile"):
    name = f"hostile-{case.id.replace('_', '-')}"
    case.build(Backup.base(name, ns, case.encrypted)).write(store, name)
    return name, KEY if case.encrypted else None


@pytest.fixture(scope="module")
def planted(tmp_path_factory):
    """A case's archive, built once for the module's tests (they only read it): the large cases take seconds."""
    root, built = tmp_path_factory.mktemp("hostile"), {}

    def _planted(case: Case):
        if case.id not in built:
            built[case.id] = plant(case, root)
        return root, *built[case.id]

    return _planted


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
def test_restore_refuses_before_any_write(planted, case):
    root, name, key = planted(case)
    with pytest.raises(StatusVaultError) as refused, open_backup(LocalStore(root), name, key) as reader:
        reader.head()
        for _ in reader.objects():
            pass
    message = str(refused.value)
    assert case.error in message
    assert "\n" not in message and len(message) < 400


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_verify_fails(planted, case):
    root, name, key = planted(case)
    try:
        report = catalog.verify(LocalStore(root), name, key)
    except StatusVaultError as e:
        assert "\n" not in str(e)
        return
    assert not report.ok
    assert "\n" not in catalog.describe_problems(report)


def test_a_restore_stops_inflating_at_the_summary_manifests_bound(planted, monkeypatch):
    """Forty 15 MiB objects (600 MiB) where the summary manifest says a few KiB: the restore's first read is
    bounded by the summary's totals (its uncompressedBytes, tar framing per member and the embedded manifest's
    limit: `stream_bound`), not by the format's maxima (64 GiB), and refused before any write."""
    root, name, key = planted(next(c for c in CASES if c.id == "decompression_bomb"))
    summary = orjson.loads((root / "backups" / name / "manifest.json").read_bytes())
    streams: list[TarStream] = []

    class Counted(TarStream):
        def __init__(self, path, budget: int):
            super().__init__(path, budget)
            streams.append(self)

    monkeypatch.setattr(archivecheck, "TarStream", Counted)
    monkeypatch.setattr(archivereader, "TarStream", Counted)
    fake = FakeKube()
    types = [KC, POOL, NAMESPACES]
    with pytest.raises(ArchiveError, match="inflates to more than") as refused:
        run_restore(
            fake,
            lambda refresh: Discovery(types, types),
            RestoreRequest(store=LocalStore(root), backup=name, key=key),
        )
    bound = stream_bound(summary)
    assert f"{bound:,} bytes" in str(refused.value)
    assert [s.inflated for s in streams] == [pytest.approx(bound, abs=STEP)], "one read, stopped at the bound"
    slack = bound - summary["totals"]["uncompressedBytes"]  # the embedded manifest's limit, 10 KiB a member
    assert slack <= MAX_MANIFEST_BYTES + (1 << 20) and bound < 40 * 15 * MiB // 2
    assert fake.calls == [] and fake.objects == {}
