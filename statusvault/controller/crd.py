"""The `Restore`, `Backup` and `BackupSchedule` custom resources (statusvault.dev/v1alpha1): their CRDs, generated
from the restore and backup commands' options, so that each option the controller honours is a typed spec field under
its long name and the option table's conflicts and needs are refused by the API server at admission.

Pure: the caller (the CLI) describes each option as a `SpecField`; this module only builds the schema.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from statusvault.flagtable import CONFLICTS, NEEDS
from statusvault.model import KubeObject

GROUP = "statusvault.dev"
VERSION = "v1alpha1"
API_VERSION = f"{GROUP}/{VERSION}"
KIND = "Restore"
PLURAL = "restores"

BACKUP_KIND = "Backup"
BACKUP_PLURAL = "backups"

SCHEDULE_KIND = "BackupSchedule"
SCHEDULE_PLURAL = "backupschedules"
SCHEDULE_OWN = {  # a BackupSchedule's own fields, as `schedule render` takes them
    "schedule": {"type": "string", "minLength": 1, "description": "Cron schedule, e.g. '0 2 * * *'."},
    "keep-last": {"type": "integer", "minimum": 1, "description": "Keep the N newest complete backups."},
    "ttl": {"type": "string", "description": "Keep backups younger than this (e.g. 720h, 30d)."},
    "keep-daily": {"type": "integer", "minimum": 1, "description": "Keep the newest backup of each of D days."},
    "keep-weekly": {"type": "integer", "minimum": 1, "description": "Keep the newest backup of each of W weeks."},
    "suspend": {"type": "boolean", "description": "Run no new backup until this is false again."},
}


@dataclasses.dataclass(frozen=True)
class SpecField:
    """One restore option as a spec field: `name` is its long flag without dashes."""

    name: str
    schema: dict[str, Any]  # its OpenAPI v3 type (and enum, bounds)
    description: str = ""


def _given(schema: dict[str, Any]) -> dict[str, Any]:
    """A value validation true when a field of this type is given (on, or non-empty)."""
    kind = schema.get("type")
    if kind == "boolean":
        return {"enum": [True]}
    if kind == "array":
        return {"minItems": 1}
    return {"minLength": 1} if kind == "string" else {}


def rules(fields: dict[str, SpecField]) -> list[dict[str, Any]]:
    """The option table's conflicts and needs as plain OpenAPI (`not`/`anyOf` over `required`), which every
    API server with structural schemas enforces (1.16 on; CEL rules need 1.25)."""
    out: list[dict[str, Any]] = []
    for c in CONFLICTS:
        a, b = c.first.lstrip("-"), c.second.lstrip("-")
        if a in fields and b in fields:
            props = {n: _given(fields[n].schema) for n in (a, b)}
            out.append({"not": {"required": [a, b], "properties": props}})
    for n in NEEDS:
        name = n.option.lstrip("-")
        others = [o.lstrip("-") for o in n.any_of if o.lstrip("-") in fields]
        if name in fields and others:
            out.append({"anyOf": [{"not": {"required": [name]}}, *({"required": [o]} for o in others)]})
    return out


def _condition_schema() -> dict[str, Any]:
    strings = ("type", "status", "reason", "message", "lastTransitionTime")
    props: dict[str, Any] = {k: {"type": "string"} for k in strings}
    props["observedGeneration"] = {"type": "integer"}
    return {"type": "object", "required": ["type", "status"], "properties": props}


STATUS_INTS = ("observedGeneration", "attempts", "objects", "created", "statusWritten", "withoutStatus", "failed")
STATUS_INTS_MORE = ("resumed", "processes", "unpaused", "leftPaused", "withStatus")
STATUS_STRINGS = (
    "phase", "digest", "appliedDigest", "appliedBackup", "backup", "startedAt", "completedAt", "nextAttemptAt",
    "holder", "message", "reason", "report", "shortfalls",
)  # fmt: skip


def status_schema() -> dict[str, Any]:
    props: dict[str, Any] = {k: {"type": "integer"} for k in (*STATUS_INTS, *STATUS_INTS_MORE)}
    props.update({k: {"type": "string"} for k in STATUS_STRINGS})
    props["conditions"] = {"type": "array", "items": _condition_schema()}
    return {"type": "object", "properties": props}


SCHEDULE_STATUS_STRINGS = ("cronJob", "lastScheduleTime", "lastSuccessfulTime", "reason", "message")


def schedule_status_schema() -> dict[str, Any]:
    props: dict[str, Any] = {k: {"type": "string"} for k in SCHEDULE_STATUS_STRINGS}
    props["observedGeneration"] = {"type": "integer"}
    props["conditions"] = {"type": "array", "items": _condition_schema()}
    return {"type": "object", "properties": props}


def _column(name: str, path: str, kind: str = "string", priority: int = 0) -> dict[str, Any]:
    col: dict[str, Any] = {"name": name, "type": kind, "jsonPath": path}
    if priority:
        col["priority"] = priority
    return col


COLUMNS = [
    _column("Backup", ".spec.backup"),
    _column("Phase", ".status.phase"),
    _column("Ready", '.status.conditions[?(@.type=="Ready")].status'),
    _column("Reason", '.status.conditions[?(@.type=="Ready")].reason'),
    _column("Created", ".status.created", "integer"),
    _column("Status", ".status.statusWritten", "integer"),
    _column("Without", ".status.withoutStatus", "integer"),
    _column("Failed", ".status.failed", "integer"),
    _column("Age", ".metadata.creationTimestamp", "date"),
    _column("Message", ".status.message", priority=1),
]


BACKUP_COLUMNS = [
    _column("Backup", ".status.backup"),
    _column("Phase", ".status.phase"),
    _column("Ready", '.status.conditions[?(@.type=="Ready")].status'),
    _column("Reason", '.status.conditions[?(@.type=="Ready")].reason'),
    _column("Objects", ".status.objects", "integer"),
    _column("Age", ".metadata.creationTimestamp", "date"),
    _column("Message", ".status.message", priority=1),
]

SCHEDULE_COLUMNS = [
    _column("Schedule", ".spec.schedule"),
    _column("Suspend", ".spec.suspend", "boolean"),
    _column("Ready", '.status.conditions[?(@.type=="Ready")].status'),
    _column("Last Schedule", ".status.lastScheduleTime", "date"),
    _column("Age", ".metadata.creationTimestamp", "date"),
    _column("CronJob", ".status.cronJob", priority=1),
]


SERVICE_ACCOUNT = "serviceAccountName"
_SERVICE_ACCOUNT_FIELD = {
    "type": "string",
    "minLength": 1,
    "maxLength": 253,
    "pattern": "^[a-z0-9]([-a-z0-9.]*[a-z0-9])?$",
    "description": "A ServiceAccount in this namespace: the controller impersonates it for every read and write on "
    "the cluster, so the run can do what it may and no more (default: the controller's "
    "--default-service-account, else the controller's own rights unless it runs with --require-service-account).",
}


def restore_crd(fields: list[SpecField]) -> KubeObject:
    """The Restore CRD, its spec holding `fields` (and `backup`, required), its status kstatus-shaped."""
    backup = {"type": "string", "minLength": 1, "description": "The backup to restore."}
    own = {"backup": backup, SERVICE_ACCOUNT: _SERVICE_ACCOUNT_FIELD}
    return _crd(KIND, PLURAL, fields, own, ["backup"], COLUMNS)


def backup_crd(fields: list[SpecField]) -> KubeObject:
    """The Backup CRD: a one-off backup of `fields`' selection, named `backup` (default: the resource's name)."""
    backup = {"type": "string", "minLength": 1, "description": "The backup's name (default: this resource's)."}
    own = {"backup": backup, SERVICE_ACCOUNT: _SERVICE_ACCOUNT_FIELD}
    return _crd(BACKUP_KIND, BACKUP_PLURAL, fields, own, [], BACKUP_COLUMNS)


def schedule_crd(fields: list[SpecField]) -> KubeObject:
    """The BackupSchedule CRD: a CronJob backing up `fields`' selection on `schedule`, then applying retention."""
    own = dict(SCHEDULE_OWN)
    return _crd(SCHEDULE_KIND, SCHEDULE_PLURAL, fields, own, ["schedule"], SCHEDULE_COLUMNS, schedule_status_schema())


