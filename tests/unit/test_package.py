"""What users install: the wheel carries the tool, not the test cluster builder, demo or benchmark."""

from __future__ import annotations

import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_the_wheel_leaves_the_test_support_out(tmp_path):
    tracked = subprocess.run(["git", "ls-files"], cwd=ROOT, capture_output=True, text=True, check=True).stdout
    src = tmp_path / "src"
    for rel in tracked.split():
        if rel.startswith(("statusvault/", "pyproject.toml", "README.md")):
            (src / rel).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(ROOT / rel, src / rel)
    build = "import sys; from setuptools.build_meta import build_wheel; print(build_wheel(sys.argv[1]))"
    out = subprocess.run([sys.executable, "-c", build, str(tmp_path)], cwd=src, capture_output=True, text=True)
    assert out.returncode == 0, out.stderr[-2000:]
    names = zipfile.ZipFile(tmp_path / out.stdout.strip().splitlines()[-1]).namelist()
    assert not [n for n in names if n.startswith("statusvault/testing/")], "the local cluster builder runs apt-get"
    assert {"statusvault/cli/main.py", "statusvault/restore/runner.py", "statusvault/py.typed"} <= set(names)
