"""The golden v1 backups (fixtures/golden/v1) restore on the real API server, statuses exact."""

from __future__ import annotations

import shutil

import pytest

from statusvault.vocabulary.kinds import NAMESPACES
from tests.builders import kc_status
from tests.golden import NAMESPACE, V1
from tests.integration.crs.test_restore import delete_namespace

pytestmark = pytest.mark.version_sensitive(
    "golden backups must restore exactly on every server users run, oldest and newest"
)


@pytest.mark.parametrize("folder", ["plain", "encrypted"])
def test_the_golden_backup_restores(run, kube, crds, core_api, folder):
    shutil.copytree(V1 / folder, run.storage / "backups" / f"golden-{folder}")
    key = ["--encryption-key-file", str(V1 / "test.key")] if folder == "encrypted" else []
    # The backup holds its Namespace: a server without the core API cannot take it, so it is left out there.
    key += [] if core_api else ["--exclude-resources", "namespaces"]
    pools = crds.resolve("clusterpools")
    assert not core_api or kube.get(NAMESPACES, None, NAMESPACE) is None
    try:
        result = run("restore", f"golden-{folder}", *key)
        assert result.code == 0, result.err
        for i, name in enumerate(("prod", "dev")):
            restored = kube.get(crds.resolve("kc"), NAMESPACE, name)
            assert restored["status"] == kc_status(i + 1) and restored["spec"]["region"].endswith("-1")
        assert kube.get(pools, None, "golden-pool")["status"] == {"allocated": 5, "phase": "Ready"}
    finally:
        kube.delete(pools, None, "golden-pool")
        if not core_api or kube.get(NAMESPACES, None, NAMESPACE) is not None:
            delete_namespace(kube, NAMESPACE)
