"""What users install: the wheel carries the tool and its licence, not the test cluster builder, demo or benchmark;
the sdist carries the licence too."""

from __future__ import annotations

import shutil
import subprocess
import sys
import tarfile
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def source(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The tracked files a build reads, copied out of the checkout (nothing untracked or built gets in)."""
    tracked = subprocess.run(["git", "ls-files"], cwd=ROOT, capture_output=True, text=True, check=True).stdout
    src = tmp_path_factory.mktemp("src")
    for rel in tracked.split():
        if rel.startswith(("statusvault/", "pyproject.toml", "README.md", "LICENSE")):
            (src / rel).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(ROOT / rel, src / rel)
    return src


def build(source: Path, hook: str, out: Path) -> Path:
    """Run one of setuptools' PEP 517 hooks (build_wheel, build_sdist) and return what it built."""
    code = f"import sys; from setuptools.build_meta import {hook}; print({hook}(sys.argv[1]))"
    run = subprocess.run([sys.executable, "-c", code, str(out)], cwd=source, capture_output=True, text=True)
    assert run.returncode == 0, run.stderr[-2000:]
    return out / run.stdout.strip().splitlines()[-1]


def test_the_wheel_leaves_the_test_support_out(source, tmp_path):
    names = zipfile.ZipFile(build(source, "build_wheel", tmp_path)).namelist()
    assert not [n for n in names if n.startswith("statusvault/testing/")], "the local cluster builder runs apt-get"
    assert {"statusvault/cli/main.py", "statusvault/restore/runner.py", "statusvault/py.typed"} <= set(names)


def test_the_wheel_and_the_sdist_carry_the_licence(source, tmp_path):
    licence = (ROOT / "LICENSE").read_bytes()
    with zipfile.ZipFile(build(source, "build_wheel", tmp_path)) as wheel:
        carried = [n for n in wheel.namelist() if n.endswith(".dist-info/licenses/LICENSE")]
        assert len(carried) == 1 and wheel.read(carried[0]) == licence
        metadata = next(n for n in wheel.namelist() if n.endswith(".dist-info/METADATA"))
        fields = set(wheel.read(metadata).decode().splitlines())
    assert {"License-Expression: Apache-2.0", "License-File: LICENSE"} <= fields
    with tarfile.open(build(source, "build_sdist", tmp_path)) as sdist:
        top = sdist.getnames()[0].split("/")[0]
        member = sdist.extractfile(f"{top}/LICENSE")
        assert member is not None and member.read() == licence
