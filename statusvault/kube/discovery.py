"""Discovery: which resources the server serves, their preferred version, scope and `/status` subresource."""

from __future__ import annotations

import dataclasses
import fnmatch
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from statusvault.errors import ConfigError, Forbidden, NotFound, Unavailable
from statusvault.kube.client import KubeClient
from statusvault.model import ResourceType
from statusvault.vocabulary.kinds import CRDS


def parse_resource_list(
    group: str, version: str, body: dict[str, Any], custom: frozenset[tuple[str, str]] = frozenset()
) -> list[ResourceType]:
    """Build ResourceTypes from one APIResourceList; `<plural>/status` entries mark has_status."""
    entries = body.get("resources") or []
    with_status = {e["name"].split("/")[0] for e in entries if e["name"].endswith("/status")}
    out = []
    for e in entries:
        if "/" in e["name"]:
            continue
        out.append(
            ResourceType(
                group=group,
                version=version,
                resource=e["name"],
                kind=e["kind"],
                namespaced=bool(e.get("namespaced")),
                has_status=e["name"] in with_status,
                custom=(group, e["name"]) in custom,
                verbs=tuple(e.get("verbs") or ()),
                short_names=tuple(e.get("shortNames") or ()),
                singular=e.get("singularName") or "",
            )
        )
    return out


_Lookup = tuple[dict[str, ResourceType], dict[tuple[str, str, str], ResourceType], dict[tuple[str, str], ResourceType]]


@dataclasses.dataclass
class Discovery:
    """The server's resources, each in its group's preferred version (or, for a type that version does not serve,
    the first version that does), plus every served version for lookups."""

    preferred: list[ResourceType]
    all_versions: list[ResourceType]
    _lookup: _Lookup | None = dataclasses.field(default=None, init=False, repr=False, compare=False)

    def resolve(self, name: str) -> ResourceType:
        """Resolve `resource.group`, `kind.group`, a plural, singular, Kind or short name."""
        matches = self._named(name)
        if not matches:
            raise ConfigError(
                f"unknown resource {name!r}: not served by this cluster "
                "(use resource.group, e.g. kubernetesclusters.xyz.example.com)"
            )
        return matches[0]

    def match(self, name: str) -> list[ResourceType]:
        """The types a user-given name stands for: a shell-style pattern (`*.example.com`, `widget*`) matches
        any of a type's names (as `resolve` takes them); anything else is resolved. [] when nothing matches."""
        if not any(c in name for c in "*?["):
            return self._named(name)
        wanted = name.strip().lower()
        return [rt for rt in self.preferred if any(fnmatch.fnmatchcase(n, wanted) for n in _names(rt))]

    def _named(self, name: str) -> list[ResourceType]:
        """The one type a plain name stands for ([] when none); ConfigError when it names several."""
        wanted = name.strip().lower()
        matches = [rt for rt in self.preferred if wanted in _names(rt)]
        if len(matches) > 1:
            exact = [rt for rt in matches if wanted == rt.qualified]
            if len(exact) == 1:
                return exact
            options = ", ".join(sorted(rt.qualified for rt in matches))
            raise ConfigError(f"resource name {name!r} is ambiguous: {options}")
        return matches

    def find(self, group: str, version: str, kind: str) -> ResourceType | None:
        """The resource for an apiVersion/kind, preferring the exact served version."""
        exact, preferred = self._index()[1:]
        return exact.get((group, version, kind)) or preferred.get((group, kind))

    def by_qualified(self, qualified: str) -> ResourceType | None:
        return self._index()[0].get(qualified)

    def _index(self) -> _Lookup:
        """Lookups by name, built once (a restore asks for every object); the first match wins, as in a scan."""
        if self._lookup is None:
            by_name = {rt.qualified: rt for rt in reversed(self.preferred)}
            exact = {(rt.group, rt.version, rt.kind): rt for rt in reversed(self.all_versions)}
            preferred = {(rt.group, rt.kind): rt for rt in reversed(self.preferred)}
            self._lookup = (by_name, exact, preferred)
        return self._lookup

    def custom(self) -> list[ResourceType]:
        return [rt for rt in self.preferred if rt.custom]


def _names(rt: ResourceType) -> set[str]:
    names = {rt.resource, rt.kind.lower(), rt.singular, *rt.short_names}
    names.discard("")
    qualified = {f"{n}.{rt.group}" for n in names} if rt.group else set()
    return names | qualified | {rt.qualified}


BUILTIN_GROUPS = frozenset({"", "apps", "batch", "autoscaling", "policy", "extensions"})


def builtin_group(group: str) -> bool:
    return group in BUILTIN_GROUPS or group == "k8s.io" or group.endswith(".k8s.io")


def _custom_resources(client: KubeClient) -> frozenset[tuple[str, str]] | None:
    """(group, plural) of every CRD; None when this identity may not list CRDs (a namespaced Role)."""
    try:
        body = client.get_path(CRDS.path())
    except Forbidden:
        return None
    return frozenset((c["spec"]["group"], c["spec"]["names"]["plural"]) for c in body.get("items") or [])


def discover(client: KubeClient, workers: int = 8) -> Discovery:
    """Read /api and /apis and every group version, in parallel; mark CRD-defined resources."""
    core = client.get_path("/api")
    groups = client.get_path("/apis").get("groups") or []
    wanted: list[tuple[str, str, bool]] = [("", v, v == "v1") for v in core.get("versions") or []]
    for g in groups:
        preferred = (g.get("preferredVersion") or {}).get("groupVersion")
        for v in g.get("versions") or []:
            wanted.append((g["name"], v["version"], v["groupVersion"] == preferred))
    crds = _custom_resources(client)

    def fetch(item: tuple[str, str, bool]) -> list[ResourceType]:
        group, version, _ = item
        path = f"/apis/{group}/{version}" if group else f"/api/{version}"
        try:
            body = client.get_path(path)
        except (NotFound, Unavailable):  # an aggregated API that is down: skip it, as kubectl does
            return []
        if crds is None:  # cannot read CRDs: every resource of a non-Kubernetes group counts as custom
            custom = frozenset((group, r["name"]) for r in body.get("resources") or [] if not builtin_group(group))
        else:
            custom = crds
        return parse_resource_list(group, version, body, custom)

    with ThreadPoolExecutor(max_workers=workers) as pool:
        lists = list(pool.map(fetch, wanted))
    preferred = [rt for item, rts in zip(wanted, lists, strict=True) if item[2] for rt in rts]
    have = {(rt.group, rt.resource) for rt in preferred}
    for item, rts in zip(wanted, lists, strict=True):  # a type its group's preferred version lacks (Velero's
        for rt in rts if not item[2] else ():  # DataUploads: velero.io/v2alpha1 only): in the first version that
            if (rt.group, rt.resource) not in have:  # serves it, as the server lists them (priority order)
                have.add((rt.group, rt.resource))
                preferred.append(rt)
    everything = [rt for rts in lists for rt in rts]
    return Discovery(preferred, everything)


def established(crd: dict[str, Any] | None) -> bool:
    """A CRD whose Established condition is True: its resource is served."""
    conditions = ((crd or {}).get("status") or {}).get("conditions") or []
    return any(c.get("type") == "Established" and c.get("status") == "True" for c in conditions)
