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
