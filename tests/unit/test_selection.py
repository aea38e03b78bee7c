from __future__ import annotations

import pytest

from statusvault.backup.selection import select_resources
from statusvault.errors import ConfigError
from statusvault.kube.discovery import Discovery, parse_resource_list
from statusvault.model import Selection
from statusvault.vocabulary.kinds import CRDS
from tests.builders import resource_type

KC = resource_type("xyz.example.com", "KubernetesCluster")
POOL = resource_type("infra.example.com", "Pool", namespaced=False)
CM = resource_type("", "ConfigMap", custom=False, status=False)
D = Discovery([CRDS, KC, POOL, CM], [CRDS, KC, POOL, CM])


def names(sel):
    return [rt.qualified for rt in select_resources(D, sel)]


@pytest.mark.parametrize(
    ("sel", "expected"),
    [
        (
            Selection(),
            [
                "customresourcedefinitions.apiextensions.k8s.io",
                "pools.infra.example.com",
                "kubernetesclusters.xyz.example.com",
            ],
        ),
        (
            Selection(namespaces=("a",)),
            ["customresourcedefinitions.apiextensions.k8s.io", "kubernetesclusters.xyz.example.com"],
        ),
        (
            Selection(namespaces=("a",), include_cluster_resources=True),
            [
                "customresourcedefinitions.apiextensions.k8s.io",
                "pools.infra.example.com",
                "kubernetesclusters.xyz.example.com",
            ],
        ),
        (Selection(include_crds=False), ["pools.infra.example.com", "kubernetesclusters.xyz.example.com"]),
        (Selection(include_resources=("configmaps",)), ["configmaps"]),
        (
            Selection(include_resources=("KubernetesCluster", "configmaps"), include_crds=False),
            ["configmaps", "kubernetesclusters.xyz.example.com"],
        ),
        (
            Selection(exclude_resources=("pools.infra.example.com",), include_crds=False),
            ["kubernetesclusters.xyz.example.com"],
        ),
        (
            Selection(namespaces=("a",), include_resources=("pools.infra.example.com",), include_crds=False),
            ["pools.infra.example.com"],
        ),
        (
            Selection(include_resources=("customresourcedefinitions.apiextensions.k8s.io",)),
            ["customresourcedefinitions.apiextensions.k8s.io"],
        ),
    ],
)
def test_select_resources(sel, expected):
    assert names(sel) == expected


def test_unknown_and_ambiguous_names():
    with pytest.raises(ConfigError, match="unknown resource 'widgets'"):
        names(Selection(include_resources=("widgets",)))
    other = resource_type("other.io", "Pool", namespaced=False)
    d = Discovery([POOL, other], [POOL, other])
    with pytest.raises(ConfigError, match="ambiguous: pools.infra.example.com, pools.other.io"):
        d.resolve("pools")
    assert d.resolve("pools.other.io") is other


def test_parse_resource_list_marks_status_subresources():
    body = {
        "resources": [
            {"name": "widgets", "kind": "Widget", "namespaced": True, "verbs": ["list"], "shortNames": ["wd"]},
            {"name": "widgets/status", "kind": "Widget", "namespaced": True},
            {"name": "gadgets", "kind": "Gadget", "namespaced": False, "verbs": ["list"]},
        ]
    }
    rts = parse_resource_list("example.com", "v1", body, frozenset({("example.com", "widgets")}))
    assert [(r.resource, r.has_status, r.custom, r.namespaced) for r in rts] == [
        ("widgets", True, True, True),
        ("gadgets", False, False, False),
    ]
    assert rts[0].short_names == ("wd",)
