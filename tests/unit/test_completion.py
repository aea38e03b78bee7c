"""Shell completion on click's machinery: the scripts `completion` prints, the answers to a shell's completion
request, backup names from the storage, and the kubectl plugin's (its program name, cobra's answer format)."""

from __future__ import annotations

import functools
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from statusvault.cli.completion import CobraComplete
from statusvault.cli.main import KUBECTL_PROG_NAME, cli, main
from statusvault.errors import ExitStatus
from statusvault.storage import LocalStore, archive_key, manifest_key

VENV_BIN = Path(sys.executable).parent  # the installed `statusvault` the scripts call


@pytest.fixture
def store(tmp_path, monkeypatch) -> LocalStore:
    """The storage of the command being completed: two complete backups, and one a run is still writing."""
    root = tmp_path / "store"
    monkeypatch.setenv("STATUSVAULT_STORAGE", str(root))
    local = LocalStore(root)
    for name in ("nightly-1", "nightly-2"):
        local.put(archive_key(name), b"archive")
        local.put(manifest_key(name), b"{}")
    local.put(archive_key("nightly-3"), b"half an archive")
    return local


def script(shell: str, capsys) -> str:
    capsys.readouterr()
    assert main(["completion", shell]) == ExitStatus.SUCCESS
    return capsys.readouterr().out


def test_the_bash_script_is_valid_bash(capsys, tmp_path):
    path = tmp_path / "statusvault.bash"
    path.write_text(script("bash", capsys))
    subprocess.run(["bash", "-n", str(path)], check=True)
    assert "complete -o nosort -F _statusvault_completion statusvault" in path.read_text()


@pytest.mark.parametrize(
    "shell, line", [("zsh", "#compdef statusvault"), ("fish", "complete --no-files --command statusvault")]
)
def test_the_zsh_and_fish_scripts_complete_statusvault(capsys, shell, line):
    text = script(shell, capsys)
    assert line in text and "_STATUSVAULT_COMPLETE" in text
    if shutil.which(shell):
        subprocess.run([shell, "-n" if shell == "zsh" else "--no-execute", "-c", text], check=True)


@functools.cache
def bash_script() -> str:
    run = subprocess.run([VENV_BIN / "statusvault", "completion", "bash"], capture_output=True, text=True, check=True)
    return run.stdout


def bash_complete(*words: str) -> list[str]:
    """What the bash script's function puts in COMPREPLY for the command line `words` (the last one being typed)."""
    line = " ".join(f"'{w}'" for w in words)
    program = (
        f"{bash_script()}\nCOMP_WORDS=({line}); COMP_CWORD={len(words) - 1}\n"
        '_statusvault_completion statusvault\nprintf "%s\\n" "${COMPREPLY[@]}"'
    )
    env = {**os.environ, "PATH": f"{VENV_BIN}{os.pathsep}{os.environ['PATH']}"}
    out = subprocess.run(["bash", "-c", program], capture_output=True, text=True, check=True, env=env).stdout
    return out.split()


def test_bash_completes_subcommands_options_and_choices():
    assert bash_complete("statusvault", "res") == ["restore"]
    assert {"backup", "restore", "version", "completion"} <= set(bash_complete("statusvault", ""))
    assert {"--client", "--output"} <= set(bash_complete("statusvault", "version", "--"))
    assert bash_complete("statusvault", "version", "-o", "") == ["text", "json", "yaml"]


def completion_request(capsys, monkeypatch, words: list[str]) -> list[str]:
    """The answer to a bash completion request, as the script asks it (COMP_WORDS, COMP_CWORD), in-process."""
    monkeypatch.setenv("_STATUSVAULT_COMPLETE", "bash_complete")
    monkeypatch.setenv("COMP_WORDS", " ".join(words))
    monkeypatch.setenv("COMP_CWORD", str(len(words) - 1))
    capsys.readouterr()
    with pytest.raises(SystemExit) as done:
        main([])
    assert done.value.code == 0
    return [line for line in capsys.readouterr().out.splitlines() if line]


def test_a_completion_request_offers_subcommands_and_options(capsys, monkeypatch):
    assert completion_request(capsys, monkeypatch, ["statusvault", "co"]) == ["plain,completion", "plain,controller"]
    assert "plain,--dry-run" in completion_request(capsys, monkeypatch, ["statusvault", "restore", "--d"])
    assert completion_request(capsys, monkeypatch, ["statusvault", "completion", ""]) == [
        "plain,bash",
        "plain,zsh",
        "plain,fish",
    ]


def test_backup_names_come_from_the_storage_complete_ones_only(capsys, monkeypatch, store):
    offered = ["plain,nightly-1", "plain,nightly-2"]
    assert completion_request(capsys, monkeypatch, ["statusvault", "restore", "night"]) == offered
    assert completion_request(capsys, monkeypatch, ["statusvault", "describe", "nightly-2"]) == ["plain,nightly-2"]
    assert completion_request(capsys, monkeypatch, ["statusvault", "keys", "rotate", ""]) == offered


def test_backup_names_are_not_listed_from_s3_or_a_missing_directory(capsys, monkeypatch, store, tmp_path):
    assert completion_request(capsys, monkeypatch, ["statusvault", "restore", "--storage", "s3://b/p", ""]) == []
    missing = str(tmp_path / "nowhere")
    assert completion_request(capsys, monkeypatch, ["statusvault", "verify", "--storage", missing, ""]) == []
    assert not Path(missing).exists()


def cobra(*words: str) -> list[str]:
    return CobraComplete(cli, list(words), KUBECTL_PROG_NAME).complete().splitlines()


def test_kubectl_plugin_completion_answers_in_cobras_format(store):
    answer = cobra("res")
    assert [line.split("\t")[0] for line in answer] == ["restore", ":4"], "a candidate a line, then NoFileComp"
    assert answer[0].startswith("restore\tRestore a backup")
    assert cobra("restore", "") == ["nightly-1", "nightly-2", ":4"]
    assert cobra("version", "--output", "") == ["text", "json", "yaml", ":4"]
    assert cobra("restore", "--dry-run=") == ["none", "client", "server", ":4"], "a command's own modes"
    assert cobra("prune", "--dry-run=") == ["none", "client", ":4"]
    assert cobra("--kubeconfig", "") == [":0"], "a file name: the shell's own completion (Default)"
    assert cobra() == cobra("")


def test_under_kubectl_usage_lines_name_kubectl_statusvault(capsys):
    assert main(["--help"], prog_name=KUBECTL_PROG_NAME) == ExitStatus.SUCCESS
    assert capsys.readouterr().out.startswith("Usage: kubectl statusvault [OPTIONS] COMMAND [ARGS]...\n")
    assert main(["restore", "-h"], prog_name=KUBECTL_PROG_NAME) == ExitStatus.SUCCESS
    assert capsys.readouterr().out.startswith("Usage: kubectl statusvault restore [OPTIONS] BACKUP\n")
