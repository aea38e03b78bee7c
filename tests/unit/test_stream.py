"""restore --stream stopped part-way (running/streamed.py): the journal comes before the plan, so the same command
finishes it exactly, streamed again or planned first."""

from __future__ import annotations

import threading
from types import SimpleNamespace

import pytest

from statusvault.archive import signing
from statusvault.archive.crypto import Key
from statusvault.archive.envelope import FileKek, Keyring
from statusvault.errors import ConfigError
from statusvault.kube.discovery import Discovery
from statusvault.model import ResourceType, Selection
from statusvault.restore import runner
from statusvault.restore.core.plan import Action, Category, PlanItem, StatusMode
from statusvault.restore.options import RestoreOptions
from statusvault.restore.planning.build import _Held
from statusvault.restore.runner import STREAM_ABOVE, RestoreRequest, open_backup, run_restore, streamable
from statusvault.restore.running.streamed import StreamWriter
from statusvault.storage.local import LocalStore
from statusvault.testing.bench import synthetic_backup
from statusvault.testing.benchcore import GROUP, KIND, PLURAL
from statusvault.testing.benchcore import NAMESPACES as BENCH_NAMESPACES
from statusvault.vocabulary.kinds import NAMESPACES
from tests.fake import FakeKube

N = 40
ITEMS = ResourceType(GROUP, "v1", PLURAL, KIND, True, has_status=True, custom=True, verbs=("list", "create"))
TYPES = [ITEMS, NAMESPACES]


@pytest.mark.parametrize("streamed_again", [True, False], ids=["streamed-again", "planned-first-again"])
def test_a_streamed_restore_stopped_part_way_is_finished_exactly_by_the_same_command(
    tmp_path, monkeypatch, streamed_again
):
    store = LocalStore(tmp_path / "store")
    synthetic_backup(store, "s", N)  # N objects over 10 namespaces the target lacks: the stream creates them
    fake, cancel, made = FakeKube(), threading.Event(), []
    create = fake.create

    def counted(rt, namespace, body, *args, **kw):  # type: ignore[no-untyped-def]
        answer = create(rt, namespace, body, *args, **kw)  # a 409 raises: only successful creates count
        made.append((namespace, body["metadata"]["name"]))
        if len(made) == 15:
            cancel.set()  # as a lost Lease does: no new object is started
        return answer

    monkeypatch.setattr(fake, "create", counted)
    state = tmp_path / "state"

    def restore(stream: bool, stop: threading.Event | None):  # type: ignore[no-untyped-def]
        request = RestoreRequest(store=store, backup="s", state_dir=state, parallel=2, stream=stream, cancel=stop)
        return run_restore(fake, lambda refresh: Discovery(TYPES, TYPES), request)

    first = restore(True, cancel)
    assert first.aborted and 15 <= len(made) < N
    assert list(state.glob("restores/*.journal.sqlite")) and not list(state.glob("restores/*.plan.sqlite"))
    again = restore(streamed_again, None)

    assert again.work_complete and again.resumed > 0, [r.to_dict() for r in again.attention]
    assert len(made) == len(set(made)) == N + BENCH_NAMESPACES, "every object and namespace created once"
    restored = [o for k in range(BENCH_NAMESPACES) for page in fake.list_pages(ITEMS, f"plan-{k}") for o in page]
    assert len(restored) == N and all(o["status"]["phase"] for o in restored)
    assert not list(state.glob("restores/*.sqlite")), "finished: its state is gone"


@pytest.mark.parametrize(
    ("authenticated", "objects", "stream", "streamed"),
    [
        (True, STREAM_ABOVE + 1, None, True),  # by default an authenticated backup above the threshold streams
        (True, STREAM_ABOVE, None, False),  # ...one at or below it plans first
        (False, 10**6, None, False),  # an unauthenticated one plans first whatever it claims: its count is too
        (False, 10, True, True),  # --stream at any size
        (True, 10**6, False, False),  # --no-stream plans first at any size
    ],
)
def test_by_default_only_a_large_authenticated_backup_streams(tmp_path, authenticated, objects, stream, streamed):
    summary = {"resources": {}, "totals": {"objects": objects}}
    request = RestoreRequest(store=LocalStore(tmp_path), backup="b", stream=stream)
    reader = SimpleNamespace(summary=summary, unread=True, authenticated=authenticated)
    assert streamable(request, reader) is streamed  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("how", "authenticated"),
    [("encrypted", True), ("signed+verified", True), ("signed", False), ("plain", False)],
)
def test_an_encrypted_or_verified_backup_is_opened_unread_and_authenticated(tmp_path, how, authenticated):
    """The bug: opening an encrypted backup read its whole archive (to check the embedded name), so the default
    never streamed. An envelope's wrapped data key is bound to the name: the archive stays unread."""
    public = signing.generate(tmp_path / "s.pem")[1] if how.startswith("signed") else None
    request: dict = {}
    if how == "encrypted":
        request["key"] = Keyring((FileKek(Key(b"e" * 32)),))
    if public is not None:
        request["signer"] = signing.FileSigner.from_file(tmp_path / "s.pem")
    store = LocalStore(tmp_path / "store")
    synthetic_backup(store, "s", 50, **request)
    keys = request.get("key") or Keyring()
    if how == "signed+verified":
        keys = Keyring((), (public,))
    with open_backup(store, "s", keys) as reader:
        assert (reader.unread, reader.authenticated) == (True, authenticated)


