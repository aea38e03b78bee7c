"""The restore plan is a value: decisions and order computed from the archive, options and cluster facts."""

from __future__ import annotations

import dataclasses

import pytest

from statusvault.archive import ArchiveReader
from statusvault.errors import ConfigError
from statusvault.kube.discovery import Discovery
from statusvault.model import Selection
from statusvault.restore.core.plan import Action, Category, StatusMode
from statusvault.restore.options import RestoreOptions
from statusvault.restore.ordering.order import load_order
from statusvault.restore.planning.build import build_plan, resolve_resource_options
from statusvault.restore.planning.trust import privileged
from statusvault.vocabulary.kinds import CRDS, NAMESPACES
from tests.builders import cr, resource_type, with_meta, write_archive

KC = dataclasses.replace(resource_type("xyz.example.com", "KubernetesCluster"), short_names=("kc",))
DB = resource_type("db.example.com", "Database")
LEGACY = resource_type("legacy.example.com", "LegacyApp", status=False)
POOL = resource_type("infra.example.com", "Pool", namespaced=False)
SVC = resource_type("", "Service", custom=False)


def obj(rt, name, ns="team-a", status=None, owners=None, **kw):
    o = cr(f"{rt.group}/v1" if rt.group else "v1", rt.kind, name, status=status, **kw)
    if owners:
        o["metadata"]["ownerReferences"] = [{"apiVersion": "v1", "kind": "X", "name": n, "uid": u} for n, u in owners]
    return with_meta(o, ns if rt.namespaced else "")


def crd_obj(rt):
    return with_meta(
        {
            "apiVersion": "apiextensions.k8s.io/v1",
            "kind": "CustomResourceDefinition",
            "metadata": {"name": rt.qualified},
            "spec": {"group": rt.group},
        }
    )


@pytest.fixture
def archive(tmp_path):
    owner = obj(KC, "parent", status={"a": 1})
    owner["metadata"]["uid"] = "uid-parent"
    child = obj(DB, "child", status={"externalID": "x"}, owners=[("parent", "uid-parent")])
    child["metadata"]["uid"] = "uid-child"
    grandchild = obj(DB, "grandchild", status={"externalID": "y"}, owners=[("child", "uid-child")])
    entries = [
        (CRDS, crd_obj(KC)),
        (POOL, obj(POOL, "p1", status={"allocated": 1})),
        (DB, grandchild),
        (DB, child),
        (KC, owner),
        (KC, obj(KC, "optout", status={"a": 2}, annotations={"statusvault.io/restore-status": "false"})),
        (KC, obj(KC, "nostatus", labels={"env": "dev"})),
        (LEGACY, obj(LEGACY, "billing", status={"ref": 1})),
        (SVC, obj(SVC, "web", status={"loadBalancer": {}})),
    ]
    return ArchiveReader(write_archive(tmp_path / "a.tar.gz", entries))


def live_discovery(*types):
    return Discovery(list(types), list(types))


SELECTION = {f.name for f in dataclasses.fields(Selection)}


def plan(archive, exists=lambda rt, ns, name: False, live=None, **opts):
    """Plan with RestoreOptions given flat: the selection's fields go into its Selection."""
    live = live or live_discovery(CRDS, NAMESPACES, KC, DB, LEGACY, POOL, SVC)
    selection = Selection(**{k: opts.pop(k) for k in list(opts) if k in SELECTION})
    return build_plan(
        archive, options=RestoreOptions(selection=selection, **opts), live=live, exists=exists, backup="b"
    )


def by_name(p):
    return {i.name: i for i in p.items()}


def test_status_modes_default_to_custom_resources(archive):
    items = by_name(plan(archive))
    assert items["parent"].status_mode == StatusMode.SUBRESOURCE
    assert items["billing"].status_mode == StatusMode.IN_BODY
    assert items["optout"].status_mode == StatusMode.LEFT_OUT, "annotation false: saved, left out as asked"
    assert items["nostatus"].status_mode == StatusMode.NONE, "nothing saved"
    assert "web" not in items, "a built-in type comes only when named"
    assert items[KC.qualified].status_mode == StatusMode.NONE, "a CRD's status belongs to the API server"


def test_status_star_includes_builtins_and_exclude_wins(archive):
    named = ("kubernetesclusters.xyz.example.com", "databases.db.example.com", "services")
    items = by_name(
        plan(archive, include_resources=named, status_include=("*",), status_exclude=("databases.db.example.com",))
    )
    assert items["web"].status_mode == StatusMode.SUBRESOURCE
    assert items["child"].status_mode == StatusMode.LEFT_OUT


