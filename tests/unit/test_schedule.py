"""Which CronJob API a schedule renders for a Kubernetes version."""

from __future__ import annotations

import pytest

from statusvault.backup.selection import select_resources
from statusvault.cli.backups import BackupArgs
from statusvault.kube.discovery import Discovery
from statusvault.model import Selection
from statusvault.schedule import ScheduleSpec, backup_args, cronjob_api_for, render
from statusvault.vocabulary.kinds import CRDS
from tests.builders import resource_type
from tests.unit.test_cli_args import parsed


@pytest.mark.parametrize(
    "version, api",
    [
        ("1.20", "batch/v1beta1"),
        ("v1.20.2", "batch/v1beta1"),
        ("1.19+", "batch/v1beta1"),
        ("1.21", "batch/v1"),
        ("v1.24.17-eks-a5df82a", "batch/v1"),
        ("1.30", "batch/v1"),
        ("v1.36.0", "batch/v1"),
        ("2.0", "batch/v1"),
        ("latest", "batch/v1"),  # unparsable: the API every current server serves
    ],
)
def test_cronjob_is_batch_v1_from_1_21(version, api):
    assert cronjob_api_for(version) == api


def test_a_schedule_renders_batch_v1_unless_told_otherwise():
    spec = ScheduleSpec("n", "@daily", Selection(), "s3://b/p")
    assert render(spec, [resource_type("xyz.example.com", "KubernetesCluster")])[-1]["apiVersion"] == "batch/v1"


@pytest.mark.parametrize(
    "selection",
    [
        Selection(namespaces=("a",), include_resources=("KubernetesCluster", "pools.infra.example.com")),
        Selection(namespaces=("a",)),
        Selection(namespaces=("a",), include_cluster_resources=True),
        Selection(include_cluster_resources=False),
        Selection(),
    ],
    ids=["n-and-a-cluster-scoped-type-named", "n", "n-and-cluster", "no-cluster", "all"],
)
def test_the_scheduled_backup_takes_exactly_the_resources_its_rbac_was_rendered_for(selection):
    """The CronJob's backup command, read back as the backup command reads it, selects the same types (it said
    --no-include-cluster-resources with -n, and so left out a cluster-scoped type named in --include-resources)."""
    kc = resource_type("xyz.example.com", "KubernetesCluster")
    pool = resource_type("infra.example.com", "Pool", namespaced=False)
    discovery = Discovery([CRDS, kc, pool], [CRDS, kc, pool])
    types = select_resources(discovery, selection)
    args = backup_args(ScheduleSpec("n", "@daily", selection, "s3://b/p"), types)
    params = parsed("backup", args[1:])
    assert select_resources(discovery, BackupArgs(**params).selection()) == types


def test_the_scheduled_backup_locks_and_wraps_as_the_schedule_says():
    kc = resource_type("xyz.example.com", "KubernetesCluster")
    spec = ScheduleSpec("n", "@daily", Selection(), "s3://b/p", kms_key_ids=("alias/backups",), lock_mode="compliance",
                        lock_for="30d", legal_hold=True)  # fmt: skip
    args = BackupArgs(**parsed("backup", backup_args(spec, [kc])[1:]))
    assert (args.kms_key_id, args.lock_mode, args.lock_for, args.legal_hold) == (
        ("alias/backups",),
        "compliance",
        "30d",
        True,
    )
