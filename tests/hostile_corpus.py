"""The corpus of hostile archives: each case twists the base backup (tests/hostile.py) in one way, keeps
every hash and both manifests consistent, and names the one-line refusal it expects."""

from __future__ import annotations

from tests import hostile_archives, hostile_manifests
from tests.hostile_cases import Case

CASES: list[Case] = [*hostile_archives.CASES, *hostile_manifests.CASES]

__all__ = ["CASES", "Case"]
