"""A restore stopped by an earlier release resumes under this one: the journal, plan and cluster that
tests/journalfixture.py kept (fixtures/restore-state/v2/, written by the release that introduced state key
version 2) are put back, and this code must take the run up where it stopped: the objects it created are finished
with their saved status, nothing is created twice, and the run ends with every status exact. A change to the
journal's or plan's tables, or to how a resumed run reads them, fails here."""

from __future__ import annotations

import shutil

import orjson

from statusvault.restore.runner import RestoreRequest, _resolved, open_backup, run_restore
from statusvault.restore.running.state import KEY_VERSION
from statusvault.storage.local import LocalStore
from statusvault.vocabulary.kinds import NAMESPACES
from tests.journalfixture import HERE, OBJECTS, discover, target
from tests.sealed import KC


def test_a_restore_stopped_by_the_release_that_wrote_the_fixture_resumes_and_ends_exact(tmp_path):
    meta = orjson.loads((HERE / "meta.json").read_bytes())
    assert meta["keyVersion"] == KEY_VERSION, "a new key version must keep resuming this fixture's runs"
    shutil.copytree(HERE / "store", tmp_path / "store")
    store = LocalStore(tmp_path / "store")
    kube = target()
    left = orjson.loads((HERE / "cluster.json").read_bytes())
    for obj in left:  # as the stopped run left them: its field manager's, without status
        rt = NAMESPACES if obj["kind"] == "Namespace" else KC
        kube.objects[(rt.qualified, obj["metadata"].get("namespace", ""), obj["metadata"]["name"])] = obj
    request = RestoreRequest(store=store, backup="b", state_dir=tmp_path / "state", parallel=1, stream=False)
    with open_backup(store, "b") as reader:  # the key of this store's copy (it names the store's place)
        _, key = _resolved(kube, kube.discovery(NAMESPACES), reader, request)
    restores = tmp_path / "state" / "restores"
    restores.mkdir(parents=True)
    for part in ("journal", "plan"):
        shutil.copyfile(HERE / f"{part}.sqlite", restores / f"{key}.{part}.sqlite")
    created = []
    create = kube.create
    kube.create = lambda *a, **kw: created.append(a[2]["metadata"]["name"]) or create(*a, **kw)  # type: ignore

    report = run_restore(kube, discover(kube), request)

    assert report.work_complete and report.resumed > 0, [r.to_dict() for r in report.attention]
    assert not set(created) & {o["metadata"]["name"] for o in left}, "nothing the stopped run created, again"
    with open_backup(store, "b") as reader:
        saved = [orjson.loads(data) for _, data in reader.objects()]
    expected = {o["metadata"]["name"]: o["status"] for o in saved if o["kind"] == KC.kind}
    assert all(expected.values()), "the backup holds a status for each"
    restored = {o["metadata"]["name"]: o.get("status") for page in kube.list_pages(KC, None) for o in page}
    assert restored == expected and len(restored) == OBJECTS
    assert not list(restores.glob("*.sqlite")), "finished: its state is gone"
