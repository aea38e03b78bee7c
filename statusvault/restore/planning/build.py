"""Plan a restore: filter the archive's objects, decide each one, and order them into waves. No writes."""

from __future__ import annotations

import dataclasses
import fnmatch
import tempfile
from collections import Counter
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import IO, Any

import orjson

from statusvault.archive import ArchiveReader, parse_member_path
from statusvault.archive.format import checked_object
from statusvault.dependencies import OWNED_BUILTINS, SECRET, DependencyIndex, taken_secret
from statusvault.errors import ArchiveError, ConfigError
from statusvault.kube.discovery import Discovery
from statusvault.model import ObjectKey, ResourceType, Selection
from statusvault.restore.core.plan import Action, Category, PlanItem, RestorePlan, StatusMode
from statusvault.restore.options import ExistingPolicy, RestoreOptions
from statusvault.restore.planning import trust
from statusvault.runtime.killpoints import kill_point
from statusvault.transforms import map_namespace, status_annotation
from statusvault.vocabulary.kinds import CRD_QUALIFIED, NAMESPACES
from statusvault.vocabulary.labels import parse_selector

STATUS_ALL = "*"
BARE_SEQ = 1 << 40  # a streamed plan numbers the namespaces it adds from here: the objects' numbers never move

HELD_STEP = "restore.stream-held"  # kill point (statusvault/runtime/killpoints.py): held items handed on (a selection's
# first match; the first object of a CRD's type)
Sink = Callable[[PlanItem, "dict[str, Any] | None"], None]  # a streamed restore's writer: each item as decided


def dependency_index(manifest: dict[str, Any]) -> DependencyIndex | None:
    """The backup's dependency graph (None: it has none); a malformed one is refused as the manifest is."""
    try:
        return DependencyIndex.of(manifest)
    except ValueError as e:
        raise ArchiveError(f"the backup's manifest is malformed: {e}") from e


# Built-in types a dependency may be of and be restored unnamed, from an authenticated backup (a Secret: not a
# service account token): what a rule brings; anything else needs --include-resources, as without the graph.
DEPENDENCY_TYPES = frozenset(rt.qualified for rt in OWNED_BUILTINS)


def manifest_types(manifest: dict[str, Any]) -> list[ResourceType]:
    """The resource types as recorded at backup time."""
    out = []
    for qualified, r in (manifest.get("resources") or {}).items():
        rt = ResourceType(
            r["group"],
            r["version"],
            r["resource"],
            r["kind"],
            bool(r["namespaced"]),
            bool(r.get("hasStatusSubresource")),
            bool(r.get("custom")),
            ("list",),
            tuple(r.get("shortNames") or ()),
            r.get("singular") or "",
        )
        if rt.qualified != qualified:
            raise ArchiveError(f"manifest entry {qualified!r} does not match its group/resource")
        out.append(rt)
    return out


def _category(rt: ResourceType) -> Category:
    if rt.is_crd:
        return Category.CRD
    if rt.group == "" and rt.resource == "namespaces":
        return Category.NAMESPACE
    return Category.CLUSTER if not rt.namespaced else Category.NAMESPACED


def backup_resources(
    option: str, names: tuple[str, ...], in_backup: Discovery, live: Discovery, where: str = "in this backup"
) -> tuple[str, ...]:
    """The backup's resource types (qualified names) that user-given names stand for, as every option that takes
    resources reads them: resource.group, plural, singular, Kind, short name, or a shell-style pattern; a name the
    backup does not know is looked up in the live cluster. A name that matches nothing in the backup is an error."""
    out: set[str] = set()
    for name in names:
        found = {rt.qualified for rt in in_backup.match(name)}
        if not found:
            known = {rt.qualified for rt in in_backup.preferred}
            found = {rt.qualified for rt in live.match(name)} & known
        if not found:
            raise ConfigError(f"{option} {name}: no resource of that name {where}")
        out |= found
    return tuple(sorted(out))


