"""controller run --allowed-storage (controller/intent.py check_storage): which stores a resource may name."""

from __future__ import annotations

import pytest

from statusvault.controller.intent import check_storage
from statusvault.errors import ConfigError

ALLOWED = ("s3://backups/team-a", "/var/backups")


@pytest.mark.parametrize(
    "storage",
    ["s3://backups/team-a", "s3://backups/team-a/", "s3://backups/team-a/nightly", "/var/backups",
     "/var/backups/x/../y", "/var/backups/./z"],
)  # fmt: skip
def test_a_listed_location_and_what_is_under_it_are_allowed(storage):
    check_storage(storage, ALLOWED)


@pytest.mark.parametrize(
    "storage",
    ["s3://backups/team-b", "s3://backups/team-ab", "s3://backups", "s3://mallory/team-a",
     "s3://backups/team-a/../team-b", "/var/backups/../etc", "/var/backupsX", "/tmp/mallory"],
)  # fmt: skip
def test_anything_else_is_refused_in_one_line(storage):
    with pytest.raises(ConfigError, match=r"is not one the controller may use \(--allowed-storage: s3://backups"):
        check_storage(storage, ALLOWED)


def test_without_a_list_any_store_is_allowed():
    check_storage("s3://anything/at-all", ())
