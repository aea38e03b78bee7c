"""What a release ships, built from the tracked files (nothing untracked or built in the checkout gets in):

- the wheel and the sdist (setuptools' own PEP 517 hooks, in this environment: no network);
- the Helm chart, packaged by the helm `make helm-bin` builds;
- SHA256SUMS of the three.

The wheel is then installed into a fresh virtual environment (uv, from its cache first) and run there, so what is
checked is what `pip install` gives a user: `make dist` does it in CI, and `make demo` runs the demo with the
installed wheel's `statusvault`, not the checkout's.

python -m statusvault.testing.release dist [OUT]    # wheel, sdist, chart, SHA256SUMS into OUT (dist/); checked
python -m statusvault.testing.release venv VENV     # the wheel installed into VENV; prints its statusvault
"""

from __future__ import annotations

import argparse
import hashlib
import json
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from statusvault import VERSION

ROOT = Path(__file__).resolve().parents[2]
SHIPPED = ("statusvault/", "pyproject.toml", "README.md", "LICENSE")  # what the package build reads
CHART = ROOT / "charts" / "statusvault"


def tracked_sources(dest: Path, shipped: tuple[str, ...] = SHIPPED) -> Path:
    """Copy the tracked files a package build reads into `dest`."""
    listed = subprocess.run(["git", "ls-files"], cwd=ROOT, capture_output=True, text=True, check=True).stdout
    for rel in listed.split():
        if rel.startswith(shipped):
            (dest / rel).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(ROOT / rel, dest / rel)
    return dest


def build(source: Path, hook: str, out: Path) -> Path:
    """Run one of setuptools' PEP 517 hooks (build_wheel, build_sdist) on `source`; the file it built."""
    code = f"import sys; from setuptools.build_meta import {hook}; print({hook}(sys.argv[1]))"
    run = subprocess.run([sys.executable, "-c", code, str(out)], cwd=source, capture_output=True, text=True)
    if run.returncode != 0:
        raise RuntimeError(f"{hook} failed: {run.stderr[-2000:]}")
    return out / run.stdout.strip().splitlines()[-1]


def wheel(out: Path) -> Path:
    with tempfile.TemporaryDirectory(prefix="statusvault-src-") as tmp:
        return build(tracked_sources(Path(tmp)), "build_wheel", out)


def install(built: Path, venv: Path) -> Path:
    """A fresh virtual environment with the wheel installed (its dependencies from uv's cache, else the
    registry); its `statusvault`."""
    uv = [sys.executable, "-m", "uv"] if _has_uv(sys.executable) else ["python3", "-m", "uv"]
    subprocess.run([*uv, "venv", "-q", "--clear", "-p", sys.executable, str(venv)], check=True)
    python = str(venv / "bin" / "python")
    offline = subprocess.run([*uv, "pip", "install", "-q", "-p", python, "--offline", str(built)], check=False)
    if offline.returncode != 0:
        subprocess.run([*uv, "pip", "install", "-q", "-p", python, str(built)], check=True)
    return venv / "bin" / "statusvault"


def _has_uv(python: str) -> bool:
    return subprocess.run([python, "-m", "uv", "--version"], capture_output=True, check=False).returncode == 0


def check(cli: Path) -> None:
    """The installed CLI is this release, and its kubectl plugin entry point runs as `kubectl statusvault`."""
    answer = subprocess.run([str(cli), "version", "--client", "-o", "json"], capture_output=True, text=True)
    if answer.returncode != 0:
        raise RuntimeError(f"the installed statusvault failed: {answer.stderr[-1000:]}")
    installed = json.loads(answer.stdout)["clientVersion"]["version"]
    if installed != VERSION:
        raise RuntimeError(f"the installed statusvault is {installed}, this release is {VERSION}")
    plugin = subprocess.run([str(cli.with_name("kubectl-statusvault")), "--help"], capture_output=True, text=True)
    if plugin.returncode != 0 or not plugin.stdout.startswith("Usage: kubectl statusvault"):
        raise RuntimeError(f"the kubectl plugin entry point: {plugin.stdout[:200]}{plugin.stderr[-500:]}")


def package_chart(out: Path) -> Path:
    from statusvault.testing.helm import ensure_helm

    run = subprocess.run([str(ensure_helm()), "package", str(CHART), "-d", str(out)], capture_output=True, text=True)
    if run.returncode != 0:
        raise RuntimeError(f"helm package failed: {run.stderr[-1000:]}")
    return out / f"statusvault-{VERSION}.tgz"


def dist(out: Path) -> list[Path]:
    """Every artefact of the release in `out` (emptied first), with SHA256SUMS; the wheel installed and run."""
    out = out.resolve()  # the builds run in the copy of the sources
    shutil.rmtree(out, ignore_errors=True)
    out.mkdir(parents=True)
    with tempfile.TemporaryDirectory(prefix="statusvault-src-") as tmp:
        source = tracked_sources(Path(tmp))
        artefacts = [build(source, "build_wheel", out), build(source, "build_sdist", out)]
    artefacts.append(package_chart(out))
    sums = "".join(f"{hashlib.sha256(a.read_bytes()).hexdigest()}  {a.name}\n" for a in artefacts)
    (out / "SHA256SUMS").write_text(sums)
    with tempfile.TemporaryDirectory(prefix="statusvault-venv-") as venv:
        check(install(artefacts[0], Path(venv)))
    return artefacts


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m statusvault.testing.release")
    sub = parser.add_subparsers(dest="command", required=True)
    sub.add_parser("dist").add_argument("out", nargs="?", default=str(ROOT / "dist"))
    sub.add_parser("venv").add_argument("venv")
    args = parser.parse_args(argv)
    if args.command == "dist":
        for artefact in dist(Path(args.out)):
            print(f"{artefact.name}  {artefact.stat().st_size:,} bytes")
        return 0
    with tempfile.TemporaryDirectory(prefix="statusvault-wheel-") as tmp:
        cli = install(wheel(Path(tmp)), Path(args.venv).resolve())
    check(cli)
    print(cli)
    return 0


if __name__ == "__main__":
    sys.exit(main())