def resolve_resource_options(opts: RestoreOptions, types: list[ResourceType], live: Discovery) -> RestoreOptions:
    """The options with every resource name resolved against the backup (qualified names), so that each option
    reads names the same way, and a typo fails before anything is written."""
    in_backup = Discovery(types, [])

    def names(option: str, values: tuple[str, ...]) -> tuple[str, ...]:
        return backup_resources(option, values, in_backup, live)

    def order_names(option: str, values: tuple[str, ...]) -> tuple[str, ...]:
        """An order file may name what this backup lacks (a shipped profile copied to a file, one file for many
        backups): a resource the cluster serves, or a pattern, orders nothing here and stays; a name that neither
        the backup nor the cluster knows is a typo (its objects would come first, before every gate): refused
        like any option's."""
        out: set[str] = set()
        for value in values:
            try:
                out |= set(names(option, (value,)))
            except ConfigError:
                served = {rt.qualified for rt in live.match(value)}
                if not served and not any(c in value for c in "*?["):
                    raise
                out |= served or {value}
        return tuple(sorted(out))

    sel, pause = opts.selection, opts.pause
    status_all = (STATUS_ALL,) if STATUS_ALL in opts.status_include else ()
    status_named = tuple(n for n in opts.status_include if n != STATUS_ALL)
    return dataclasses.replace(
        opts,
        selection=dataclasses.replace(
            sel,
            include_resources=names("--include-resources", sel.include_resources),
            exclude_resources=names("--exclude-resources", sel.exclude_resources),
        ),
        status_include=status_all + names("--status-include-resources", status_named),
        status_exclude=names("--status-exclude-resources", opts.status_exclude),
        pause=dataclasses.replace(
            pause,
            resources=names("--pause-resources", pause.resources),
            keep_paused=names("--keep-paused", pause.keep_paused),
        ),
        order=opts.order.resolved(order_names) if opts.order is not None else None,
        allow_privileged=tuple(v for v in opts.allow_privileged if v == trust.ALL)
        + names("--allow-privileged-resources", tuple(v for v in opts.allow_privileged if v != trust.ALL)),
    )


