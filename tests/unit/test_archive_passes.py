"""How often a whole restore reads its archive, counted rather than assumed (docs/development/architecture.md,
*How often a restore reads the archive*): the first, checking read plans as it goes and keeps the objects of a small
archive for the waves; of a larger one, each wave that has objects to send walks the archive from its start, up to the
wave's last object."""

from __future__ import annotations

import os
from pathlib import Path

import orjson
import pytest

from statusvault.archive import check as archivecheck
from statusvault.archive import reader as archivereader
from statusvault.archive.stream import TarStream
from statusvault.kube.discovery import Discovery
from statusvault.restore import runner
from statusvault.restore.runner import RestoreRequest, run_restore
from statusvault.storage.local import LocalStore
from statusvault.vocabulary.kinds import NAMESPACES
from tests.fake import FakeKube
from tests.hostile import KC, POOL, Backup

NS = "passes"
TYPES = [KC, POOL, NAMESPACES]


@pytest.fixture
def passes(monkeypatch) -> list[TarStream]:
    """Every pass over an archive's tar.gz (each inflates it from its start), in the order they began."""
    opened: list[TarStream] = []

    class Counted(TarStream):
        def __init__(self, path: Path, budget: int):
            super().__init__(path, budget)
            opened.append(self)

    monkeypatch.setattr(archivecheck, "TarStream", Counted)
    monkeypatch.setattr(archivereader, "TarStream", Counted)
    return opened


@pytest.fixture
def store(tmp_path) -> LocalStore:
    """A backup of a ClusterPool, a Namespace and two KubernetesClusters, `dev` (the last, 1 MB) owned by `prod`."""
    b = Backup.base("b", NS)
    prod_path, dev_path = b.path(KC.qualified, "prod", NS), b.path(KC.qualified, "dev", NS)
    prod, dev = (orjson.loads(dict(b.members)[p]) for p in (prod_path, dev_path))
    prod["metadata"]["uid"] = "uid-prod"
    dev["spec"]["blob"] = os.urandom(500_000).hex()
    dev["metadata"]["ownerReferences"] = [
        {"apiVersion": prod["apiVersion"], "kind": prod["kind"], "name": "prod", "uid": "uid-prod"}
    ]
    b.replace(prod_path, orjson.dumps(prod, option=orjson.OPT_SORT_KEYS))
    b.replace(dev_path, orjson.dumps(dev, option=orjson.OPT_SORT_KEYS))
    b.restate()
    b.planted().write(tmp_path, "b")
    return LocalStore(tmp_path)


def restore(
    fake: FakeKube, store: LocalStore, stream: bool = False, state: Path | None = None, ok: bool = True
) -> None:
    request = RestoreRequest(store=store, backup="b", parallel=2, stream=stream, state_dir=state)
    report = run_restore(fake, lambda refresh: Discovery(TYPES, TYPES), request)
    assert report.work_complete == ok, [r.to_dict() for r in report.attention]
    report.close()


def test_a_restore_of_a_small_archive_reads_it_once_and_hands_the_waves_what_that_read_kept(passes, store):
    fake = FakeKube()
    restore(fake, store)
    assert len(passes) == 1
    assert (
        fake.get(KC, NS, "dev")["metadata"]["ownerReferences"][0]["uid"] == fake.get(KC, NS, "prod")["metadata"]["uid"]
    )
    assert len(fake.get(KC, NS, "dev")["spec"]["blob"]) == 1_000_000, "the kept bytes are the object's, whole"


def test_a_restore_reads_the_archive_once_to_check_and_plan_then_once_per_wave(passes, store, monkeypatch):
    """Above what planning keeps (here less than dev's 1 MB, after the smaller objects before it fit)."""
    monkeypatch.setattr(runner, "KEPT_FOR_THE_WAVES", 100_000)
    fake = FakeKube()
    restore(fake, store)
    assert (
        fake.get(KC, NS, "dev")["metadata"]["ownerReferences"][0]["uid"] == fake.get(KC, NS, "prod")["metadata"]["uid"]
    )
    # waves: Namespace; cluster-scoped (the pool); namespaced at owner depth 0 (prod), at depth 1 (dev)
    assert len(passes) == 1 + 4
    first, *waves = (p.inflated for p in passes)
    assert all(w < first / 4 for w in waves[:3]), "a wave's walk stops after its last object: before dev"
    assert first / 2 < waves[3] <= first


