"""What users install: the wheel carries the tool and its licence, not the test cluster builder, demo or benchmark;
the sdist carries the licence too."""

from __future__ import annotations

import re
import shutil
import tarfile
import zipfile
from pathlib import Path

import pytest

from statusvault.schedule import secure_pod
from statusvault.testing.release import ROOT, build, tracked_sources

DOCKERFILE = (ROOT / "Dockerfile").read_text()


@pytest.fixture(scope="module")
def source(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The tracked files a build reads, copied out of the checkout (nothing untracked or built gets in)."""
    return tracked_sources(tmp_path_factory.mktemp("src"))


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


def test_the_image_builds_its_wheel_from_what_its_build_stage_copies(source, tmp_path):
    """No Docker engine runs here: the Dockerfile's build stage is replayed. The wheel is built from exactly the
    files its COPY lines bring in, and holds what the release's wheel holds (a file the package build reads and the
    Dockerfile leaves out, such as the licence, is missing from it)."""
    stage = DOCKERFILE.split("\nFROM ", 2)[1]
    copies = [line.split()[1:-1] for line in stage.splitlines() if line.startswith("COPY ")]
    assert copies, "the build stage copies the sources"
    context = tracked_sources(tmp_path / "context")
    image = tmp_path / "src"
    for sources in copies:
        for rel in sources:
            target = image / rel
            if (context / rel).is_dir():
                shutil.copytree(context / rel, target)
            else:
                target.parent.mkdir(parents=True, exist_ok=True)
                shutil.copy2(context / rel, target)
    out, release = tmp_path / "wheels", tmp_path / "release"
    out.mkdir()
    release.mkdir()
    in_image = zipfile.ZipFile(build(image, "build_wheel", out)).namelist()
    assert sorted(in_image) == sorted(zipfile.ZipFile(build(source, "build_wheel", release)).namelist())


def test_the_image_runs_as_the_user_the_rendered_pods_ask_for():
    """The pods statusvault renders run as a fixed non-root user; the image's USER is that user, so its HOME
    (/tmp) and files fit."""
    (user,) = re.findall(r"^USER (\d+):(\d+)$", DOCKERFILE, re.MULTILINE)
    pod = secure_pod("x", {"name": "x", "volumeMounts": []}, "Never", {})["spec"]["securityContext"]
    assert (int(user[0]), int(user[1])) == (pod["runAsUser"], pod["runAsGroup"])
