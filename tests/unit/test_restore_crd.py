"""The Restore CRD is generated from the restore command's options: every option is a typed field or is left
out for a stated reason, and the option table's conflicts become schema rules."""

from __future__ import annotations

from statusvault.cli.specfields import crds, restore_fields
from statusvault.controller.crd import NOT_IN_SPEC
from statusvault.flagtable import COMMAND_OPTIONS


def spec_schema() -> dict:
    return crds()[0]["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]


def test_every_restore_option_is_a_spec_field_or_left_out_for_a_reason():
    fields = set(spec_schema()["properties"])
    for flag in sorted(COMMAND_OPTIONS["restore"]):
        assert flag.lstrip("-") in fields or NOT_IN_SPEC.get(flag), f"{flag} has no field in the Restore spec"
    assert set(NOT_IN_SPEC) <= COMMAND_OPTIONS["restore"], "a reason for an option restore no longer has"
    assert not fields & {f.lstrip("-") for f in NOT_IN_SPEC}


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
    from statusvault.controller.crd import NOT_IN_BACKUP_SPEC

    schema = crds()[1]["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]
    fields = set(schema["properties"])
    for flag in sorted(COMMAND_OPTIONS["backup"]):
        assert flag.lstrip("-") in fields or NOT_IN_BACKUP_SPEC.get(flag), f"{flag} has no field in the Backup spec"
    assert set(NOT_IN_BACKUP_SPEC) <= COMMAND_OPTIONS["backup"]
    assert "required" not in schema, "the backup's name defaults to the resource's"
    assert schema["properties"]["include-crds"]["type"] == "boolean"