def test_status_include_narrows(archive):
    named = ("kubernetesclusters.xyz.example.com", "databases.db.example.com", "services", "pools.infra.example.com")
    items = by_name(plan(archive, include_resources=named, status_include=("kubernetesclusters.xyz.example.com",)))
    assert items["parent"].status_mode == StatusMode.SUBRESOURCE
    assert items["child"].status_mode == StatusMode.LEFT_OUT
    assert items["p1"].status_mode == StatusMode.LEFT_OUT
    assert items["web"].status_mode == StatusMode.NONE, "a built-in not asked for is not left out by the user"


def test_no_status(archive):
    modes = {i.name: i.status_mode for i in plan(archive, no_status=True).items()}
    assert set(modes.values()) == {StatusMode.NONE, StatusMode.LEFT_OUT}
    assert modes["parent"] == StatusMode.LEFT_OUT and modes["nostatus"] == StatusMode.NONE


def test_a_server_without_namespaces_gets_no_namespace_creates(archive):
    """A bare CRD server (no core API) takes namespaced objects in any namespace name: none is planned."""
    p = plan(archive, live=live_discovery(CRDS, KC, DB, LEGACY, POOL, SVC))
    assert not [i for i in p.items() if i.category == Category.NAMESPACE]
    assert "team-a" in {i.namespace for i in p.items()}
    with_core = plan(archive)
    assert [i.name for i in with_core.items() if i.category == Category.NAMESPACE] == ["team-a"]


def test_waves_put_crds_namespaces_cluster_then_owners_before_dependents(archive):
    p = plan(archive)
    waves = p.waves()
    order = [[i.name for i in p.items(w)] for w in waves]
    assert order[0] == [KC.qualified]
    assert order[1] == ["team-a"] and waves[1].category == Category.NAMESPACE
    assert order[2] == ["p1"]
    flat = [n for w in order for n in w]
    assert flat.index("parent") < flat.index("child") < flat.index("grandchild")


def test_existing_objects_follow_the_policy(archive):
    def exists(rt, ns, name):
        return name in ("parent", "team-a")

    assert by_name(plan(archive, exists))["parent"].action == Action.SKIP_EXISTS
    assert by_name(plan(archive, exists, existing_policy="update"))["parent"].action == Action.UPDATE
    assert "team-a" not in by_name(plan(archive, exists)), "an existing namespace is not planned"


def test_namespace_mapping_moves_objects_and_adds_the_target_namespace(archive):
    items = by_name(plan(archive, namespace_mapping=(("team-a", "team-b"),)))
    assert items["parent"].namespace == "team-b"
    assert items["team-b"].category == Category.NAMESPACE
    assert items["p1"].namespace == ""


def test_filters(archive):
    names = set(by_name(plan(archive, include_resources=("kc",), label_selector="env=dev")))
    assert names == {"nostatus", "team-a", KC.qualified}, "the CRD of a selected resource comes with it"
    names = set(
        by_name(
            plan(
                archive,
                include_resources=("kc",),
                exclude_resources=("CustomResourceDefinition",),
                label_selector="env=dev",
            )
        )
    )
    assert names == {"nostatus", "team-a"}
    names = set(by_name(plan(archive, exclude_resources=("databases.db.example.com", "Service"))))
    assert "child" not in names and "web" not in names and "parent" in names


def test_unknown_resource_name_is_an_error_before_anything(archive):
    with pytest.raises(ConfigError, match="--include-resources gizmos.example.com: no resource of that name"):
        plan(archive, include_resources=("gizmos.example.com",))


def test_a_resource_not_served_gets_its_crd_from_the_backup_with_include_resources(archive):
    """A target without the CRD (a move, a new cluster): the CRD the backup holds comes with its objects."""
    items = by_name(plan(archive, include_resources=("kubernetesclusters.xyz.example.com",), live=live_discovery(CRDS)))
    assert items[KC.qualified].action == Action.CREATE
    assert items["parent"].action == Action.CREATE
    items = by_name(
        plan(archive, include_resources=("kc",), exclude_resources=(CRDS.qualified,), live=live_discovery(CRDS))
    )
    assert KC.qualified not in items and items["parent"].action == Action.UNAVAILABLE


