"""Plain values shared by the engines and adapters: resource types, object identities, selections."""

from __future__ import annotations

import dataclasses
import enum
import fnmatch
from collections.abc import Iterable, Mapping
from typing import Any

KubeObject = dict[str, Any]

CRD_GROUP = "apiextensions.k8s.io"
CRD_RESOURCE = "customresourcedefinitions"


class DryRun(enum.StrEnum):
    """kubectl's --dry-run modes, the one shape of every command that has one: none writes; client sends nothing
    and shows what would happen; server sends every write with dryRun=All, so admission runs and nothing persists."""

    NONE = "none"
    CLIENT = "client"
    SERVER = "server"


@dataclasses.dataclass(frozen=True, slots=True)
class ResourceType:
    """One served resource, as discovery describes it."""

    group: str  # "" for the core group
    version: str
    resource: str  # plural
    kind: str
    namespaced: bool
    has_status: bool = False  # discovery lists "<plural>/status"
    custom: bool = False  # defined by a CustomResourceDefinition
    verbs: tuple[str, ...] = ()
    short_names: tuple[str, ...] = ()
    singular: str = ""

    @property
    def api_version(self) -> str:
        return f"{self.group}/{self.version}" if self.group else self.version

    @property
    def qualified(self) -> str:
        """Velero-style name: `resource.group`, or the bare plural for the core group."""
        return f"{self.resource}.{self.group}" if self.group else self.resource

    @property
    def is_crd(self) -> bool:
        return self.group == CRD_GROUP and self.resource == CRD_RESOURCE

    def path(self, namespace: str | None = None, name: str | None = None, sub: str | None = None) -> str:
        """The REST path of the collection, an object, or an object's subresource."""
        base = f"/apis/{self.group}/{self.version}" if self.group else f"/api/{self.version}"
        if self.namespaced and namespace:
            base += f"/namespaces/{namespace}"
        base += f"/{self.resource}"
        if name:
            base += f"/{name}"
            if sub:
                base += f"/{sub}"
        return base


@dataclasses.dataclass(frozen=True, slots=True)
class ObjectKey:
    """Identity of one object in an archive or a cluster."""

    qualified: str  # resource.group
    namespace: str  # "" when cluster-scoped
    name: str

    def __str__(self) -> str:
        return display(self.qualified, self.namespace, self.name)


def display(qualified: str, namespace: str, name: str) -> str:
    """How an object is named to users: `resource.group ns/name`, or `resource.group name` when cluster-scoped."""
    where = f"{namespace}/" if namespace else ""
    return f"{qualified} {where}{name}"


@dataclasses.dataclass(frozen=True)
class Selection:
    """What a backup or a restore takes: namespaces, resources, label selector."""

    namespaces: tuple[str, ...] = ()  # empty: all namespaces
    include_resources: tuple[str, ...] = ()  # empty: every custom resource
    exclude_resources: tuple[str, ...] = ()
    label_selector: str = ""
    include_cluster_resources: bool | None = None  # None: on when no namespace filter is given
    include_crds: bool = True
    names: tuple[str, ...] = ()  # object names or shell-style patterns; empty: every name (CRDs are never filtered)

    @classmethod
    def from_options(
        cls,
        *,
        namespaces: str | Iterable[str] = (),
        include_resources: str | Iterable[str] = (),
        exclude_resources: str | Iterable[str] = (),
        selector: str = "",
        names: str | Iterable[str] = (),
        include_cluster_resources: bool | None = None,
        include_crds: bool | None = True,
        all_namespaces: bool = False,
    ) -> Selection:
        """The one reading of the selection options (the CLI's values, a restore intent's data): lists repeated or
        comma-separated; -A takes every namespace; include_crds None: on unless -n is given."""
        taken = () if all_namespaces else split_csv(namespaces)
        return cls(
            namespaces=taken,
            include_resources=split_csv(include_resources),
            exclude_resources=split_csv(exclude_resources),
            label_selector=selector,
            include_cluster_resources=include_cluster_resources,
            include_crds=not taken if include_crds is None else include_crds,
            names=split_csv(names),
        )

    @classmethod
    def from_values(cls, values: Mapping[str, Any], include_crds: bool | None = None) -> Selection:
        """from_options over option values by their value keys (flagtable.value_key: `namespaces`, `names`,
        ...), as the API and a Backup's spec hold them; `include_crds` when the values do not say."""
        return cls.from_options(
            namespaces=values.get("namespaces") or (),
            include_resources=values.get("include_resources") or (),
            exclude_resources=values.get("exclude_resources") or (),
            selector=str(values.get("selector") or ""),
            names=values.get("names") or (),
            include_cluster_resources=values.get("include_cluster_resources"),
            include_crds=values.get("include_crds", include_crds),
            all_namespaces=bool(values.get("all_namespaces")),
        )

    @property
    def whole_namespaces(self) -> bool:
        """Namespaces (-n) asked for without naming types: a backup then takes their objects, built-ins too."""
        return bool(self.namespaces) and not self.include_resources

    @property
    def cluster_resources(self) -> bool:
        if self.include_cluster_resources is None:
            return not self.namespaces
        return self.include_cluster_resources

    def takes_cluster_scoped(self, named: bool) -> bool:
        """Whether a cluster-scoped type's objects are taken: as --include-cluster-resources says; without it,
        when no -n is given or the type is `named` in --include-resources (backup, restore, move and watch alike)."""
        return self.cluster_resources or (named and self.include_cluster_resources is None)

    def to_dict(self) -> dict[str, Any]:
        return {
            "namespaces": list(self.namespaces),
            "includeResources": list(self.include_resources),
            "excludeResources": list(self.exclude_resources),
            "labelSelector": self.label_selector,
            "includeClusterResources": self.cluster_resources,
            "includeCRDs": self.include_crds,
            "names": list(self.names),
        }


def split_csv(values: str | Iterable[str]) -> tuple[str, ...]:
    """`--x a,b --x c` -> (a, b, c); one string is one comma-separated list."""
    parts = (values,) if isinstance(values, str) else values
    return tuple(v.strip() for raw in parts for v in raw.split(",") if v.strip())


def name_matches(name: str, patterns: tuple[str, ...]) -> bool:
    """True when there are no patterns, or one of them (exact or shell-style: *, ?, [..]) matches."""
    return not patterns or any(fnmatch.fnmatchcase(name, p) for p in patterns)


def object_key(rt: ResourceType, obj: KubeObject) -> ObjectKey:
    meta = obj.get("metadata") or {}
    return ObjectKey(rt.qualified, meta.get("namespace", "") if rt.namespaced else "", meta.get("name", ""))


def writes_status(entry: Any) -> bool:
    """Whether a managedFields entry wrote the object's status: through /status (an entry of its own from
    Kubernetes 1.22), or owning `f:status` (1.20, and types without the subresource)."""
    return isinstance(entry, dict) and (
        entry.get("subresource") == "status" or "f:status" in (entry.get("fieldsV1") or {})
    )