class _Decider:
    """Per-object decisions that depend only on the options and the backup's resource types."""

    def __init__(self, opts: RestoreOptions, types: list[ResourceType], live: Discovery, crds_in_backup: set[str]):
        self.opts = opts
        self.live = live
        self.backup_types = {rt.qualified: rt for rt in types}
        self.include = self._resolve(opts.selection.include_resources)
        self.exclude = self._resolve(opts.selection.exclude_resources, "--exclude-resources")
        self.status_all = STATUS_ALL in opts.status_include
        self.status_include = self._resolve(
            (n for n in opts.status_include if n != STATUS_ALL), "--status-include-resources"
        )
        self.status_exclude = self._resolve(opts.status_exclude, "--status-exclude-resources")
        self.selector = parse_selector(opts.selection.label_selector)
        self.mapping = opts.mapping
        self.crds_in_backup = crds_in_backup  # filled while planning when the CRDs are read in the same pass
        self._targets: dict[str, ResourceType | None] = {}
        self.allow = frozenset(opts.allow_privileged)
        self._custom: dict[str, bool] = {}
        self._privileged: dict[str, str] = {}
        # built-in types named by --status-include-resources: restored with their status (the docs' promise), as
        # if --include-resources named them; a rule that keeps one out is a refusal naming the rule
        self.status_brings = frozenset(q for q in self.status_include if q in self.backup_types and not self.custom(q))
        self._refuse_kept_out()
        self._refuse_privileged(self.include, "--include-resources")
        if not self.include:
            self._refuse_privileged(self.status_brings, "--status-include-resources")

    def _refuse_kept_out(self) -> None:
        """A built-in type whose status is asked for, left out by --include-resources or --exclude-resources: the
        restore would write nothing of what was asked, so it is refused before anything is read or written."""
        for qualified in sorted(self.status_brings):
            if qualified in self.exclude or (self.include and qualified not in self.include):
                rule = "--exclude-resources" if qualified in self.exclude else "--include-resources"
                raise ConfigError(
                    f"--status-include-resources names {qualified}, which {rule} leaves out: no object of it would "
                    f"be restored; name it in --include-resources too, or drop it from {rule}"
                )

    def _refuse_privileged(self, named: Iterable[str], flag: str) -> None:
        """Before anything is read or written: a privileged type named without --allow-privileged-resources."""
        refused = []
        for qualified in sorted(set(named) - {trust.CRDS}):  # a CRD is privileged only when it replaces one
            rt = self.live.by_qualified(qualified) or self.backup_types[qualified]
            why = trust.privileged(rt)
            if why and not trust.allowed(rt, self.allow):
                refused.append(f"{qualified} ({why})")
        if refused:
            names = ",".join(r.split(" ", 1)[0] for r in refused)
            raise ConfigError(
                f"{flag} names privileged type(s): {'; '.join(refused)}: a backup is not trusted to "
                f"write them; add --allow-privileged-resources {names} to restore them (docs/security.md)"
            )

    def custom(self, qualified: str) -> bool:
        """Whether objects of the type are custom resources, as the cluster says (planning/trust.py); once a type."""
        if qualified not in self._custom:
            self._custom[qualified] = trust.custom_type(self.backup_types[qualified], self.live.by_qualified(qualified))
        return self._custom[qualified]

    def privileged(self, rt: ResourceType) -> str:
        """Why objects of the type are privileged ("": not), the cluster's word on custom; once a type."""
        if rt.qualified not in self._privileged:
            trusted = dataclasses.replace(rt, custom=self.custom(rt.qualified))
            self._privileged[rt.qualified] = trust.privileged(trusted)
        return self._privileged[rt.qualified]

    def target(self, qualified: str) -> ResourceType | None:
        """The type an object is written with: as served, or as backed up when its CRD comes with the backup
        (discovery is refreshed after CRDs are created); None: unavailable. CRDs precede their objects in the
        archive, so the first object of a type is decided after every CRD was read."""
        if qualified not in self._targets:
            rt = self.backup_types[qualified]
            served = self.live.by_qualified(qualified)
            if served is not None:
                self._targets[qualified] = dataclasses.replace(served, custom=served.custom or rt.custom)
            else:
                restorable = self.crd_selected(qualified) and qualified in self.crds_in_backup
                self._targets[qualified] = rt if restorable else None
        return self._targets[qualified]

    def _resolve(self, names: Iterable[str], option: str = "--include-resources") -> set[str]:
        return set(backup_resources(option, tuple(names), Discovery(list(self.backup_types.values()), []), self.live))

    def resource_selected(self, qualified: str) -> bool:
        """Named by --include-resources; without it, every custom resource type (and Namespaces): a built-in
        type only when named there or by --status-include-resources, whatever the backup holds
        (restore/planning/trust.py)."""
        if qualified in self.exclude:
            return False
        if self.include:
            return qualified in self.include
        return qualified == NAMESPACES.qualified or self.custom(qualified) or qualified in self.status_brings

    def crd_selected(self, name: str) -> bool:
        """A CRD of the backup comes with the restore unless CRDs are excluded: always without
        --include-resources, else when CRDs are named or the resource it defines is (the target may lack it)."""
        if CRD_QUALIFIED in self.exclude:
            return False
        return not self.include or CRD_QUALIFIED in self.include or name in self.include

    def in_scope(self, cat: Category, key: ObjectKey) -> bool:
        """-n limits namespaced objects and Namespaces; cluster-scoped objects come as --include-cluster-resources
        says (by default: when no -n is given, or their type is named in --include-resources), as in a backup."""
        sel = self.opts.selection
        if cat == Category.CRD:
            return self.crd_selected(key.name)
        if cat == Category.CLUSTER:
            return sel.takes_cluster_scoped(key.qualified in self.include)
        namespace = key.namespace or key.name  # a Namespace object is in scope when -n names it
        return not sel.namespaces or namespace in sel.namespaces

    def wants_status(self, rt: ResourceType, obj: dict[str, Any]) -> bool | None:
        """True: restore it; False: the user asked not to; None: not a status statusvault restores by default."""
        override = status_annotation(obj)
        if override is not None:
            return override
        if rt.is_crd:
            return None  # a CRD's status belongs to the API server
        if self.opts.no_status or rt.qualified in self.status_exclude:
            return False
        if self.status_all:
            return True
        if self.status_include and rt.qualified in self.status_include:
            return True
        return (not self.status_include) if rt.custom else None

    def status_mode(self, rt: ResourceType, obj: dict[str, Any]) -> StatusMode:
        if not obj.get("status"):
            return StatusMode.NONE
        wanted = self.wants_status(rt, obj)
        if not wanted:
            return StatusMode.NONE if wanted is None else StatusMode.LEFT_OUT
        return StatusMode.SUBRESOURCE if rt.has_status else StatusMode.IN_BODY


