"""The restore-state fixture of this release: a restore killed part-way, as it left its journal, its plan and the
cluster, kept so that every later statusvault is tested to resume it (a restore stopped by one version
must resume under the next, never silently start over).

    python -m tests.journalfixture regenerate

writes fixtures/restore-state/v2/: `store/` (backup `b`: six KubernetesClusters with status, in namespace team-a),
`journal.sqlite` and `plan.sqlite` (a restore of it with `--parallel 1`, stopped after its third object was created,
state key version 2), `cluster.json` (every object the target cluster held when it stopped) and `meta.json` (the
release and key that wrote them). Regenerating must never be done to make a test pass: the files are what this
release wrote, and the next one must read them."""

from __future__ import annotations

import shutil
import sys
import tempfile
import threading
from pathlib import Path
from typing import Any

import orjson

from statusvault import __version__
from statusvault.restore.runner import RestoreRequest, run_restore
from statusvault.restore.running.state import KEY_VERSION
from statusvault.storage.local import LocalStore
from statusvault.vocabulary.kinds import CRDS, NAMESPACES
from tests.builders import kc_status
from tests.fake import FakeKube
from tests.sealed import KC, NS, back_up, cluster

HERE = Path(__file__).resolve().parent.parent / "fixtures" / "restore-state" / "v2"
OBJECTS = 6
STOP_AFTER = 3  # objects created (namespace first) when the run is stopped


def source() -> FakeKube:
    """The cluster backed up: the namespace, the CRD, and OBJECTS KubernetesClusters, each given its status by
    its operator (a /status write)."""
    kube = cluster(OBJECTS)
    for i in range(OBJECTS):
        live = kube.get(KC, NS, f"kc-{i}")
        kube.replace(KC, NS, f"kc-{i}", {**live, "status": kc_status(i)}, sub="status", manager="kc-operator")
    return kube


def target() -> FakeKube:
    """The cluster restored into: the CRD only (the namespace and objects come from the backup)."""
    kube = FakeKube()
    for page in cluster(0).list_pages(CRDS, None):
        for crd in page:
            kube.put(CRDS, crd)
    return kube


def discover(kube: FakeKube) -> Any:
    return lambda refresh: kube.discovery(NAMESPACES)


def regenerate(out: Path = HERE) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        store = LocalStore(Path(tmp) / "store")
        back_up(source(), store, "b")
        kube, cancel, created = target(), threading.Event(), []
        create = kube.create

        def stop_after(*args: Any, **kw: Any) -> Any:
            made = create(*args, **kw)
            created.append(made)
            if len(created) >= STOP_AFTER:
                cancel.set()
            return made

        kube.create = stop_after  # type: ignore[method-assign]
        state = Path(tmp) / "state"
        request = RestoreRequest(store=store, backup="b", state_dir=state, parallel=1, stream=False, cancel=cancel)
        report = run_restore(kube, discover(kube), request)
        assert report.aborted, "the run was to stop part-way"
        (journal,) = (state / "restores").glob("*.journal.sqlite")
        key = journal.name.removesuffix(".journal.sqlite")
        if out.exists():
            shutil.rmtree(out)
        out.mkdir(parents=True)
        shutil.copytree(store.root, out / "store")
        shutil.copyfile(journal, out / "journal.sqlite")
        shutil.copyfile(state / "restores" / f"{key}.plan.sqlite", out / "plan.sqlite")
        objects = [o for rt in (NAMESPACES, KC) for page in kube.list_pages(rt, None) for o in page]
        (out / "cluster.json").write_bytes(orjson.dumps(objects, option=orjson.OPT_INDENT_2))
        meta = {"release": __version__, "keyVersion": KEY_VERSION, "key": key, "stoppedAfter": STOP_AFTER}
        (out / "meta.json").write_bytes(orjson.dumps(meta, option=orjson.OPT_INDENT_2))


if __name__ == "__main__":
    if sys.argv[1:] != ["regenerate"]:
        sys.exit("usage: python -m tests.journalfixture regenerate")
    regenerate()
