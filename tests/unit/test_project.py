"""Project rules: exit codes, module boundaries, documented commands."""

from __future__ import annotations

import ast
from pathlib import Path

from statusvault.errors import ExitStatus

ROOT = Path(__file__).resolve().parents[2]
PKG = ROOT / "statusvault"


def test_exit_codes_are_pinned():
    assert {s.name: s.value for s in ExitStatus} == {
        "SUCCESS": 0,
        "ERROR": 1,
        "USAGE": 2,
        "PARTIAL_FAILURE": 3,
        "INTERRUPTED": 130,
        "TERMINATED": 143,
    }


def imports(path: Path) -> set[str]:
    out = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            out.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module:
            out.add(node.module)
    return out


def modules():
    for path in PKG.rglob("*.py"):
        yield path.relative_to(PKG).as_posix(), imports(path)


def test_only_the_kube_adapter_imports_the_kubernetes_client():
    offenders = [
        m for m, imps in modules() if any(i.split(".")[0] == "kubernetes" for i in imps) and not m.startswith("kube/")
    ]
    assert offenders == []


def test_only_the_s3_backend_imports_boto():
    offenders = [
        m
        for m, imps in modules()
        if any(i.split(".")[0] in ("boto3", "botocore") for i in imps)
        and m not in ("storage/s3.py", "storage/s3client.py", "keys/kms.py", "testing/benchcore.py")
    ]
    assert offenders == []


def test_nothing_but_the_api_imports_the_cli():
    offenders = [
        m
        for m, imps in modules()
        if any(i.startswith("statusvault.cli") for i in imps)
        and not m.startswith("cli/")
        and m not in ("testing/clidoc.py", "__main__.py", "api.py")  # the API runs the command's declarations
    ]
    assert offenders == []


def test_adapters_do_not_import_engines():
    engines = ("statusvault.backup", "statusvault.restore", "statusvault.store.catalog")
    offenders = [
        m
        for m, imps in modules()
        if m.startswith(("kube/", "storage/", "archive/")) and any(i.startswith(engines) for i in imps)
    ]
    assert offenders == []


# The layering, bottom first: a unit (a top-level module, or a package as a whole) imports only units listed before
# it. Foundations, then adapters (archive, storage, kube), the store, the engines, the commands built on engines, the
# CLI.
LAYERS = (
    ("VERSION", "installed_version", "errors", "model", "rfc3339"),
    ("runtime", "vocabulary", "transforms", "flagtable"),
    ("storage", "kube"),
    ("archive", "schedule", "processes", "dependencies"),
    ("store",),
    ("backup", "keys"),
    ("velero",),
    ("restore",),
    ("controller", "move"),
    ("watch",),
    ("cli",),
    ("api",),  # the library face: the restore command's own declarations and run, called as a function
    ("testing",),
)
# A package's own layering, bottom first, by its subpackages and modules: the same rule within it.
SUBLAYERS = {
    "restore": (
        ("core", "configfile"),  # the plan, the journal, pause markers, write marks, managedFields: shared by all
        ("modifiers", "ordering"),
        ("options",),
        ("planning", "quiet", "results"),
        ("running",),
        ("runner",),
    ),
}


def unit_of(module: str, depth: int = 1) -> str | None:
    parts = module.split(".")
    return parts[depth] if parts[0] == "statusvault" and len(parts) > depth else None


def _imported(tree: ast.AST) -> set[str]:
    targets = {
        f"{n.module}.{a.name}" if n.module.count(".") < 2 else n.module
        for n in ast.walk(tree)
        if isinstance(n, ast.ImportFrom) and n.module
        for a in n.names
    }
    return targets | {a.name for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names}


def _offenders(layers, unit: str, targets: set[str], where: str, depth: int) -> tuple[list[str], set[str]]:
    rank = {u: i for i, layer in enumerate(layers) for u in layer}
    offenders, unlisted = [], set()
    for target in filter(None, (unit_of(t, depth) for t in targets)):
        if unit not in rank or target not in rank:
            unlisted |= {u for u in (unit, target) if u not in rank}
        elif target != unit and rank[target] >= rank[unit]:
            offenders.append(f"{where} imports {target}")
    return offenders, unlisted