def _crd(
    kind: str,
    plural: str,
    fields: list[SpecField],
    own: dict[str, Any],
    required: list[str],
    columns: list[Any],
    status: dict[str, Any] | None = None,
) -> KubeObject:
    by_name = {f.name: f for f in fields}
    props: dict[str, Any] = dict(own)
    for f in fields:
        props[f.name] = {**f.schema, **({"description": f.description} if f.description else {})}
    spec: dict[str, Any] = {"type": "object", "properties": props, **({"required": required} if required else {})}
    checks = rules(by_name)
    if checks:
        spec["allOf"] = checks
    schema = {
        "type": "object",
        "required": ["spec"],
        "properties": {"spec": spec, "status": status or status_schema()},
    }
    version = {
        "name": VERSION,
        "served": True,
        "storage": True,
        "schema": {"openAPIV3Schema": schema},
        "subresources": {"status": {}},
        "additionalPrinterColumns": columns,
    }
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": f"{plural}.{GROUP}", "labels": {"app.kubernetes.io/name": "statusvault"}},
        "spec": {
            "group": GROUP,
            "scope": "Namespaced",
            "names": {
                "plural": plural,
                "singular": kind.lower(),
                "kind": kind,
                "listKind": f"{kind}List",
                "shortNames": [f"sv{kind.lower()}"],
                "categories": ["statusvault"],
            },
            "versions": [version],
        },
    }