def test_a_resumed_restore_of_a_small_archive_reads_it_once_too(passes, store, tmp_path):
    """A resumed run does not plan: its first wave's checking read keeps the objects for the later waves."""
    fake = FakeKube()
    fake.fail("create", KC, 403, times=1, name="dev")
    restore(fake, store, state=tmp_path / "state", ok=False)
    assert fake.get(KC, NS, "dev") is None
    passes.clear()
    restore(fake, store, state=tmp_path / "state")
    assert len(passes) == 1, "the checking read only"
    assert len(fake.get(KC, NS, "dev")["spec"]["blob"]) == 1_000_000


def test_waves_with_nothing_to_send_do_not_read_the_archive(passes, store, monkeypatch):
    """Everything exists already (policy none): the first read plans, and no wave reads again (even where the
    first read keeps nothing)."""
    monkeypatch.setattr(runner, "KEPT_FOR_THE_WAVES", 0)
    fake = FakeKube()
    restore(fake, store)
    passes.clear()
    restore(fake, store)
    assert len(passes) == 1


def test_a_streamed_restore_writes_during_the_first_read_then_reads_once_for_the_owned(passes, store, monkeypatch):
    """--stream: the pool, the namespace and prod are created while the first read goes on; dev (owned by prod)
    waits for the one wave after it, and gets prod's new UID."""
    fake = FakeKube()
    read_when_created: dict[str, int] = {}
    create = fake.create

    def recorded(rt, namespace, body, *args, **kw):  # type: ignore[no-untyped-def]
        read_when_created[body["metadata"]["name"]] = passes[-1].inflated if len(passes) == 1 else -1
        return create(rt, namespace, body, *args, **kw)

    monkeypatch.setattr(fake, "create", recorded)
    restore(fake, store, stream=True)
    assert (
        fake.get(KC, NS, "dev")["metadata"]["ownerReferences"][0]["uid"] == fake.get(KC, NS, "prod")["metadata"]["uid"]
    )
    assert len(passes) == 1 + 1, "the first read streams; one wave (owner depth 1: dev) reads again"
    first = passes[0].inflated
    assert 0 < read_when_created["prod"] < first / 2, "prod was written before the first read reached dev (1 MB)"
    assert read_when_created["dev"] == -1, "dev was written in the wave after the first read"


def test_the_first_read_keeps_the_objects_only_while_they_fit(store):
    """All of them in archive order when they fit; none (not a part) when they do not, found part-way (a summary
    manifest without uncompressedBytes leaves the bound to the read)."""
    path = store.root / "backups" / "b" / "archive.tar.gz"
    whole = archivecheck.first_read(path, 1 << 30, keep=1 << 30)
    assert whole.members is not None
    assert [p for p, _ in whole.members] == [p for p, _ in whole.checked().entries()]
    assert sum(len(d) for _, d in whole.members) > 1_000_000
    assert archivecheck.first_read(path, 1 << 30, keep=100_000).members is None
    assert archivecheck.first_read(path, 1 << 30).members is None
    reader = archivereader.ArchiveReader(path)
    reader.keep = 100_000
    assert [p for p, _ in reader.objects()] == [p for p, _ in whole.members], "read from the archive, the same"


def test_a_restore_keeps_nothing_when_the_summary_says_the_objects_hold_more(store):
    reader = archivereader.ArchiveReader(
        Path(), summary={"totals": {"uncompressedBytes": runner.KEPT_FOR_THE_WAVES + 1}}
    )
    assert runner._kept_for_the_waves(reader, stream=False) == 0
    reader.summary = {"totals": {"uncompressedBytes": 5}}
    assert runner._kept_for_the_waves(reader, stream=False) == runner.KEPT_FOR_THE_WAVES
    assert runner._kept_for_the_waves(reader, stream=True) == 0
    reader.summary = {}
    assert runner._kept_for_the_waves(reader, stream=False) == runner.KEPT_FOR_THE_WAVES
