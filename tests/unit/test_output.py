"""The one renderer (cli/output.py): -o yaml writes the report's enum members (outcomes, modes) as their values,
which the safe YAML dumper alone refuses ('cannot represent an object')."""

from __future__ import annotations

import yaml

from statusvault.cli.output import OutputFormat, emit, emit_manifests
from statusvault.model import DryRun
from statusvault.restore.results.report import Outcome, StatusOutcome


def test_yaml_writes_enum_members_as_their_values(capsys):
    emit(
        {"dryRun": DryRun.CLIENT, "items": [{"outcome": Outcome.CREATED, "status": StatusOutcome.WRITTEN}]},
        OutputFormat.YAML,
        "",
    )
    out = capsys.readouterr().out
    assert yaml.safe_load(out) == {"dryRun": "client", "items": [{"outcome": "created", "status": "written"}]}
    assert "!!python" not in out and "Outcome" not in out


def test_manifests_take_them_too(capsys):
    emit_manifests([{"kind": "ConfigMap", "data": {"dry-run": DryRun.SERVER}}])
    assert yaml.safe_load(capsys.readouterr().out) == {"kind": "ConfigMap", "data": {"dry-run": "server"}}