def test_no_include_cluster_resources_leaves_cluster_scoped_objects_without_a_namespace_filter(archive):
    assert "p1" not in by_name(plan(archive, include_cluster_resources=False))
    assert KC.qualified in by_name(plan(archive, include_cluster_resources=False)), "CRDs are not custom resources"


def test_resource_without_crd_in_backup_and_not_served_is_unavailable(archive):
    items = by_name(
        plan(
            archive,
            live=live_discovery(CRDS, DB, LEGACY, POOL, SVC, KC.__class__("other.io", "v1", "things", "Thing", True)),
        )
    )
    assert items["child"].action == Action.CREATE
    items = by_name(plan(archive, live=live_discovery(CRDS, KC, LEGACY, POOL, SVC)))
    assert items["child"].action == Action.UNAVAILABLE, "databases: no CRD in the backup, not served"
    assert items["parent"].action == Action.CREATE


def test_namespace_filter_leaves_cluster_scoped_objects_unless_asked(archive):
    assert "p1" not in by_name(plan(archive, namespaces=("team-a",)))
    assert "p1" in by_name(plan(archive, namespaces=("team-a",), include_cluster_resources=True))
    assert "p1" in by_name(plan(archive))
    names = by_name(plan(archive, namespaces=("team-a",)))
    assert "parent" in names and KC.qualified in names, "CRDs still come first"


def test_a_cluster_scoped_type_named_in_include_resources_comes_with_n_as_in_a_backup(archive):
    """`-n team-a --include-resources kc,pools` takes the pools in a backup: a restore reads it the same way."""
    named = ("kc", "pools.infra.example.com")
    assert "p1" in by_name(plan(archive, namespaces=("team-a",), include_resources=named))
    assert "p1" not in by_name(
        plan(archive, namespaces=("team-a",), include_resources=named, include_cluster_resources=False)
    )


@pytest.mark.parametrize(
    "selection, said",
    [
        ({"namespaces": ("other",)}, "--namespace other"),
        ({"label_selector": "env=none"}, "--selector env=none"),
        (
            {
                "include_resources": ("pools.infra.example.com",),
                "namespaces": ("team-a",),
                "include_cluster_resources": False,
            },
            "--namespace team-a --include",
        ),
    ],
)
def test_a_selection_that_matches_nothing_is_an_error_not_an_empty_success(archive, selection, said):
    with pytest.raises(ConfigError, match=f"nothing in backup b matches {said}"):
        plan(archive, **selection)


def test_an_object_that_does_not_match_its_path_is_refused(tmp_path, monkeypatch):
    import tempfile

    scratch = tmp_path / "scratch"
    scratch.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(scratch))
    import orjson

    from statusvault.archive import ArchiveWriter
    from statusvault.errors import ArchiveError

    path = tmp_path / "evil.tar.gz"
    evil = obj(KC, "harmless", ns="team-a")
    evil["metadata"]["namespace"] = "kube-system"
    with open(path, "wb") as sink:
        w = ArchiveWriter(sink)
        w.add(f"resources/{KC.qualified}/namespaces/team-a/harmless.json", orjson.dumps(evil))
        from statusvault.backup import ResourceSummary

        w.finish({"formatVersion": "1.0", "resources": {KC.qualified: ResourceSummary(KC, 1).to_dict()}})
    with pytest.raises(ArchiveError, match="does not match its path"):
        plan(ArchiveReader(path))
    assert list(scratch.iterdir()) == [], "a refused plan leaves no file behind"


def test_an_order_file_may_name_what_the_backup_lacks_but_not_what_nothing_knows():
    """A profile copied to a file names types this backup lacks: a type the cluster serves or a pattern orders
    nothing here; a name that neither the backup nor the cluster knows is a typo."""
    providers = resource_type("pkg.crossplane.io", "Provider")
    live = Discovery([KC, SVC, resource_type("", "Secret", custom=False), providers], [])

    def order(*names: str) -> RestoreOptions:
        text = "version: v1\ngroups:\n  - name: a\n    resources: [" + ", ".join(f"'{n}'" for n in names) + "]\n"
        return RestoreOptions(order=load_order(text, "my-order.yaml"))

    resolved = resolve_resource_options(
        order("kc", "secrets", "providers.pkg.crossplane.io", "*.upbound.io"), [KC], live
    )
    assert resolved.order is not None
    assert resolved.order.groups[0].resources == (
        "*.upbound.io",
        "kubernetesclusters.xyz.example.com",
        "providers.pkg.crossplane.io",
        "secrets",
    )
    for typo in ("kcc", "widgets.nowhere.io"):
        with pytest.raises(ConfigError, match=f"group a: {typo}: no resource of that name in this backup"):
            resolve_resource_options(order(typo), [KC], live)


