"""The one renderer (cli/output.py): -o yaml writes the report's enum members (outcomes, modes) as their values,
which the safe YAML dumper alone refuses ('cannot represent an object'); a restore's items, given as JSON, are
written as given."""

from __future__ import annotations

import io
import json
import sys

import orjson
import yaml

from statusvault.cli.output import OutputFormat, emit, emit_items, emit_manifests
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


ITEMS = [{"name": "a", "message": "déjà vu"}, {"name": "b", "notes": ["x"]}]


def test_json_items_are_written_as_given_and_the_document_parses(capsys):
    emit_items({"backup": "b1", "total": 2}, (orjson.dumps(i) for i in ITEMS), OutputFormat.JSON, lambda: "")
    assert json.loads(capsys.readouterr().out) == {"backup": "b1", "total": 2, "items": ITEMS}


def test_a_stdout_that_cannot_take_utf8_gets_the_items_escaped(monkeypatch):
    out = io.TextIOWrapper(io.BytesIO(), encoding="ascii")
    monkeypatch.setattr(sys, "stdout", out)
    emit_items({"backup": "b1"}, (orjson.dumps(i) for i in ITEMS), OutputFormat.JSON, lambda: "")
    out.flush()
    text = out.buffer.getvalue().decode("ascii")  # nothing that ascii cannot hold was written
    assert json.loads(text)["items"] == ITEMS and "\\u00e9" in text


def test_yaml_items_are_parsed_into_the_document(capsys):
    emit_items({"backup": "b1"}, (orjson.dumps(i) for i in ITEMS), OutputFormat.YAML, lambda: "")
    assert yaml.safe_load(capsys.readouterr().out)["items"] == ITEMS
