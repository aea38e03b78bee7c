"""Which CronJob API a schedule renders for a Kubernetes version."""

from __future__ import annotations

import pytest

from statusvault.model import Selection
from statusvault.schedule import ScheduleSpec, cronjob_api_for, render
from tests.builders import resource_type


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
