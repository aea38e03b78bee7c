"""CLI behaviour that needs no cluster: exact output and exit codes."""

from __future__ import annotations

import json

import orjson
import pytest

from statusvault import __version__
from statusvault.backup import ResourceSummary
from statusvault.cli.main import main
from statusvault.errors import ExitStatus
from tests.builders import cr, resource_type, with_meta, write_archive


@pytest.fixture
def cli(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("STATUSVAULT_STORAGE", str(tmp_path / "store"))
    monkeypatch.setenv("KUBECONFIG", str(tmp_path / "missing-kubeconfig"))

    def run(*args):
        capsys.readouterr()
        code = main(list(args))
        out, err = capsys.readouterr()
        return code, out, err

    run.store = tmp_path / "store"
    return run


def stored_backup(store, name="b1"):
    """A complete backup in the store layout, as `statusvault backup` leaves it."""
    import hashlib

    kc = resource_type("xyz.example.com", "KubernetesCluster")
    d = store / "backups" / name
    d.mkdir(parents=True)
    archive = write_archive(
        d / "archive.tar.gz",
        [(kc, with_meta(cr("xyz.example.com/v1", "KubernetesCluster", "k1", status={"a": 1}), "ns"))],
    )
    manifest = {
        "formatVersion": "1.0",
        "name": name,
        "createdAt": "2026-01-02T03:04:05Z",
        "completedAt": "2026-01-02T03:04:06Z",
        "server": {"gitVersion": "v1.20.2"},
        "selection": {},
        "tool": {},
        "resources": {kc.qualified: {**ResourceSummary(kc, 1, 1).to_dict()}},
        "totals": {"objects": 1, "withStatus": 1, "uncompressedBytes": 100},
        "archive": {"size": archive.stat().st_size, "sha256": hashlib.sha256(archive.read_bytes()).hexdigest()},
    }
    (d / "manifest.json").write_bytes(orjson.dumps(manifest))
    return archive


def test_version(cli):
    assert cli("--version") == (0, f"statusvault, version {__version__}\n", "")


def test_unknown_option_is_a_usage_error(cli):
    code, out, err = cli("backup", "--no-such-flag")
    assert code == ExitStatus.USAGE
    assert err.startswith("error: No such option") and "--no-such-flag" in err and err.count("\n") == 1


def test_list_on_an_empty_store(cli):
    code, out, err = cli("list")
    assert (code, out) == (0, f"No backups in file://{cli.store}\n")
    assert json.loads(cli("list", "-o", "json")[1]) == []


def test_describe_missing_backup(cli):
    assert cli("describe", "nope") == (ExitStatus.ERROR, "", f"error: backup 'nope' not found in file://{cli.store}\n")


def test_list_describe_and_verify_a_stored_backup(cli):
    stored_backup(cli.store)
    code, out, _ = cli("list")
    assert code == 0
    assert out.splitlines()[0].split() == ["NAME", "PHASE", "CREATED", "OBJECTS", "WITH", "STATUS", "SIZE"]
    assert out.splitlines()[1].split()[:5] == ["b1", "Completed", "2026-01-02T03:04:05Z", "1", "1"]
    code, out, _ = cli("describe", "b1")
    assert out.splitlines()[:2] == ["Name:       b1", "Phase:      Completed"]
    assert cli("verify", "b1") == (0, "Backup b1: OK (1 files checked)\n", "")


def test_verify_tampered_backup_exits_non_zero(cli):
    archive = stored_backup(cli.store)
    data = bytearray(archive.read_bytes())
    data[-20] ^= 0x55
    archive.write_bytes(bytes(data))
    code, out, err = cli("verify", "b1")
    assert code == ExitStatus.ERROR
    assert out.startswith("Backup b1: FAILED: ")
    assert err == "error: backup 'b1' failed verification\n"


def test_invalid_backup_name(cli):
    code, _, err = cli("backup", "../evil")
    assert code == ExitStatus.USAGE
    assert err == "error: invalid backup name '../evil': use ASCII letters, digits, '-', '_' and '.'\n"


def test_bad_namespace_mapping(cli):
    stored_backup(cli.store)
    code, _, err = cli("restore", "b1", "--namespace-mapping", "nocolon")
    assert code == ExitStatus.USAGE
    assert err == "error: invalid namespace-mapping entry 'nocolon': expected OLD:NEW\n"


def test_missing_kubeconfig_is_a_clear_error(cli, tmp_path):
    code, _, err = cli("--kubeconfig", str(tmp_path / "nope.yaml"), "cluster-info")
    assert code == ExitStatus.USAGE
    assert err.startswith("error: ") and len(err.splitlines()) == 1


def test_unreachable_api_server_is_a_clear_error(cli, tmp_path, monkeypatch):
    from statusvault.runtime.throttle import Backoff
    from statusvault.testing.cluster import kubeconfig_yaml

    monkeypatch.setattr(Backoff, "delay", lambda self, attempt, rng=None: 0.0)  # every retry, without the waits

    kc = tmp_path / "kc.yaml"
    kc.write_text(kubeconfig_yaml("https://127.0.0.1:1", "u", "t"))
    code, _, err = cli("--kubeconfig", str(kc), "cluster-info")
    assert code == ExitStatus.ERROR
    assert err.startswith("error: cannot reach the API server at https://127.0.0.1:1")
    assert len(err.splitlines()) == 1


def test_every_option_also_comes_from_the_environment(cli, monkeypatch):
    stored_backup(cli.store)
    monkeypatch.setenv("STATUSVAULT_LIST_OUTPUT", "json")  # STATUSVAULT_<COMMAND>_<OPTION> when not named
    code, out, _ = cli("list")
    assert code == 0 and json.loads(out)[0]["name"] == "b1"


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--lock-mode", "governance"], "--lock-mode needs --lock-for: a retention is a mode and how long it lasts"),
        (["--lock-for", "30d"], "--lock-for needs --lock-mode: a retention is a mode and how long it lasts"),
        (
            ["--lock-mode", "compliance", "--lock-for", "soon"],
            "invalid duration 'soon': use e.g. 720h, 30d, 2w or 1h30m",
        ),
    ],
    ids=["mode-alone", "duration-alone", "bad-duration"],
)
def test_a_lock_is_a_mode_and_a_duration(cli, args, message):
    assert cli("backup", *args) == (ExitStatus.USAGE, "", f"error: {message}\n")
    assert not cli.store.exists()


