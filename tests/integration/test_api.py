"""The library face (docs/api.md) on the real server: its example runs as written; the verdict and errors are the
CLI's."""

from __future__ import annotations

import base64
import os
import re
from pathlib import Path

import pytest

from statusvault import api
from statusvault.errors import ConfigError, ExitStatus
from tests.builders import cr, kc_status, unique

pytestmark = pytest.mark.version_neutral("the API calls the engines the CLI calls; crs/ guards them on every version")
DOC = Path(__file__).resolve().parents[2] / "docs" / "api.md"


def example(which: int = 0) -> str:
    return re.findall(r"```python\n(.*?)```", DOC.read_text(), re.S)[which]


def test_the_documented_example_runs_as_written(kube, crds, make, namespace, cluster, tmp_path):
    for i in range(3):
        make(cr("xyz.example.com/v1", "KubernetesCluster", f"k-{i}", status=kc_status(i)), namespace)
    key_file = tmp_path / "key"
    key_file.write_text(base64.b64encode(os.urandom(32)).decode())
    target = unique("api")
    names = {"kubeconfig": str(cluster.kubeconfig), "storage": str(tmp_path / "store"), "namespace": namespace,
             "key_file": str(key_file), "target": target}  # fmt: skip

    exec(example(), names)

    kc = crds.resolve("kc")
    assert [kube.get(kc, target, f"k-{i}")["status"] for i in range(3)] == [kc_status(i) for i in range(3)]
    restored = names["restored"]
    assert restored.report.counts()["results"]["created"] == 4 and restored.verdict.outcome == "done", (
        "and its namespace"
    )


def test_the_typed_example_runs_as_written(kube, crds, make, namespace, cluster, tmp_path):
    """The requests the CLI, the controller and move run: a backup and a strict restore into a new namespace."""
    for i in range(2):
        make(cr("xyz.example.com/v1", "KubernetesCluster", f"t-{i}", status=kc_status(i)), namespace)
    target = unique("typed")
    names = {"kubeconfig": str(cluster.kubeconfig), "storage": str(tmp_path / "store"), "namespace": namespace,
             "target": target}  # fmt: skip

    exec(example(1), names)

    kc = crds.resolve("kc")
    assert [kube.get(kc, target, f"t-{i}")["status"] for i in range(2)] == [kc_status(i) for i in range(2)]
    assert names["restored"].verdict.outcome == "done" and names["restored"].report.total > names["taken"].objects >= 2


def test_the_verdict_and_errors_are_the_clis(kube, crds, make, namespace, cluster, tmp_path):
    make(cr("xyz.example.com/v1", "KubernetesCluster", "k-0", status=kc_status(0)), namespace)
    where = {"storage": str(tmp_path / "store"), "cluster": api.Cluster(str(cluster.kubeconfig))}
    assert api.backup("b", namespace=namespace, **where).objects == 2, "its CRD too: the command's default"
    dry = api.restore("b", dry_run="client", **where)
    assert dry.succeeded and dry.exit_status == ExitStatus.SUCCESS and dry.report.dry_run == "client"
    with pytest.raises(ConfigError, match="--no-status and --status-include-resources cannot be combined") as e:
        api.restore("b", no_status=True, status_include_resources="kc", **where)
    assert e.value.exit_status == ExitStatus.USAGE
    with pytest.raises(TypeError, match="unexpected option 'namespaces_typo'"):
        api.restore("b", namespaces_typo="x", **where)
    with pytest.raises(TypeError, match="does not take 'output'"):
        api.backup("c", output="json", **where)  # the API returns the result, it prints nothing
    with pytest.raises(ConfigError, match="page-size|page_size"):
        api.backup("c", page_size=0, **where)  # refused as the CLI refuses it
    assert api.backup("c", page_size=1, include_crds=False, namespace=namespace, **where).objects == 1
    assert [b.name for b in api.list_backups_in(where["storage"])] == ["b", "c"]


def test_every_restore_option_is_honoured_or_refused_as_the_cli_does(kube, crds, make, namespace, cluster, tmp_path):
    """The options the keyword call once took and dropped: modifiers patch, a verification key refuses an unsigned
    backup before anything is written, name= selects objects, fence='report' is a plan of its own, and values
    the CLI refuses are refused."""
    from statusvault.archive import signing
    from statusvault.errors import StatusVaultError
    from statusvault.restore.quiet.fencing import FencePlan

    for i in range(2):
        make(cr("xyz.example.com/v1", "KubernetesCluster", f"m-{i}", spec={"region": "eu"}, status=kc_status(i)),
             namespace)  # fmt: skip
    where = {"storage": str(tmp_path / "store"), "cluster": api.Cluster(str(cluster.kubeconfig))}
    assert api.backup("opts", namespace=namespace, include_crds=False, **where).objects == 2
    kc = crds.resolve("kc")

    pub, _ = signing.generate(tmp_path / "signing.pem")
    target = unique("unsigned")
    with pytest.raises(StatusVaultError, match="not signed|unsigned|signature") as refused:
        api.restore("opts", namespace_mapping=f"{namespace}:{target}", verify_key_file=str(pub), **where)
    assert refused.value.exit_status != 0
    assert kube.list_names(kc, target) == set(), "nothing written from a backup the caller's key did not sign"

    rules = tmp_path / "rules.yaml"
    rules.write_text(
        "version: v1\nresourceModifierRules:\n- conditions:\n    groupResource: kubernetesclusters.xyz.example.com\n"
        "  patches:\n  - operation: replace\n    path: /spec/region\n    value: us\n"
    )
    target = unique("patched")
    restored = api.restore("opts", namespace_mapping=f"{namespace}:{target}", modifiers=str(rules), name="m-1",
                           state_dir=str(tmp_path / "state"), **where)  # fmt: skip
    assert restored.succeeded, restored.verdict.findings
    assert kube.list_names(kc, target) == {"m-1"}, "name= selects the objects"
    live = kube.get(kc, target, "m-1")
    assert (live["spec"]["region"], live["status"]) == ("us", kc_status(1)), "the modifiers file patched it"

    plan = api.fence_plan("opts", namespace_mapping=f"{namespace}:{unique('plan')}", **where)
    assert isinstance(plan, FencePlan)
    with pytest.raises(TypeError, match="fence='report'"):
        api.restore("opts", fence="report", **where)
    with pytest.raises(TypeError, match="does not take 'output'"):
        api.restore("opts", output="json", **where)
    with pytest.raises(ConfigError, match="parallel"):
        api.restore("opts", parallel=0, **where)
