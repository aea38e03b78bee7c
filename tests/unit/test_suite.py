"""What runs where is a decision each integration module states (docs/development/testing.md): on 1.20 and 1.36 because
what it tests differs by version, or on 1.36 alone because it does not, with the reason, and the docs list them all."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).parents[2]
INTEGRATION = ROOT / "tests" / "integration"
WHERE = {"version_sensitive": "1.20, 1.36", "version_neutral": "1.36", "current_only": "1.36"}


def stated(path: Path) -> tuple[str, str] | None:
    """The module's `pytestmark = pytest.mark.<where>("why")`: (where, why), or None."""
    for node in ast.parse(path.read_text()).body:
        if not (isinstance(node, ast.Assign) and any(getattr(t, "id", "") == "pytestmark" for t in node.targets)):
            continue
        call = node.value
        if isinstance(call, ast.Call) and isinstance(call.func, ast.Attribute) and call.args:
            reason = call.args[0]
            if isinstance(reason, ast.Constant) and isinstance(reason.value, str):
                return call.func.attr, reason.value
    return None


def modules() -> list[Path]:
    return sorted(INTEGRATION.rglob("test_*.py"))


def policy() -> list[tuple[str, str, str]]:
    """(module, the servers it runs on, why) for every integration module."""
    rows = []
    for path in modules():
        where, why = stated(path) or ("", "")
        rows.append((path.relative_to(INTEGRATION).as_posix(), WHERE.get(where, ""), why))
    return rows


@pytest.mark.parametrize("path", modules(), ids=lambda p: p.relative_to(INTEGRATION).as_posix())
def test_every_integration_module_says_where_it_runs_and_why(path):
    mark = stated(path)
    assert mark is not None, f"{path.name}: no pytestmark = pytest.mark.version_sensitive/version_neutral('why')"
    where, why = mark
    assert where in WHERE, f"{path.name}: {where} is not one of {sorted(WHERE)}"
    assert len(why.split()) >= 4, f"{path.name}: say why in words, not {why!r}"


def test_docs_testing_lists_every_module_where_its_marker_says():
    text = (ROOT / "docs" / "development" / "testing.md").read_text()
    missing = [row for row in policy() if f"| `{row[0]}` | {row[1]} | {row[2]} |" not in text]
    assert not missing, (
        "docs/development/testing.md lacks these rows (python -m tests.unit.test_suite prints them):\n"
        + "\n".join(f"| `{m}` | {where} | {why} |" for m, where, why in missing)
    )


if __name__ == "__main__":
    for module, where, why in policy():
        print(f"| `{module}` | {where} | {why} |")
