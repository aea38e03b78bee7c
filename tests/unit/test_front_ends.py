"""Every option of `statusvault restore` walked through every front end that takes restore options: the API's
keyword call, the Restore resource and restore intents. Each front end honours an option (it changes what is run) or
refuses it in one line; none drops one. Defaults are the command's, everywhere."""

from __future__ import annotations

import dataclasses
import inspect

import click
import pytest

from statusvault import api
from statusvault.cli.backups import BackupArgs
from statusvault.cli.backups import backup as backup_cmd
from statusvault.cli.declared import long_flag
from statusvault.cli.restore import RestoreArgs, restore_cmd
from statusvault.cli.specfields import restore_fields
from statusvault.controller.intent import INTENT_KEYS, option_key, parse_intent
from statusvault.controller.intent import PARALLEL as INTENT_PARALLEL
from statusvault.controller.restores import parse_restore
from statusvault.errors import ConfigError
from statusvault.move import MoveRequest
from statusvault.restore.options import PARALLEL
from statusvault.restore.runner import RestoreRequest

# a value each option accepts alone (the option table's needs satisfied) that differs from its default
SAMPLES = {
    "namespace_mapping": ("a:b",),
    "scale_down": ("ops/deployment/op",),
    "fence_exclude": ("ops/op",),
    "pause_annotation": "example.com/paused=true",
    "pause_field": "/spec/paused=true",
    "order": "crossplane",
    "at": "latest",
    "selector": "app=x",
}
NEEDS = {  # what an option needs beside it (flagtable.NEEDS)
    "pause_annotation": {"pause_resources": ("x.example.com",)},
    "pause_field": {"pause_resources": ("x.example.com",)},
    "pause_resources": {"pause_annotation": "example.com/paused=true"},
    "keep_paused": {"pause": "auto"},
    "fence_exclude": {"fence": "auto"},
}


def options() -> list[click.Option]:
    return [p for p in restore_cmd.params if isinstance(p, click.Option)]


def sample(param: click.Option) -> object:
    name = str(param.name)
    key = api_key(param)
    if key in SAMPLES or name in SAMPLES:
        return SAMPLES.get(key, SAMPLES.get(name))
    kind = param.type
    if param.is_flag and not param.secondary_opts:
        return True
    if param.secondary_opts:
        return not param.default
    if isinstance(kind, click.Choice):
        return next(str(c) for c in kind.choices if str(c) != str(param.default))
    if isinstance(kind, click.IntRange):
        return int(kind.min or 0) + 2
    if isinstance(kind, click.FloatRange):
        return 7.5
    if str(kind.name) == "dry-run":
        return "client"
    return ("x.example.com",) if param.multiple else "x"


def api_key(param: click.Option) -> str:
    return long_flag(param)[2:].replace("-", "_")


def read_by_the_api(command, args_type, refused, needs, param, **fixed) -> None:
    """The API takes `param` by its long name and reads it into the command's values, or refuses it in one line."""
    key = api_key(param)
    given = {key: sample(param), **needs.get(key, {})}
    if key in refused:
        with pytest.raises(TypeError, match=f"does not take '{key}'"):
            api.command_values(command, given, refused, **fixed)
        return
    values = api.command_values(command, given, refused, **fixed)
    default = api.command_values(command, {}, refused, **fixed)
    args, plain = args_type(**values), args_type(**default)
    assert getattr(args, str(param.name)) != getattr(plain, str(param.name)), f"{key} is read into the run's values"


@pytest.mark.parametrize("param", options(), ids=lambda p: p.opts[-1])
def test_the_api_takes_every_restore_option_by_its_long_name_or_refuses_it_in_one_line(param):
    read_by_the_api(restore_cmd, RestoreArgs, api.NOT_IN_API, NEEDS, param, backup_name="b")


BACKUP_NEEDS = {"lock_mode": {"lock_for": "30d"}, "lock_for": {"lock_mode": "governance"}}


@pytest.mark.parametrize(
    "param", [p for p in backup_cmd.params if isinstance(p, click.Option)], ids=lambda p: p.opts[-1]
)
def test_the_api_takes_every_backup_option_by_its_long_name_or_refuses_it_in_one_line(param):
    read_by_the_api(backup_cmd, BackupArgs, api.NOT_IN_BACKUP_API, BACKUP_NEEDS, param, name="b")
    assert next(iter(inspect.signature(api.backup).parameters)) == "name", "the backup's name is positional only"


def test_the_api_reads_values_with_the_commands_declarations():
    with pytest.raises(ConfigError, match="parallel"):
        api.command_values(restore_cmd, {"parallel": 0}, api.NOT_IN_API, backup_name="b")
    with pytest.raises(ConfigError, match="strict"):
        api.command_values(restore_cmd, {"strict": "maybe"}, api.NOT_IN_API, backup_name="b")
    with pytest.raises(TypeError, match="unexpected option 'namespaces'"):
        api.command_values(restore_cmd, {"namespaces": "a"}, api.NOT_IN_API, backup_name="b")
    values = api.command_values(restore_cmd, {"name": "db-*", "namespace": "a,b"}, api.NOT_IN_API, backup_name="b")
    assert (values["names"], values["namespaces"], values["backup_name"]) == (("db-*",), ("a,b",), "b")
    assert RestoreArgs(**values).options().selection.names == ("db-*",), "name= is the objects' names"
    assert next(iter(inspect.signature(api.restore).parameters)) == "backup", "the backup is positional only"
    with pytest.raises(TypeError, match="fence='report'"):
        api.restore("b", fence="report")