@pytest.mark.parametrize(("stream", "streamed"), [(None, False), (True, True), (False, False)])
def test_a_restore_streams_as_told_and_a_plaintext_backup_plans_first_by_default(
    tmp_path, monkeypatch, stream, streamed
):
    """Seen from the state a stopped run leaves: a streamed run's journal comes before its plan."""
    store = LocalStore(tmp_path / "store")
    synthetic_backup(store, "s", N)
    monkeypatch.setattr(runner, "STREAM_ABOVE", 0)  # a plaintext backup still plans first by default
    fake, cancel = FakeKube(), threading.Event()
    create = fake.create

    def stop_after_one(*args, **kw):  # type: ignore[no-untyped-def]
        cancel.set()
        return create(*args, **kw)

    monkeypatch.setattr(fake, "create", stop_after_one)
    state = tmp_path / "state"
    request = RestoreRequest(store=store, backup="s", state_dir=state, parallel=2, stream=stream, cancel=cancel)
    assert run_restore(fake, lambda refresh: Discovery(TYPES, TYPES), request).aborted
    assert list(state.glob("restores/*.journal.sqlite"))
    assert bool(list(state.glob("restores/*.plan.sqlite"))) is not streamed


def streamed_selection(tmp_path, fake: FakeKube, namespace: str, **request):  # type: ignore[no-untyped-def]
    """A streamed restore of an N-object synthetic backup with -n namespace."""
    store = LocalStore(tmp_path / "store")
    synthetic_backup(store, "s", N)
    options = RestoreOptions(selection=Selection(namespaces=(namespace,)))
    req = RestoreRequest(store=store, backup="s", options=options, parallel=2, stream=True, **request)
    return run_restore(fake, lambda refresh: Discovery(TYPES, TYPES), req)


def test_a_streamed_restore_with_a_selection_writes_what_it_chose(tmp_path, monkeypatch):
    fake, streamed = FakeKube(), []
    monkeypatch.setattr(StreamWriter, "close", spy(StreamWriter.close, streamed))
    assert streamed_selection(tmp_path, fake, "plan-3").work_complete
    assert streamed, "it streamed"
    chosen = {k: [o for page in fake.list_pages(ITEMS, f"plan-{k}") for o in page] for k in range(BENCH_NAMESPACES)}
    assert len(chosen[3]) == N // BENCH_NAMESPACES and not any(chosen[k] for k in chosen if k != 3)


def test_a_streamed_selection_that_matches_nothing_fails_before_any_write(tmp_path, monkeypatch):
    fake, writes = FakeKube(), []
    monkeypatch.setattr(fake, "create", spy(fake.create, writes))
    state = tmp_path / "state"
    with pytest.raises(ConfigError, match="nothing in backup s matches --namespace nowhere"):
        streamed_selection(tmp_path, fake, "nowhere", state_dir=state)
    assert writes == []
    assert not list(state.glob("restores/*.sqlite*")), "no journal left behind, as when planning first"


def test_held_items_come_back_in_order_with_their_objects():
    held, got = _Held(), []
    first, second, third = (
        PlanItem(ITEMS, "", "ns", f"o{k}", "", Category.NAMESPACED, Action.CREATE, StatusMode.SUBRESOURCE)
        for k in range(3)
    )
    held.hold(first, {"metadata": {"name": "o0"}, "spec": {"big": "x" * 100_000}})
    held.hold(second, None)
    held.hold(third, {"metadata": {"name": "o2"}})
    assert held
    held.release(lambda item, obj: got.append((item.name, obj and obj["metadata"]["name"], obj and len(str(obj)))))
    assert [(n, o) for n, o, _ in got] == [("o0", "o0"), ("o1", None), ("o2", "o2")] and got[0][2] > 100_000
    assert not held and held.spool is None


def spy(fn, calls):  # type: ignore[no-untyped-def]
    def called(*args, **kw):  # type: ignore[no-untyped-def]
        calls.append(args)
        return fn(*args, **kw)

    return called


def test_the_restore_help_and_the_restore_resource_state_the_default_threshold():
    from click.testing import CliRunner

    from statusvault.cli.main import cli
    from statusvault.cli.specfields import DESCRIPTIONS

    assert f"more than {STREAM_ABOVE:,} objects" in DESCRIPTIONS["stream"]

    assert f"authenticated backup of more than {STREAM_ABOVE:,} objects streams" in " ".join(
        CliRunner().invoke(cli, ["restore", "--help"]).output.split()
    )