def build_plan(
    reader: ArchiveReader,
    *,
    options: RestoreOptions,
    live: Discovery,
    exists: Callable[[ResourceType, str, str], bool],
    backup: str = "",
    path: Path | None = None,
    summary: dict[str, Any] | None = None,
    sink: Sink | None = None,
) -> RestorePlan:
    """Read every object (verifying each hash), filter, decide and order. Raises before any write, unless `sink`
    is given (a streamed restore, restore/running/streamed.py): it gets each unowned object as soon as it is decided.

    With the backup's summary manifest, an archive not read yet is planned during its first, checking read
    (one pass instead of two): the summary's resource types guide the decisions, and the archive's own
    manifest must then describe the same types."""
    single = summary is not None and isinstance(summary.get("resources"), dict) and reader.unread
    head = summary if single and summary is not None else reader.head()
    types = manifest_types(head)
    crds: set[str] = set()
    if not single:
        prefix = f"resources/{CRD_QUALIFIED}/"
        crds = {parse_member_path(p).name for p, _ in reader.file_entries() if p.startswith(prefix)}
    planner = _Planner(RestorePlan(backup, head, path), options, _Decider(options, types, live, crds), exists, single)
    planner.sink = sink
    planner.deps = dependency_index(head)
    planner.authenticated = bool(getattr(reader, "authenticated", False))
    try:
        if not reader.walk_first(planner.add):
            for member, data in reader.objects():  # checks every hash, and that nothing is missing or extra
                key = parse_member_path(member)
                planner.add(member, key, checked_object(member, key, data))
        if single and reader.head().get("resources") != head.get("resources"):
            raise ArchiveError("the backup's summary manifest does not describe the resources in its archive")
        planner.plan.manifest = reader.head()
        planner.finish()
    except BaseException:
        planner.plan.close()
        raise
    return planner.plan


