"""The Restore CRD is generated from the restore command's options: every option is a typed field or is left
out for a stated reason, and the option table's conflicts become schema rules."""

from __future__ import annotations

import pytest

from statusvault.cli.backups import backup as backup_cmd
from statusvault.cli.declared import RESOURCES, Declared, command_options, left_out_of
from statusvault.cli.restore import restore_cmd
from statusvault.cli.specfields import crds, restore_fields


def spec_schema() -> dict:
    return crds()[0]["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]


def test_every_restore_option_is_a_spec_field_or_left_out_for_a_reason():
    fields = set(spec_schema()["properties"])
    left_out = left_out_of(restore_cmd, "Restore")
    assert left_out, "the connection, keys, journals and output are the controller's"
    for flag in sorted(command_options()["restore"]):
        assert (flag.lstrip("-") in fields) != bool(left_out.get(flag)), f"{flag}: a field, or left out with a reason"


def test_a_declaration_names_only_resources_that_exist():
    with pytest.raises(ValueError, match="Restores"):
        Declared(["--x"], left_out={"Restores": "a typo"})
    assert all(set(p.left_out) <= set(RESOURCES) for p in restore_cmd.params if isinstance(p, Declared))


def test_fields_are_typed_as_the_cli_declares_them():
    props = spec_schema()["properties"]
    assert props["no-status"] == {"type": "boolean", "description": props["no-status"]["description"]}
    assert props["existing-resource-policy"]["enum"] == ["none", "update"]
    assert (props["parallel"]["type"], props["parallel"]["minimum"], props["parallel"]["maximum"]) == (
        "integer",
        1,
        128,
    )
    assert props["namespace"]["type"] == "array" and props["namespace"]["items"] == {"type": "string"}
    assert spec_schema()["required"] == ["backup"]
    assert [f.name for f in restore_fields()][:2] == ["storage", "namespace"], "in the command's order"


def test_conflicts_are_schema_rules():
    rule = {
        "not": {
            "required": ["no-status", "status-include-resources"],
            "properties": {"no-status": {"enum": [True]}, "status-include-resources": {"minItems": 1}},
        }
    }
    assert rule in spec_schema()["allOf"]


def test_every_backup_option_is_a_spec_field_or_left_out_for_a_reason():
    schema = crds()[1]["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]
    fields = set(schema["properties"])
    left_out = left_out_of(backup_cmd, "Backup")
    for flag in sorted(command_options()["backup"]):
        assert (flag.lstrip("-") in fields) != bool(left_out.get(flag)), f"{flag}: a field, or left out with a reason"
    schedule = left_out_of(backup_cmd, "BackupSchedule")
    assert set(schedule) == {*left_out, "--schedule"}, "a BackupSchedule leaves out a Backup's, and names its own"
    assert "required" not in schema, "the backup's name defaults to the resource's"
    assert schema["properties"]["include-crds"]["type"] == "boolean"
