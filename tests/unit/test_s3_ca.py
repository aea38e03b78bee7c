"""The S3 CA bundle of each command that renders in-cluster manifests (`schedule render`, `controller install|render`
and the CronJobs the controller renders, `watch render`) is carried into the cluster as a ConfigMap mounted into every
pod that talks to S3; --s3-profile, a file of this machine, is refused."""

from __future__ import annotations

import shlex
from pathlib import Path
from typing import Any

import pytest

from statusvault.cli.main import main
from statusvault.controller import install as controller
from statusvault.controller.backups import LockLimits
from statusvault.controller.schedules import JobSettings, parse_schedule
from statusvault.errors import ConfigError, ExitStatus
from statusvault.model import KubeObject, Selection
from statusvault.schedule import CA_FILE, ScheduleSpec, cronjob, read_ca_bundle
from statusvault.schedule import render as render_schedule
from statusvault.storage.base import S3Options
from statusvault.watch import install as watch
from tests.builders import resource_type
from tests.faultproxy import self_signed

KC = resource_type("xyz.example.com", "KubernetesCluster")
VOLUME = {"name": "s3-ca", "configMap": {"name": "", "items": [{"key": "ca.crt", "path": "ca.crt"}]}}
MOUNT = {"name": "s3-ca", "mountPath": "/etc/statusvault/s3-ca", "readOnly": True}


@pytest.fixture
def pem(tmp_path: Path) -> str:
    return self_signed(tmp_path)[0].read_text()


def by_kind(manifests: list[KubeObject], kind: str) -> list[KubeObject]:
    return [m for m in manifests if m["kind"] == kind]


def pod_of(workload: KubeObject) -> dict[str, Any]:
    spec = workload["spec"]
    return dict(spec["jobTemplate"]["spec"]["template"] if workload["kind"] == "CronJob" else spec["template"])


def assert_mounts(workload: KubeObject, configmap: str) -> None:
    """The pod mounts `configmap` read-only where its arguments point --s3-ca-bundle, and names no other bundle."""
    pod = pod_of(workload)["spec"]
    container = pod["containers"][0]
    assert [v for v in pod["volumes"] if v["name"] == "s3-ca"] == [
        {**VOLUME, "configMap": {**VOLUME["configMap"], "name": configmap}}
    ]
    assert [m for m in container["volumeMounts"] if m["name"] == "s3-ca"] == [MOUNT]
    words = shlex.split(container["command"][-1]) if workload["kind"] == "CronJob" else container["command"]
    bundles = [words[i + 1] for i, w in enumerate(words) if w == "--s3-ca-bundle"]
    runs = 2 if workload["kind"] == "CronJob" else 1  # a CronJob backs up, then prunes
    assert bundles == [CA_FILE] * runs


# --- the rendered objects ---


def test_a_schedule_carries_its_bundle_in_its_own_configmap(pem):
    spec = ScheduleSpec("nightly", "@daily", Selection(), "s3://b/p", job_namespace="backups", keep_last=3,
                        s3=S3Options(ca_bundle="/home/me/ca.pem"), ca_pem=pem)  # fmt: skip
    manifests = render_schedule(spec, [KC])
    (configmap,) = by_kind(manifests, "ConfigMap")
    assert configmap["metadata"]["name"] == "statusvault-nightly-s3-ca"
    assert configmap["metadata"]["namespace"] == "backups"
    assert configmap["data"] == {"ca.crt": pem}
    assert manifests.index(configmap) < manifests.index(by_kind(manifests, "CronJob")[0]), "applied before its pods"
    assert_mounts(by_kind(manifests, "CronJob")[0], "statusvault-nightly-s3-ca")
    assert "/home/me/ca.pem" not in str(manifests)


def test_without_a_bundle_nothing_is_mounted_and_no_local_path_is_rendered():
    spec = ScheduleSpec("nightly", "@daily", Selection(), "s3://b/p", s3=S3Options(ca_bundle="/home/me/ca.pem"))
    manifests = render_schedule(spec, [KC])
    assert by_kind(manifests, "ConfigMap") == []
    assert "s3-ca" not in str(manifests) and "--s3-ca-bundle" not in str(manifests)


def test_the_controller_carries_its_bundle_and_passes_it_on_to_its_cronjobs(pem):
    spec = controller.ControllerSpec("sv", "s3://b/p", S3Options(ca_bundle="/home/me/ca.pem"), ca_pem=pem)
    manifests = controller.render(spec, [KC], [])
    (configmap,) = by_kind(manifests, "ConfigMap")
    assert (configmap["metadata"]["name"], configmap["metadata"]["namespace"]) == ("statusvault-s3-ca", "sv")
    assert configmap["data"] == {"ca.crt": pem}
    (deployment,) = by_kind(manifests, "Deployment")
    assert_mounts(deployment, "statusvault-s3-ca")
    args = deployment["spec"]["template"]["spec"]["containers"][0]["command"]
    assert args[args.index("--s3-ca-configmap") + 1] == "statusvault-s3-ca"
    (role,) = by_kind(manifests, "Role")
    assert role["rules"] == controller.own_namespace_rules(), "the kubelet mounts it: no new right"


def test_the_controllers_cronjobs_mount_its_configmap_and_make_none():
    job = JobSettings(storage="s3://b/p", s3=S3Options(ca_bundle=CA_FILE), ca_configmap="statusvault-s3-ca")
    obj = {"metadata": {"name": "nightly"}, "spec": {"schedule": "@daily", "keep-last": 2}}
    spec = parse_schedule(obj, "sv", job, "batch/v1", LockLimits())
    assert spec.ca_pem == ""
    assert_mounts(cronjob(spec, [KC]), "statusvault-s3-ca")