class _Planner:
    """Each object read from the archive decided and added to the plan; then the namespaces it needs."""

    def __init__(
        self,
        plan: RestorePlan,
        opts: RestoreOptions,
        decider: _Decider,
        exists: Callable[[ResourceType, str, str], bool],
        learn_crds: bool,
    ):
        self.plan, self.opts, self.decider, self.exists = plan, opts, decider, exists
        self.learn_crds = learn_crds  # single pass: the CRDs in the backup are learnt as they are read
        self.namespaces_needed: set[str] = set()
        self.named: set[str] = set()  # --name patterns that matched something
        self.matched = 0  # objects the selection chose (CRDs come along with -n: they count only when asked for)
        self.sink: Sink | None = None
        self.namespaces: dict[str, bool] = {}  # streamed: target namespaces met so far -> whether the backup has it
        self.held = _Held()  # streamed with a selection: what waits until the selection has matched something
        self.crds_waiting: dict[str, _Held] = {}  # streamed, part of the backup: a CRD until an object of its type
        self.left_out: Counter[str] = Counter()  # objects of built-in types the restore was not asked for
        self.privileged: dict[str, int] = {}  # privileged types written as allowed: objects
        self.crds_kept: list[str] = []  # existing CRDs not replaced (policy update without the allowance)
        self.deps: DependencyIndex | None = None  # the backup's dependency graph
        self.authenticated = False  # whether the archive is authenticated (encrypted, or signed and verified)
        self.planned: set[tuple[str, str, str]] = set()  # with a graph: what the plan takes, as archived
        self.deps_taken: Counter[str] = Counter()  # objects restored as dependencies, by type
        self.deps_left_out: Counter[str] = Counter()  # dependencies not restored, by why
        self.deps_differ: list[str] = []  # existing dependencies kept as they are although the backup's differ

    def add(self, path: str, key: ObjectKey, obj: dict[str, Any]) -> None:
        decider, sel = self.decider, self.opts.selection
        rt = decider.backup_types.get(key.qualified)
        if rt is None:
            raise ArchiveError(f"{path} belongs to a resource the manifest does not describe")
        cat = _category(rt)
        if cat == Category.CRD and self.learn_crds:
            decider.crds_in_backup.add(key.name)
        dependency = self._brought(key)  # the dependency of an object the restore takes: its selection is theirs
        if cat != Category.CRD and not decider.resource_selected(key.qualified):
            if not dependency:
                if not decider.include and key.qualified not in decider.exclude:
                    self.left_out[key.qualified] += 1
                return
            if not self._dependency_allowed(key, obj):
                return
        if not decider.in_scope(cat, key):
            return
        if obj.get("kind") != rt.kind:
            raise ArchiveError(f"{path} holds an object whose kind, namespace or name does not match its path")
        meta = obj["metadata"]
        if cat not in (Category.CRD, Category.NAMESPACE) and not dependency:
            if not decider.selector(meta.get("labels") or {}):
                return
            if sel.names:
                matched = [p for p in sel.names if fnmatch.fnmatchcase(key.name, p)]
                if not matched:
                    return
                self.named.update(matched)
        item = _plan_item(key.qualified, obj, cat, decider, self.exists)
        if self.deps is not None:
            self.planned.add((key.qualified, key.namespace, key.name))
            if dependency:
                self._dependency_item(item, obj)
        if dependency:
            self.deps_taken[key.qualified] += 1
        else:
            self._trusted(item)
        if self.opts.order is not None and cat not in (Category.CRD, Category.NAMESPACE):
            item.group = self.opts.order.group_of(key.qualified, meta.get("labels") or {})
        self.matched += cat != Category.CRD or CRD_QUALIFIED in decider.include
        if item.rt.namespaced:  # an unavailable one too: a resumed run writes it once its CRD is installed
            self.namespaces_needed.add(item.namespace)
        refs = meta.get("ownerReferences")
        owners = [r.get("uid", "") for r in refs] if refs else []
        if self.sink is None:
            self.plan.add(item, owners)
            return
        self._stream(item, obj, owners)

    def _brought(self, key: ObjectKey) -> bool:
        """Whether the backup's graph says an object this restore takes brought this one (an excluded type never
        comes)."""
        if self.deps is None or key.qualified in self.decider.exclude:
            return False
        deps, seen = self.deps, set()
        todo = [(key.qualified, key.namespace, key.name)]
        while todo:  # through other dependencies, at any depth: a Secret owned by a Service a planned object owns,
            for source in deps.brought_by(todo.pop()):  # whatever order the archive holds them in
                if source in self.planned:
                    return True
                if source not in seen:
                    seen.add(source)
                    todo.append(source)
        return False

    def _dependency_allowed(self, key: ObjectKey, obj: dict[str, Any]) -> bool:
        """Whether a dependency of a type the restore was not asked for may come: custom, or of a type a rule brings
        from an authenticated backup (trust.py), never a service account token. Else it is counted as left
        out, and why."""
        if self.decider.custom(key.qualified):
            return True
        if key.qualified not in DEPENDENCY_TYPES:
            why = f"{key.qualified}: not a type a dependency is restored as unnamed"
        elif not self.authenticated:
            why = f"{key.qualified}: the backup is not authenticated (encrypt or sign it)"
        elif key.qualified == SECRET and not taken_secret(obj):
            why = f"{key.qualified}: a service account token"
        else:
            return True
        self.deps_left_out[why] += 1
        return False

    def _dependency_item(self, item: PlanItem, obj: dict[str, Any]) -> None:
        """A dependency is written before what refers to it (depth -1: the first wave of its category; one owned
        by an object in the plan still follows its owner); an existing one that differs is reported, kept."""
        item.depth = -1
        edges = self.deps.edges if self.deps is not None else {}
        for e in edges.get((item.rt.qualified, item.source_namespace, item.name), ()):
            if (e.source.qualified, e.source.namespace, e.source.name) in self.planned:  # what brought it, and how
                self.plan.dependencies.append([item.display, str(e.source), e.via])
        if item.action == Action.SKIP_EXISTS:
            differs = getattr(
                self.exists, "differs", None
            )  # restore/planning/existence.py: one GET, data never printed
            if differs is not None and differs(item.rt, item.namespace, item.name, obj):
                self.deps_differ.append(item.display)

    def _trusted(self, item: PlanItem) -> None:
        """An existing CRD or Namespace is updated only when allowed (a CRD's schema decides every object of its
        type; a Namespace's labels its Pod Security level); privileged types written as allowed are counted."""
        allow = self.decider.allow
        replaces = item.category in (Category.CRD, Category.NAMESPACE) and item.action == Action.UPDATE
        if replaces and not trust.allowed(item.rt, allow):
            item.action = Action.SKIP_EXISTS
            self.crds_kept.append(f"{item.rt.kind} {item.name}")
        elif item.category != Category.CRD and self.decider.privileged(item.rt):
            self.privileged[item.rt.qualified] = self.privileged.get(item.rt.qualified, 0) + 1

    def _stream(self, item: PlanItem, obj: dict[str, Any], owners: list[str]) -> None:
        """Hand the item to the sink unless it has owners (those wait for the waves after the stream, in depth
        order); CRDs and namespaces always go, as in the waves their category comes before their owners'.

        With a selection, what comes before its first match is held, spooled, until the selection has matched
        something: one that matches nothing fails in finish() with nothing written. A restore of a part of the backup
        holds each CRD until an object of its type comes (one that never comes is never written)."""
        holding = not self.matched and bool(_selection(self.opts.selection))
        if self.held and not holding and self.sink is not None:
            self.held.release(self.sink)
        if item.category == Category.CRD and self._part() and item.name not in self.decider.include:
            self.plan.add(item, owners, True)  # written before the first object of its type, or left out
            self.crds_waiting.setdefault(item.name, _Held()).hold(item, obj)
            return
        waiting = self.crds_waiting.pop(item.rt.qualified, None)
        if waiting is not None and self.sink is not None:
            waiting.release(self.sink)
        if item.category == Category.NAMESPACE:
            self.namespaces[item.name] = True
        elif item.rt.namespaced:
            self._bare_namespace(item.namespace)
        streamed = not any(owners) or item.category in (Category.CRD, Category.NAMESPACE)
        self.plan.add(item, owners, streamed)
        if streamed and holding:
            self.held.hold(item, obj)
        elif streamed and self.sink is not None:
            self.sink(item, obj)

    def _part(self) -> bool:
        """Whether the restore takes a part of the backup (-n, --name, -l): then it creates only the CRDs its
        objects need, and those named in --include-resources."""
        sel = self.opts.selection
        return bool(sel.namespaces or sel.names or sel.label_selector)

    def _bare_namespace(self, ns: str) -> None:
        """A target namespace that neither exists nor comes from the backup is created before the first object in
        it; numbered by its place among those met (added or not), so a re-run numbers every row the same."""
        if ns in self.namespaces:
            return
        self.namespaces[ns] = False
        if self.decider.live.by_qualified(NAMESPACES.qualified) is None or self.exists(NAMESPACES, "", ns):
            return
        item = PlanItem(NAMESPACES, "", "", ns, "", Category.NAMESPACE, Action.CREATE, StatusMode.NONE)
        item.in_archive = False
        self.plan.add(item, (), True, BARE_SEQ + len(self.namespaces))
        if self.sink is not None:
            self.sink(item, None)

    def finish(self) -> None:
        sel, plan = self.opts.selection, self.plan
        self.held.close()  # held only while nothing matched: then there is nothing to restore
        if not self.matched and _selection(sel):
            raise ConfigError(f"nothing in backup {plan.backup} matches {_selection(sel)}: nothing to restore")
        plan.warnings += [f"no object in the selection is named {p!r}" for p in sel.names if p not in self.named]
        plan.warnings += self._trust_warnings()
        if self._part():  # a part of the backup asked for: only the CRDs its objects need (streamed: never written)
            for waiting in self.crds_waiting.values():
                waiting.close()
            dropped = plan.drop_unneeded_crds(self.decider.include)
            if dropped:
                plan.warnings.append(f"left out {len(dropped)} CRD(s) of the backup no restored object needs: "
                                     f"{', '.join(dropped[:5])}{' ...' if len(dropped) > 5 else ''}")  # fmt: skip
        if self.decider.live.by_qualified(NAMESPACES.qualified) is not None and self.sink is None:  # a server
            _add_namespaces(plan, self.namespaces_needed, self.exists)  # without the core API takes any name
        plan.seal()

    def _trust_warnings(self) -> list[str]:
        out = []
        if self.left_out:
            kinds = ", ".join(f"{q} ({n})" for q, n in sorted(self.left_out.items()))
            out.append(
                f"left out {sum(self.left_out.values())} object(s) of built-in types the restore was not asked for: "
                f"{kinds}; name them with --include-resources to restore them"
            )
        for qualified, n in sorted(self.privileged.items()):
            why = trust.PRIVILEGED.get(qualified, "cluster-scoped built-in")
            out.append(f"privileged: {n} object(s) of {qualified} ({why}), as --allow-privileged-resources allows")
        if self.deps_taken:
            kinds = ", ".join(f"{q} ({n})" for q, n in sorted(self.deps_taken.items()))
            out.append(
                f"with {sum(self.deps_taken.values())} dependency object(s) the backup's graph brings: {kinds}; "
                "`describe` shows which object needs each, and by which reference"
            )
        if self.deps_left_out:
            whys = "; ".join(f"{why} ({n})" for why, n in sorted(self.deps_left_out.items()))
            out.append(
                f"left out {sum(self.deps_left_out.values())} dependency object(s): {whys}; name their types with "
                "--include-resources (and --allow-privileged-resources) to restore them"
            )
        if self.deps_differ:
            shown = ", ".join(self.deps_differ[:5]) + (" ..." if len(self.deps_differ) > 5 else "")
            out.append(
                f"kept {len(self.deps_differ)} existing dependency object(s) that differ from the backup: {shown}; "
                "--existing-resource-policy update replaces them"
            )
        if self.crds_kept:
            out.append(
                f"kept {len(self.crds_kept)} existing CRD(s) and Namespace(s) as they are (policy update): "
                f"{', '.join(sorted(self.crds_kept)[:5])}{' ...' if len(self.crds_kept) > 5 else ''}; updating them "
                f"needs --allow-privileged-resources {trust.CRDS} or namespaces"
            )
        return out


