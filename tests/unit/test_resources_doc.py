"""docs/reference/resources.md names every spec and status field of the Restore, Backup and BackupSchedule CRDs,
read from the CRDs the package generates: a field added to a resource without its row fails here."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from statusvault.cli.specfields import crds

PAGE = (Path(__file__).resolve().parents[2] / "docs" / "reference" / "resources.md").read_text()


def sections() -> dict[str, str]:
    """The page's text under each `## ` heading."""
    parts = re.split(r"^## (.+)$", PAGE, flags=re.MULTILINE)
    return dict(zip(parts[1::2], parts[2::2], strict=True))


def fields(part: str) -> list[tuple[str, str, str]]:
    return [
        (crd["spec"]["names"]["kind"], part, name)
        for crd in crds()
        for name in crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"][part]["properties"]
    ]


@pytest.mark.parametrize(("kind", "part", "name"), fields("spec"), ids=lambda v: str(v))
def test_every_spec_field_is_in_its_kinds_section(kind, part, name):
    text = sections()[kind]
    if kind != "Restore":
        text += sections()["Fields of Backup and BackupSchedule"]
    assert f"| `{name}` |" in text


@pytest.mark.parametrize(("kind", "part", "name"), fields("status"), ids=lambda v: str(v))
def test_every_status_field_is_named(kind, part, name):
    assert re.search(rf"^\|[^\n]*`{re.escape(name)}`[^\n]*\|", sections()["Status"], flags=re.MULTILINE)
