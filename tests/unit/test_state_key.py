"""A restore's state key (running/state.py) is a stable, versioned encoding of what decides the restore: a restore
stopped under one release resumes under the next, and one that adds an option keeps every key."""

from __future__ import annotations

import dataclasses

import pytest

from statusvault.restore.options import RestoreOptions, restore_options
from statusvault.restore.running.state import state_key

ID = ("store", "https://cluster")

# Keys as this release writes them into journals' file names. A change here means every restore stopped before it
# can no longer resume: only ever with a new KEY_VERSION, said in the release notes.
PINNED = [
    ({}, "b-bff76a7aeebc3f26"),
    ({"namespaces": "a,b", "pause": "auto", "existing_resource_policy": "update"}, "b-1ca37228191132db"),
]


@pytest.mark.parametrize(("values", "key"), PINNED)
def test_keys_written_by_this_release_are_found_by_the_next(values, key):
    assert state_key("b", ID, restore_options(values)) == key


@dataclasses.dataclass(frozen=True)
class NextReleaseOptions(RestoreOptions):
    """The options type of a release that added one option."""

    compress_journal: bool = False


def test_an_option_added_later_keeps_the_key_of_runs_that_do_not_use_it():
    now = RestoreOptions(existing_policy="update", status_exclude=("x.example.com",))
    later = NextReleaseOptions(existing_policy="update", status_exclude=("x.example.com",))
    assert state_key("b", ID, later) == state_key("b", ID, now)
    assert state_key("b", ID, dataclasses.replace(later, compress_journal=True)) != state_key("b", ID, now)


@pytest.mark.parametrize(
    "values",
    [
        {"namespaces": "a"},
        {"namespace_mapping": "a:b"},
        {"status_include_resources": "x.example.com"},
        {"no_status": True},
        {"existing_resource_policy": "update"},
        {"pause": "auto"},
        {"names": "w-1"},
    ],
)
def test_what_decides_the_restore_is_in_the_key(values):
    assert state_key("b", ID, restore_options(values)) != state_key("b", ID, RestoreOptions())


def test_what_does_not_decide_it_is_not():
    plain = state_key("b", ID, restore_options({"pause": "auto"}))
    unchanged = restore_options({"pause": "auto", "dry_run": "client", "fence": "auto", "keep_paused": "*"})
    assert state_key("b", ID, unchanged) == plain
    scaled = restore_options({"pause": "auto", "scale_down": "ops/deployment/op"})
    assert state_key("b", ID, scaled) == plain, "a re-run without --scale-down is the same restore: it scales back"
    assert state_key("b", ("store", "https://other"), restore_options({"pause": "auto"})) != plain
    assert state_key("c", ID, restore_options({"pause": "auto"})) != plain