def test_one_default_per_option_everywhere():
    defaults = {p.name: p.default for p in options()}
    api_values = api.command_values(restore_cmd, {}, api.NOT_IN_API, backup_name="b")
    assert defaults["parallel"] == PARALLEL == INTENT_PARALLEL == api_values["parallel"]
    assert RestoreRequest.__dataclass_fields__["parallel"].default == PARALLEL
    assert MoveRequest.__dataclass_fields__["parallel"].default == PARALLEL
    assert parse_restore({"metadata": {"name": "r"}, "spec": {"backup": "b"}}).parallel == PARALLEL
    assert parse_intent({"metadata": {"name": "i"}, "data": {"backup": "b"}}).parallel == PARALLEL
    assert api_values["processes"] is None, "auto, as the CLI's: the CPUs this process may use"


def spec_sample(field) -> object:
    schema = field.schema
    one = schema.get("items", schema)
    name = field.name.replace("-", "_")
    if name in SAMPLES:
        value = SAMPLES[name]
        return list(value) if isinstance(value, tuple) else value
    if one.get("type") == "boolean":
        return True
    if "enum" in one:
        return next(v for v in one["enum"] if v not in ("none", "report"))
    if one.get("type") == "integer":
        return int(one.get("minimum", 0)) + 2
    if one.get("type") == "number":
        return 7.5
    return ["x.example.com"] if schema.get("type") == "array" else "x"


@pytest.mark.parametrize("field", restore_fields(), ids=lambda f: f.name)
def test_a_restore_resource_honours_every_field_of_its_schema(field):
    """Each spec field changes the restore the controller runs (never a field the schema takes and nothing reads)."""
    needs = {k.replace("_", "-"): list(v) if isinstance(v, tuple) else v
             for k, v in NEEDS.get(field.name.replace("-", "_"), {}).items()}  # fmt: skip
    plain = parse_restore({"metadata": {"name": "r"}, "spec": {"backup": "b"}})
    if field.name == "backup":
        return
    given = parse_restore({"metadata": {"name": "r"}, "spec": {"backup": "b", field.name: spec_sample(field), **needs}})
    differs = {f.name for f in dataclasses.fields(given) if getattr(given, f.name) != getattr(plain, f.name)}
    assert differs - {"digest"}, f"spec.{field.name} is read into the Intent"


def intent_value(value: object) -> str:
    """An option's value as an intent's data holds it: a string (lists comma-separated, booleans true/false)."""
    if isinstance(value, tuple | list):
        return ",".join(str(v) for v in value)
    return str(value).lower() if isinstance(value, bool) else str(value)


def intent_key(param: click.Option) -> str:
    return "modifiers" if param.name == "modifiers_file" else option_key(str(param.name))  # a ConfigMap's name


@pytest.mark.parametrize("param", options(), ids=lambda p: p.opts[-1])
def test_an_intent_honours_each_restore_option_it_takes_and_refuses_the_rest_in_one_line(param):
    """The third front end: a restore intent (a ConfigMap) takes an option under its key and acts on it, or is
    refused naming the key; it never drops one."""
    key = intent_key(param)
    needs = {option_key(k): intent_value(v) for k, v in NEEDS.get(api_key(param), {}).items()}
    data = {"backup": "b", key: intent_value(sample(param)), **needs}
    if key not in INTENT_KEYS:
        with pytest.raises(ConfigError) as refused:
            parse_intent({"metadata": {"name": "i"}, "data": data})
        assert key in str(refused.value) and "\n" not in str(refused.value)
        return
    plain = parse_intent({"metadata": {"name": "i"}, "data": {"backup": "b"}})
    given = parse_intent({"metadata": {"name": "i"}, "data": data})
    differs = {f.name for f in dataclasses.fields(given) if getattr(given, f.name) != getattr(plain, f.name)}
    assert differs - {"digest"}, f"data.{key} is read into the Intent"


def test_fence_report_is_refused_by_the_resource_and_the_intent_never_run():
    with pytest.raises(ConfigError, match="fence report plans the fencing and writes nothing"):
        parse_restore({"metadata": {"name": "r"}, "spec": {"backup": "b", "fence": "report"}})
    with pytest.raises(ConfigError, match="fence report plans the fencing and writes nothing"):
        parse_intent({"metadata": {"name": "i"}, "data": {"backup": "b", "fence": "report"}})


def test_a_spec_field_nothing_reads_is_refused_not_dropped():
    with pytest.raises(ConfigError, match="not honoured by the controller"):
        parse_restore({"metadata": {"name": "r"}, "spec": {"backup": "b", "settle-seconds": 3}})


def test_a_restore_or_intent_names_an_order_profile_never_a_file(tmp_path):
    planted = tmp_path / "order.yaml"
    planted.write_text("version: v1\ngroups:\n- name: secret-value-42\n  resources: [x]\n")
    for parse, body in (
        (parse_restore, {"metadata": {"name": "r"}, "spec": {"backup": "b", "order": str(planted)}}),
        (parse_intent, {"metadata": {"name": "i"}, "data": {"backup": "b", "order": str(planted)}}),
    ):
        with pytest.raises(ConfigError, match="names a profile, never a file") as refused:
            parse(body)
        assert "secret-value-42" not in str(refused.value)
    assert parse_restore({"metadata": {"name": "r"}, "spec": {"backup": "b", "order": "cnpg"}}).options.order