@pytest.mark.parametrize("args", [["--lock-mode", "governance", "--lock-for", "1d"], ["--legal-hold"]])
def test_a_directory_cannot_lock_a_backup_and_is_refused_before_the_cluster_is_asked(cli, args):
    code, out, err = cli("backup", *args)
    assert (code, out) == (ExitStatus.USAGE, "")
    assert err.startswith(f"error: file://{cli.store} cannot lock backups: Object Lock (--lock-mode, --legal-hold) "
                          "needs an S3 bucket created with Object Lock enabled")  # fmt: skip
    assert len(err.splitlines()) == 1 and not cli.store.exists()


def test_a_legal_hold_needs_a_bucket_with_object_lock(cli):
    stored_backup(cli.store)
    code, _, err = cli("hold", "set", "b1")
    assert code == ExitStatus.USAGE and err.startswith(f"error: file://{cli.store} cannot lock backups")


@pytest.mark.parametrize("names", [[], ["b1", "--all"]], ids=["neither", "both"])
def test_keys_rotate_takes_backup_names_or_all(cli, tmp_path, names):
    assert cli("keys", "rotate", "--from", "a.key", "--to", "b.key", *names) == (
        ExitStatus.USAGE, "", "error: name the backups to rotate, or pass --all (not both)\n"
    )  # fmt: skip


def test_keys_rotate_reports_each_backup_and_exits_3_when_one_fails(cli, tmp_path):
    from tests.sealed import key_file

    stored_backup(cli.store)  # not encrypted: skipped
    old, new = key_file(tmp_path, "old"), key_file(tmp_path, "new")
    code, out, err = cli("keys", "rotate", "--from", str(old), "--to", str(new), "b1", "nope", "-o", "json")
    assert code == ExitStatus.PARTIAL_FAILURE
    assert json.loads(out)["results"][0] == {"name": "b1", "action": "skipped", "detail": "not encrypted"}
    assert json.loads(out)["results"][1]["action"] == "failed"
    assert err == "error: 1 backup(s) not rotated: run the same command again once fixed\n"
