"""Who wrote a restored status again after the restore (restore/core/settle.py), read from managedFields as each
server version records it."""

from __future__ import annotations

import pytest

from statusvault.restore.core.fields import status_writers_since

ME = "statusvault-restore-0123456789abcdef"


def entry(manager: str, time: str, status: bool = True, subresource: bool = True, spec: bool = False) -> dict:
    """A managedFields entry: a status write is an entry of its own (subresource) from 1.22, not on 1.20."""
    fields: dict = {}
    if status:
        fields["f:status"] = {"f:phase": {}}
    if spec:
        fields["f:spec"] = {}
    e = {"manager": manager, "operation": "Update", "time": f"2026-11-27T10:00:{time}Z", "fieldsV1": fields}
    if status and subresource:
        e["subresource"] = "status"
    return e


@pytest.mark.parametrize("subresource", [True, False], ids=["1.22+", "1.20"])
def test_another_writer_of_status_at_or_after_the_restore_is_named(subresource):
    mine = entry(ME, "05", subresource=subresource)
    later = entry("kc-operator", "07", subresource=subresource)
    same_second = entry("db-operator", "05", subresource=subresource)
    earlier = entry("old-operator", "01", subresource=subresource)
    spec_only = entry("gitops", "09", status=False, spec=True)
    meta = {"managedFields": [entry(ME, "04", status=False, spec=True), mine, later, same_second, earlier, spec_only]}
    assert status_writers_since(meta, ME) == ["db-operator", "kc-operator"]


def test_a_writer_that_took_every_status_field_over_is_named_and_none_is_nothing():
    took_over = {"managedFields": [entry(ME, "04", status=False, spec=True), entry("kc-operator", "01")]}
    assert status_writers_since(took_over, ME) == ["kc-operator"], "it owns what the restore wrote: it wrote since"
    untouched = {"managedFields": [entry(ME, "05"), entry("gitops", "09", status=False, spec=True)]}
    assert status_writers_since(untouched, ME) == []
    assert status_writers_since({}, ME) == []


def test_a_status_is_as_written_whatever_its_conditions_say_but_not_when_its_state_changed():
    """Conditions are the operator's observations (a paused Cluster API object records Paused there); the rest is
    the state a restore brought back."""
    from statusvault.restore.core.settle import still_as_written, write_mark

    saved = {"status": {"providerID": "in-memory://m-1", "conditions": [{"type": "Ready", "status": "True"}],
                        "deprecated": {"v1beta1": {"conditions": [{"type": "Ready", "status": "True"}]}}},
             "metadata": {"resourceVersion": "7"}}  # fmt: skip
    mark = write_mark(saved)
    paused = {"status": {"providerID": "in-memory://m-1", "conditions": [{"type": "Paused", "status": "True"}],
                         "deprecated": {"v1beta1": {"conditions": []}}}}  # fmt: skip
    assert still_as_written(mark, paused)
    assert not still_as_written(mark, {"status": {**paused["status"], "providerID": "in-memory://m-2"}})
    assert not still_as_written(mark, {"status": {"conditions": paused["status"]["conditions"]}})
    assert not still_as_written("handed-over", saved), "a mark handed over is compared with nothing"