class _Held:
    """Items a streamed restore holds back, their objects spooled to a temporary file (CRDs can be large and
    many: memory stays flat), handed on in the order they came."""

    def __init__(self) -> None:
        self.items: list[tuple[PlanItem, int]] = []
        self.spool: IO[bytes] | None = None

    def __bool__(self) -> bool:
        return bool(self.items)

    def hold(self, item: PlanItem, obj: dict[str, Any] | None) -> None:
        if obj is None:
            self.items.append((item, -1))
            return
        if self.spool is None:
            self.spool = tempfile.TemporaryFile(prefix="statusvault-held-")  # noqa: SIM115 - closed by release() or close()
        data = orjson.dumps(obj)
        self.spool.write(data)
        self.items.append((item, len(data)))

    def release(self, sink: Sink) -> None:
        kill_point(HELD_STEP)
        items, spool = self.items, self.spool
        self.items = []
        if spool is not None:
            spool.seek(0)
        for item, size in items:
            sink(item, None if size < 0 or spool is None else orjson.loads(spool.read(size)))
        self.close()

    def close(self) -> None:
        if self.spool is not None:
            self.spool.close()
            self.spool = None
        self.items = []


def _selection(sel: Selection) -> str:
    """The user's selection, as they gave it ("" when they gave none)."""
    parts = [
        f"{flag} {','.join(values)}"
        for flag, values in (
            ("--namespace", sel.namespaces),
            ("--include-resources", sel.include_resources),
            ("--name", sel.names),
        )
        if values
    ]
    if sel.label_selector:
        parts.append(f"--selector {sel.label_selector}")
    return " ".join(parts)


