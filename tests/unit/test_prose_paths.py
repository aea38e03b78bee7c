"""Every file path the docs and the code's docstrings and comments name exists: a path that drifted (a module moved,
a test renamed) fails here, not in a reader's hands."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PATH = re.compile(
    r"(?<![\w./-])((?:statusvault|tests|docs|bench|fixtures)/[\w./-]*\w\.(?:py|md|yaml|sh|go)"
    r"|[a-z_]+(?:/[a-z_]+)*/[a-z_]+\.py)\b"
)


def texts() -> list[Path]:
    return [*ROOT.glob("docs/**/*.md"), ROOT / "README.md", *ROOT.glob("statusvault/**/*.py")]


def exists(path: str, named_in: Path) -> bool:
    """A path as prose names it: from the project's root, the package's, or a directory above the file naming it
    (`restore/runner.py` from within statusvault/, `crs/test_backup.py` from beside tests/integration/)."""
    bases = [ROOT, ROOT / "statusvault", ROOT / "tests", ROOT / "tests" / "integration", *named_in.parents]
    return any((base / path).exists() for base in bases)


def test_every_path_named_in_prose_exists():
    missing = sorted(
        f"{text.relative_to(ROOT)}: {m.group(1)}"
        for text in texts()
        for m in PATH.finditer(text.read_text())
        if not exists(m.group(1), text)
    )
    assert missing == []


def test_no_internal_issue_numbers_in_docs_or_code():
    """Docs and code comments say what is true, not which internal ticket asked for it (the history is in git)."""
    ticket = re.compile(r"\bissues? #?\d+\b", re.IGNORECASE)
    places = [*texts(), *ROOT.glob("tests/**/*.py")]
    found = sorted(
        f"{path.relative_to(ROOT)}: {m.group(0)}"
        for path in places
        if path.name != "test_prose_paths.py"
        for m in ticket.finditer(path.read_text())
    )
    assert found == []