# --- what a restore writes without being asked (restore/planning/trust.py) ---

RBAC = "rbac.authorization.k8s.io"
CRB = dataclasses.replace(
    resource_type(RBAC, "ClusterRoleBinding", namespaced=False, status=False, custom=False),
    resource="clusterrolebindings",
)
SECRET = resource_type("", "Secret", status=False, custom=False)
POD = resource_type("", "Pod", custom=False)
STORAGECLASS = dataclasses.replace(
    resource_type("storage.k8s.io", "StorageClass", namespaced=False, status=False, custom=False),
    resource="storageclasses",
)


@pytest.fixture
def smuggled(tmp_path):
    """A backup a store writer added privileged objects to, claiming (in its manifest) that they are custom."""
    claimed = [dataclasses.replace(rt, custom=True) for rt in (CRB, SECRET, POD, STORAGECLASS)]
    entries = [
        (CRDS, crd_obj(KC)),
        (KC, obj(KC, "prod", status={"a": 1})),
        (claimed[0], obj(CRB, "evil-admin")),
        (claimed[1], obj(SECRET, "creds")),
        (claimed[2], obj(POD, "hostpath")),
        (claimed[3], obj(STORAGECLASS, "fast")),
    ]
    return ArchiveReader(write_archive(tmp_path / "s.tar.gz", entries))


def test_privileged_types_and_why():
    assert "RBAC" in privileged(CRB) and "credentials" in privileged(SECRET) and "workload" in privileged(POD)
    assert "cluster-scoped built-in" in privileged(STORAGECLASS)
    assert privileged(SVC) == "" and privileged(KC) == "" and privileged(POOL) == "", "custom or harmless built-in"
    assert privileged(resource_type("", "Namespace", namespaced=False, custom=False)) == ""


def test_a_backup_alone_brings_only_custom_resources_whatever_its_manifest_claims(smuggled):
    live = live_discovery(CRDS, NAMESPACES, KC, CRB, SECRET, POD, STORAGECLASS)
    p = plan(smuggled, live=live)
    assert {i.name for i in p.items()} == {KC.qualified, "prod", "team-a"}, "the CR, its CRD and its namespace"
    assert any(
        w.startswith("left out 4 object(s) of built-in types the restore was not asked for: clusterrolebindings")
        for w in p.warnings
    ), p.warnings


@pytest.mark.parametrize("named", ["clusterrolebindings", "secrets", "pods", "storageclasses", "*"])
def test_a_named_privileged_type_is_refused_before_anything_unless_allowed(smuggled, named):
    live = live_discovery(CRDS, NAMESPACES, KC, CRB, SECRET, POD, STORAGECLASS)
    with pytest.raises(ConfigError, match="names privileged type.*add --allow-privileged-resources"):
        plan(smuggled, live=live, **resolved(smuggled, live, include_resources=(named,)))
    allowed = resolved(smuggled, live, include_resources=(named,), allow_privileged=("*",))
    p = plan(smuggled, live=live, **allowed)
    assert any(w.startswith("privileged: 1 object(s) of ") for w in p.warnings), p.warnings


def resolved(archive, live, **opts):
    """The options as the runner hands them to the planner: names resolved against the backup."""
    from statusvault.restore.planning.build import manifest_types

    selection = Selection(**{k: opts.pop(k) for k in list(opts) if k in SELECTION})
    options = resolve_resource_options(
        RestoreOptions(selection=selection, **opts), manifest_types(archive.head()), live
    )
    return {
        "include_resources": options.selection.include_resources,
        "allow_privileged": options.allow_privileged,
    }


def test_an_existing_crd_is_replaced_only_when_allowed(archive):
    exists = lambda rt, ns, name: rt.qualified == CRDS.qualified  # noqa: E731
    kept = plan(archive, exists=exists, existing_policy="update")
    assert by_name(kept)[KC.qualified].action == Action.SKIP_EXISTS
    assert any(w.startswith("kept 1 existing CRD(s) and Namespace(s) as they are") for w in kept.warnings)
    replaced = plan(archive, exists=exists, existing_policy="update", allow_privileged=(CRDS.qualified,))
    assert by_name(replaced)[KC.qualified].action == Action.UPDATE