def test_a_controller_with_a_bundle_file_and_no_configmap_stalls_its_schedules():
    job = JobSettings(storage="s3://b/p", s3=S3Options(ca_bundle="/etc/ssl/ca.pem"))
    with pytest.raises(ConfigError, match="give it --s3-ca-configmap"):
        parse_schedule({"metadata": {"name": "n"}, "spec": {"schedule": "@daily"}}, "sv", job, "batch/v1", LockLimits())


def test_a_watch_carries_its_bundle_in_its_own_configmap(pem):
    schedule = ScheduleSpec("orders", "", Selection(), "s3://b/p", job_namespace="backups", ca_pem=pem)
    manifests = watch.render(watch.WatchSpec(schedule), [KC])
    (configmap,) = by_kind(manifests, "ConfigMap")
    assert (configmap["metadata"]["name"], configmap["data"]) == ("statusvault-orders-s3-ca", {"ca.crt": pem})
    assert_mounts(by_kind(manifests, "Deployment")[0], "statusvault-orders-s3-ca")


# --- reading the bundle ---


def test_a_bundle_is_read_as_it_is(tmp_path, pem):
    path = tmp_path / "bundle.pem"
    path.write_text(f"# my CA\n{pem}{pem}")
    assert read_ca_bundle(str(path)) == f"# my CA\n{pem}{pem}"


@pytest.mark.parametrize(
    ("content", "error"),
    [
        (None, "cannot read it (No such file or directory)"),
        (b"", "not a PEM file of certificates"),
        (b"endpoint: https://minio\n", "not a PEM file of certificates"),
        (b"\xff\xfe-----BEGIN CERTIFICATE-----", "not a PEM file of certificates"),
        ("key", "holds a private key; a CA bundle holds certificates only"),
        ("huge", "more than a ConfigMap holds (1 MiB)"),
    ],
    ids=["missing", "empty", "not-pem", "not-text", "private-key", "too-big"],
)
def test_a_bundle_that_cannot_be_carried_is_refused_naming_the_file(tmp_path, pem, content, error):
    path = tmp_path / "bundle.pem"
    if content == "key":
        content = (tmp_path / "proxy.key").read_bytes() + pem.encode()
    elif content == "huge":
        content = pem.encode() * (2**20 // len(pem) + 1)
    if content is not None:
        path.write_bytes(content)
    with pytest.raises(ConfigError) as refused:
        read_ca_bundle(str(path))
    message = str(refused.value)
    assert message.startswith(f"--s3-ca-bundle {path}: ") and error in message


# --- the commands: refused before anything is read from or applied to a cluster ---

RENDERS = {
    "schedule render": ("schedule", "render", "n", "--schedule", "@daily", "--include-resources", "kc.x.example.com"),
    "controller render": ("controller", "render"),
    "controller install": ("controller", "install"),
    "watch render": ("watch", "render", "n"),
}
WHAT = {"schedule render": "a scheduled backup", "watch render": "an in-cluster watch"}


@pytest.fixture
def cli(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("KUBECONFIG", str(tmp_path / "missing-kubeconfig"))
    for name in ("AWS_PROFILE", "STATUSVAULT_S3_PROFILE", "STATUSVAULT_S3_CA_BUNDLE"):
        monkeypatch.delenv(name, raising=False)

    def run(*args: str) -> tuple[int, str, str]:
        capsys.readouterr()
        code = main(list(args))
        out, err = capsys.readouterr()
        return code, out, err

    return run


@pytest.mark.parametrize("command", RENDERS)
def test_a_profile_is_refused_by_every_rendering_command(cli, command):
    code, out, err = cli(*RENDERS[command], "--storage", "s3://b/p", "--s3-profile", "dev")
    what = WHAT.get(command, "an in-cluster controller")
    assert (code, out) == (ExitStatus.USAGE, "")
    assert err == (
        f"error: {what} cannot use --s3-profile: a profile is a file on this machine; in a cluster, credentials come "
        "from --credentials-secret or the pod's identity\n"
    )


@pytest.mark.parametrize("command", RENDERS)
def test_a_profile_only_in_the_environment_stays_on_this_machine(cli, monkeypatch, command):
    """$AWS_PROFILE is often set for kubectl's own credentials: it is not a request to carry a profile."""
    monkeypatch.setenv("AWS_PROFILE", "dev")
    _, _, err = cli(*RENDERS[command], "--storage", "s3://b/p")
    assert "--s3-profile" not in err


@pytest.mark.parametrize("command", RENDERS)
def test_an_unreadable_bundle_is_refused_by_every_rendering_command(cli, tmp_path, command):
    code, out, err = cli(*RENDERS[command], "--storage", "s3://b/p", "--s3-ca-bundle", str(tmp_path / "ca.pem"))
    assert (code, out) == (ExitStatus.USAGE, "")
    assert (
        err.splitlines()[-1]
        == f"error: --s3-ca-bundle {tmp_path / 'ca.pem'}: cannot read it (No such file or directory)"
    )


def test_schedule_render_prints_the_configmap_and_the_mount(cli, tmp_path, pem):
    (tmp_path / "ca.pem").write_text(pem)
    code, out, err = cli(
        *RENDERS["schedule render"], "--storage", "s3://b/p", "--s3-ca-bundle", str(tmp_path / "ca.pem")
    )
    assert code == 0, err
    assert "name: statusvault-n-s3-ca" in out and f"--s3-ca-bundle {CA_FILE}" in out
    assert str(tmp_path) not in out