def _plan_item(
    qualified: str,
    obj: dict[str, Any],
    cat: Category,
    decider: _Decider,
    exists: Callable[[ResourceType, str, str], bool],
) -> PlanItem:
    meta = obj.get("metadata") or {}
    target = decider.target(qualified)
    rt = target if target is not None else decider.backup_types[qualified]
    ns = map_namespace(meta.get("namespace", ""), decider.mapping) if rt.namespaced else ""
    if target is None:
        action = Action.UNAVAILABLE
    elif "deletionTimestamp" in meta:
        action = Action.SKIP_TERMINATING
    elif exists(rt, ns, meta["name"]):
        action = Action.UPDATE if decider.opts.existing_policy == ExistingPolicy.UPDATE else Action.SKIP_EXISTS
        lacks = getattr(exists, "lacks_status", None)  # restore/planning/existence.py: as the cluster's objects say
        if action == Action.SKIP_EXISTS and lacks is not None and lacks(rt, ns, meta["name"]):
            action = Action.SKIP_LACKING if decider.status_mode(rt, obj).wanted else action
    else:
        action = Action.CREATE
    return PlanItem(
        rt,
        meta.get("namespace", "") if rt.namespaced else "",
        ns,
        meta["name"],
        meta.get("uid", ""),
        cat,
        action,
        decider.status_mode(rt, obj),
    )


def _add_namespaces(plan: RestorePlan, needed: set[str], exists: Callable[[ResourceType, str, str], bool]) -> None:
    """Target namespaces that neither exist nor come from the backup are created bare."""
    for ns in sorted(needed - plan.names(Category.NAMESPACE)):
        if not exists(NAMESPACES, "", ns):
            item = PlanItem(NAMESPACES, "", "", ns, "", Category.NAMESPACE, Action.CREATE, StatusMode.NONE)
            item.in_archive = False
            plan.add(item)
