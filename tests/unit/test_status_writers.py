"""A backup keeps who wrote each object's status (managedFields cut down to manager, operation, subresource,
time), the restore's create never sends it, and the fence plan reads it from a format 1.2 backup (an older one:
None, so the plan reads the cluster's objects instead)."""

from __future__ import annotations

import orjson
import pytest

from statusvault.archive import ArchiveReader
from statusvault.backup import prepare_object
from statusvault.backup.engine import status_writers
from statusvault.restore.quiet.fenceread import archived_managers
from statusvault.restore.quiet.fencing import FenceTarget
from statusvault.transforms import sanitize
from tests.builders import cr, resource_type, with_meta, write_archive

OP_STATUS = {"manager": "op", "operation": "Update", "subresource": "status", "time": "2026-01-01T00:00:00Z"}


@pytest.mark.parametrize(
    ("entry", "kept"),
    [
        ({**OP_STATUS, "apiVersion": "v1", "fieldsType": "FieldsV1", "fieldsV1": {"f:status": {}}}, OP_STATUS),
        (
            {"manager": "legacy", "operation": "Update", "fieldsV1": {"f:spec": {}, "f:status": {"f:x": {}}}},
            {"manager": "legacy", "operation": "Update"},
        ),
        ({"manager": "kubectl", "operation": "Apply", "fieldsV1": {"f:spec": {}}}, None),
        ({"operation": "Update", "subresource": "status"}, None),  # no manager to name
        ("not an entry", None),
    ],
)
def test_only_the_status_writers_are_kept_without_their_fields(entry, kept):
    assert status_writers([entry]) == ([kept] if kept else [])


def test_the_archived_form_keeps_the_status_writers_and_the_create_never_sends_them():
    obj = cr("example.com/v1", "Widget", "w", status={"a": 1})
    obj["metadata"]["managedFields"] = [{**OP_STATUS, "fieldsV1": {"f:status": {}}}, {"manager": "kubectl"}]
    archived = orjson.loads(prepare_object(obj))
    assert archived["metadata"]["managedFields"] == [OP_STATUS]
    assert "managedFields" not in sanitize(archived)["metadata"]
    spec_only = cr("example.com/v1", "Widget", "v")
    spec_only["metadata"]["managedFields"] = [{"manager": "kubectl", "fieldsV1": {"f:spec": {}}}]
    assert "managedFields" not in orjson.loads(prepare_object(spec_only))["metadata"], "no empty list"


@pytest.mark.parametrize(("version", "found"), [("1.0", None), ("1.1", None), ("1.2", {"op"}), ("1.7", {"op"})])
def test_the_plan_reads_the_managers_from_a_backup_that_records_them(tmp_path, version, found):
    widgets, gadgets = resource_type("example.com", "Widget"), resource_type("example.com", "Gadget")
    written = with_meta(cr("example.com/v1", "Widget", "w"), "ns")
    written["metadata"]["managedFields"] = [OP_STATUS]
    other = with_meta(cr("example.com/v1", "Gadget", "g"), "ns")
    other["metadata"]["managedFields"] = [{**OP_STATUS, "manager": "not-a-target"}]
    entries = [(widgets, written), (widgets, with_meta(cr("example.com/v1", "Widget", "x"), "ns")), (gadgets, other)]
    path = write_archive(tmp_path / "a.tar.gz", entries, format_version=version)

    managers = archived_managers(ArchiveReader(path), [FenceTarget(widgets, frozenset({"ns"}))])

    assert managers == (None if found is None else {widgets.qualified: found})
