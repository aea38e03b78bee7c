def test_a_journal_and_its_wal_are_readable_by_their_owner_alone(tmp_path):
    """A journal names objects read from inside (perhaps encrypted) backups: 0600, whatever the umask."""
    import os
    import stat

    from statusvault.restore.core.journal import Journal

    old = os.umask(0o022)
    try:
        journal = Journal.create(tmp_path / "j.sqlite", "manager", "backup")
        journal.flush()
        modes = {p.name: stat.S_IMODE(p.stat().st_mode) for p in tmp_path.iterdir()}
        journal.close()
    finally:
        os.umask(old)
    assert modes and all(mode == 0o600 for mode in modes.values()), modes


def test_a_plan_and_its_state_lock_are_readable_by_their_owner_alone(tmp_path):
    import os
    import stat

    from statusvault.restore.core.plan import private_db

    old = os.umask(0o022)
    try:
        made = private_db(tmp_path / "plan.sqlite")
    finally:
        os.umask(old)
    assert stat.S_IMODE(made.stat().st_mode) == 0o600


def test_what_the_server_did_not_keep_is_journalled_until_the_audit_finds_it_kept_and_survives_a_reopen(tmp_path):
    import sqlite3

    from statusvault.model import ResourceType
    from statusvault.restore.core.journal import Journal
    from statusvault.restore.core.plan import Action, Category, PlanItem, StatusMode
    from statusvault.transforms import CHANGED, PRUNED, ServerChange

    rt = ResourceType("x.example.com", "v1", "gadgets", "Gadget", namespaced=True, has_status=True)
    items = [PlanItem(rt, "ns", "ns", f"g{i}", "", Category.NAMESPACED, Action.CREATE, StatusMode.SUBRESOURCE, seq=i)
             for i in range(2)]  # fmt: skip
    path = tmp_path / "j.sqlite"
    journal = Journal.create(path, "manager", "backup")
    journal.mark_changed(items[0], [ServerChange("spec.color", PRUNED, "red")])
    journal.mark_changed(items[1], [ServerChange("spec.size", CHANGED, {"n": 1})])
    journal.close()
    again = Journal.open(path)
    assert again.changed() == {0: [ServerChange("spec.color", PRUNED, "red")],
                               1: [ServerChange("spec.size", CHANGED, {"n": 1})]}  # fmt: skip
    again.kept_now([1])
    assert list(again.changed()) == [0]
    again.close()

    older = tmp_path / "older.sqlite"  # a journal from before the table: opened, and it has none
    Journal.create(older, "manager", "backup").close()
    with sqlite3.connect(older) as db:
        db.execute("DROP TABLE changed")
    assert Journal.open(older).changed() == {}