def test_nothing_imports_upward_or_within_its_layer():
    """The import test of docs/development/architecture.md's layering: no cycles, nothing reaches up; within a
    package that has sub-layers (SUBLAYERS), the same between its parts."""
    offenders, unlisted = [], set()
    for path in PKG.rglob("*.py"):
        parts = path.relative_to(PKG).with_suffix("").parts
        if parts[0] in ("__init__", "__main__"):
            continue
        targets = _imported(ast.parse(path.read_text()))
        found, missing = _offenders(LAYERS, parts[0], targets, str(path.relative_to(PKG)), 1)
        offenders += found
        unlisted |= missing
        if parts[0] in SUBLAYERS and len(parts) > 1 and parts[1] != "__init__":
            inside = {t for t in targets if unit_of(t) == parts[0]}
            found, missing = _offenders(SUBLAYERS[parts[0]], parts[1], inside, str(path.relative_to(PKG)), 2)
            offenders += found
            unlisted |= {f"{parts[0]}/{u}" for u in missing}
    assert unlisted == set(), "add new units to LAYERS (or SUBLAYERS)"
    assert offenders == []


def test_only_the_backup_store_names_a_backups_files():
    """A backup's layout has one owner (store/backups.py, over storage/'s key functions; the writer lease owns its
    own file): no other module names a backup's archive, manifest, lease or report keys."""
    import re

    layout = re.compile(r"\b(archive_key|manifest_key|writer_key|report_key|backup_prefix|backup_name_of|"
                        r"ARCHIVE_FILE|MANIFEST_FILE|WRITER_FILE|BACKUPS_DIR|REPORTS_DIR)\b")  # fmt: skip
    owners = {"store/backups.py", "store/writerlease.py"}
    naming = sorted(
        str(path.relative_to(PKG))
        for path in PKG.rglob("*.py")
        if path.relative_to(PKG).parts[0] != "storage" and str(path.relative_to(PKG)) not in owners
        and layout.search(path.read_text())
    )  # fmt: skip
    assert naming == []


def test_functions_stay_short():
    """One phase per function: none grows past 80 lines."""
    long = [
        f"{path.relative_to(PKG)}:{node.name} ({node.end_lineno - node.lineno + 1} lines)"
        for path in PKG.rglob("*.py")
        for node in ast.walk(ast.parse(path.read_text()))
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef) and (node.end_lineno or 0) - node.lineno >= 80
    ]
    assert long == []


def test_cli_reference_is_current():
    from statusvault.testing.clidoc import render

    assert (ROOT / "docs" / "cli.md").read_text() == render(), "run `make docs`"


def test_the_architecture_places_every_module():
    """Every module of the package is named in docs/development/architecture.md: by its path, or by its file name
    within its package's entry of the module map (a package's name, then its modules' file names)."""
    import re

    text = (ROOT / "docs" / "development" / "architecture.md").read_text()
    unplaced = []
    for path in sorted(PKG.rglob("*.py")):
        rel = path.relative_to(PKG)
        if rel.name == "__init__.py":
            continue
        if rel.as_posix() in text:
            continue
        package = rel.parts[-2] + "/" if len(rel.parts) > 1 else ""
        entry = text.find(package) if package else 0
        if entry < 0 or not re.search(rf"\b{re.escape(rel.name)}\b", text[entry:]):
            unplaced.append(rel.as_posix())
    assert unplaced == [], "name them in docs/development/architecture.md's module map"


def test_every_module_the_architecture_names_exists():
    """docs/development/architecture.md names modules as `dir/name.py` or `name.py` (within its module map's dir)."""
    import re

    text = (ROOT / "docs" / "development" / "architecture.md").read_text()
    files = {p.relative_to(ROOT).as_posix() for p in ROOT.rglob("*.py") if ".venv" not in p.parts}
    named = set(re.findall(r"\b([a-z_]+(?:/[a-z_]+)*\.py)\b", text))
    missing = [n for n in named if not any(f == n or f.endswith("/" + n) for f in files)]
    assert named and missing == []
