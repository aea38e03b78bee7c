"""The Helm chart (charts/statusvault/) with helm v3 (statusvault/testing/helm.py) on the real server: it lints, it
renders what `statusvault controller render` renders for the same options (object by object), it installs, upgrades
and uninstalls, and the controller's ServiceAccount it installs may do a Restore and a Backup and no more."""

from __future__ import annotations

import copy
import os
import shlex
import subprocess
import time
from pathlib import Path
from typing import Any

import pytest
import yaml

from statusvault.errors import KubeApiError
from statusvault.kube.client import KubeClient
from statusvault.kube.discovery import discover
from statusvault.kube.transport import load_transport
from statusvault.model import ResourceType
from statusvault.testing.helm import ensure_helm
from statusvault.vocabulary.kinds import CLUSTER_ROLES, DEPLOYMENTS, SECRETS
from tests.builders import cr, kc_status, unique
from tests.faultproxy import self_signed
from tests.integration.crs.servers import delete_namespace
from tests.integration.crs.test_restore import KC
from tests.integration.test_restore_resource import wait_for
from tests.integration.test_schedule import _service_account_kubeconfig

pytestmark = pytest.mark.current_only(
    "a chart is installed on the Kubernetes users run now: what it renders does not differ by server version"
)

CHART = Path(__file__).resolve().parents[2] / "charts" / "statusvault"
STORAGE = "s3://b/p"
KC_TYPE = "kubernetesclusters.xyz.example.com"
HELM_LABELS = ("helm.sh/chart", "app.kubernetes.io/managed-by", "app.kubernetes.io/instance",
               "app.kubernetes.io/version")  # fmt: skip
SERVICE_ACCOUNTS = ResourceType("", "v1", "serviceaccounts", "ServiceAccount", namespaced=True)
# What `controller render` reads from the environment: a session fixture (moto's) may have set some of them.
STORAGE_ENV = (
    "STATUSVAULT_STORAGE", "STATUSVAULT_S3_ENDPOINT_URL", "AWS_ENDPOINT_URL", "STATUSVAULT_S3_REGION", "AWS_REGION",
    "AWS_DEFAULT_REGION", "STATUSVAULT_S3_ADDRESSING_STYLE", "STATUSVAULT_S3_CA_BUNDLE",
    "STATUSVAULT_S3_INSECURE_SKIP_TLS_VERIFY", "STATUSVAULT_S3_SSE", "STATUSVAULT_S3_KMS_KEY_ID",
    "STATUSVAULT_S3_CHECKSUM",
)  # fmt: skip


class Helm:
    """The helm binary with a home of its own (no user's repositories or plugins); a failure names the command and
    shows helm's stderr."""

    def __init__(self, home: Path) -> None:
        self.binary = ensure_helm()
        self.env = {
            "PATH": os.environ["PATH"],
            "HOME": str(home),
            **{f"HELM_{d}_HOME": str(home / d.lower()) for d in ("CACHE", "CONFIG", "DATA")},
        }

    def _run(self, args: tuple[str, ...]) -> subprocess.CompletedProcess[str]:
        command = [str(self.binary), *args]
        return subprocess.run(command, env=self.env, capture_output=True, text=True, timeout=300, check=False)

    def __call__(self, *args: str) -> str:
        done = self._run(args)
        if done.returncode != 0:
            pytest.fail(f"helm {shlex.join(args)} exited {done.returncode}:\n{done.stderr}", pytrace=False)
        return done.stdout

    def fails(self, *args: str) -> str:
        """helm's stderr, for a command that must fail."""
        done = self._run(args)
        assert done.returncode != 0, f"helm {shlex.join(args)} succeeded:\n{done.stdout}"
        return done.stderr


@pytest.fixture
def helm(tmp_path: Path) -> Helm:
    return Helm(tmp_path / "helm-home")


def values_file(tmp_path: Path, values: dict[str, Any]) -> str:
    path = tmp_path / f"values-{unique('v')}.yaml"
    path.write_text(yaml.safe_dump(values))
    return str(path)


def by_identity(manifests: str) -> dict[tuple[str, str, str], dict[str, Any]]:
    """Each object under (kind, namespace, name), Helm's standard labels removed: what both sides must agree on."""
    out: dict[tuple[str, str, str], dict[str, Any]] = {}
    for doc in yaml.safe_load_all(manifests):
        if not doc:
            continue
        obj = copy.deepcopy(doc)
        labels = obj["metadata"].get("labels") or {}
        for label in HELM_LABELS:
            labels.pop(label, None)
        key = (obj["kind"], obj["metadata"].get("namespace", ""), obj["metadata"]["name"])
        assert key not in out, f"{key} is rendered twice"
        out[key] = obj
    return out


# --- lint ---


def test_the_chart_lints_strictly(helm):
    """As shipped (helm lint reports a `required` value as information, not an error) and with values."""
    for strict in ((), ("--strict",)):
        helm("lint", *strict, str(CHART))
        helm("lint", *strict, str(CHART), "--set", f"storage={STORAGE}", "--set", "schedules[0].name=nightly",
             "--set", "schedules[0].schedule=0 2 * * *")  # fmt: skip


def test_the_chart_refuses_a_missing_or_local_storage(helm):
    assert "storage is required: s3://bucket/prefix" in helm.fails("template", "sv", str(CHART))
    refused = helm.fails("template", "sv", str(CHART), "--set", "storage=/var/backups")
    assert "storage" in refused and "s3://" in refused, refused


# --- no drift from `controller render` ---

BASE_VALUES: dict[str, Any] = {"storage": STORAGE, "restoreTypes": [KC_TYPE]}
BASE_ARGS = ("--storage", STORAGE, "--include-resources", "kc")
CA = "<ca.pem>"  # a throwaway CA certificate: its file for `controller render`, its PEM content for the chart
S3 = {
    "endpointUrl": "https://minio.example.com:9000",
    "region": "eu-west-1",
    "addressingStyle": "path",
    "caBundle": CA,
    "insecureSkipTlsVerify": True,
    "sse": "aws:kms",
    "kmsKeyId": "alias/backups",
    "checksum": "when_required",
}
S3_ARGS = (
    "--s3-endpoint-url", S3["endpointUrl"], "--s3-region", S3["region"], "--s3-addressing-style", "path",
    "--s3-ca-bundle", S3["caBundle"], "--s3-insecure-skip-tls-verify", "--s3-sse", "aws:kms",
    "--s3-kms-key-id", S3["kmsKeyId"], "--s3-checksum", "when_required",
)  # fmt: skip
CASES = {
    "default": ({}, ()),
    "lockdown": ({"requireServiceAccount": True}, ("--require-service-account",)),
    "lock-limits": (
        {"lockModes": ["governance", "compliance"], "maxLockFor": "90d"},
        ("--lock-modes", "governance,compliance", "--max-lock-for", "90d"),
    ),
    "no-lock-mode": ({"lockModes": []}, ("--lock-modes", "none")),
    "secrets-and-s3": (
        {"credentialsSecret": "s3-creds", "encryptionKeySecret": "backup-key", "s3": S3},
        ("--credentials-secret", "s3-creds", "--encryption-key-secret", "backup-key", *S3_ARGS),
    ),
    "replicas-interval-image": (
        {"replicas": 3, "interval": 2.5, "image": {"repository": "registry.example.com/sv", "tag": "1.2.3"}},
        ("--replicas", "3", "--interval", "2.5", "--image", "registry.example.com/sv:1.2.3"),
    ),
    "several-types": (
        {"restoreTypes": [KC_TYPE, "widgets.example.com", "configmaps"]},
        ("--include-resources", f"{KC_TYPE},widgets.example.com,configmaps"),
    ),
}


def with_ca(values: dict[str, Any], args: tuple[str, ...], cert: Path) -> tuple[dict[str, Any], tuple[str, ...]]:
    """The case with CA's placeholder replaced: the certificate's content in the values, its file in the args."""
    s3 = {k: cert.read_text() if v == CA else v for k, v in values.get("s3", {}).items()}
    return ({**values, "s3": s3} if s3 else values), tuple(str(cert) if a == CA else a for a in args)


@pytest.mark.parametrize(("values", "args"), list(CASES.values()), ids=list(CASES))
def test_the_chart_renders_what_controller_render_renders(run, crds, helm, tmp_path, monkeypatch, values, args):
    for name in STORAGE_ENV:
        monkeypatch.delenv(name, raising=False)
    values, args = with_ca(values, args, self_signed(tmp_path)[0])
    ns = unique("helmr")
    rendered = run("controller", "render", "-n", ns, *BASE_ARGS, *args)
    assert rendered.code == 0, rendered.err
    want = by_identity(rendered.out)
    chart_values = values_file(tmp_path, {**BASE_VALUES, **values})
    chart = by_identity(helm("template", "sv", str(CHART), "-n", ns, "--include-crds", "-f", chart_values))
    # The release's namespace is Helm's (helm install --create-namespace): it keeps the release in it before it
    # creates the chart's objects, so the chart cannot make it.
    want.pop(("Namespace", "", ns))
    assert sorted(set(want) - set(chart)) == [], "only `controller render` renders these"
    assert sorted(set(chart) - set(want)) == [], "only the chart renders these"
    for key, obj in want.items():
        assert chart[key] == obj, f"{key} differs"


def test_the_chart_refuses_a_path_as_the_ca_bundle(helm):
    """s3.caBundle was a path inside the container: now the content, carried into the cluster as a ConfigMap."""
    refused = helm.fails(
        "template", "sv", str(CHART), "--set", f"storage={STORAGE}", "--set", "s3.caBundle=/etc/ca.pem"
    )
    assert "s3.caBundle is the CA bundle's PEM content (--set-file s3.caBundle=ca.pem), not a path" in refused


def test_the_chart_only_values_land_where_they_belong(helm, tmp_path):
    """What `controller render` has no option for: schedules become BackupSchedules; the pod's placement,
    annotations and resources go to the controller's pod."""
    values = {
        **BASE_VALUES,
        "schedules": [{"name": "nightly", "schedule": "0 2 * * *", "keep-last": 7, "namespace": ["team-a"]}],
        "nodeSelector": {"kubernetes.io/os": "linux"},
        "tolerations": [{"key": "dedicated", "operator": "Exists", "effect": "NoSchedule"}],
        "affinity": {"nodeAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": []}},
        "podAnnotations": {"example.com/team": "platform"},
        "resources": {"requests": {"cpu": "50m", "memory": "64Mi"}, "limits": None},  # null: no default limits
    }
    objs = by_identity(helm("template", "sv", str(CHART), "-n", "sv", "-f", values_file(tmp_path, values)))
    schedule = objs[("BackupSchedule", "sv", "nightly")]
    assert schedule["spec"] == {"schedule": "0 2 * * *", "keep-last": 7, "namespace": ["team-a"]}
    pod = objs[("Deployment", "sv", "statusvault-controller")]["spec"]["template"]
    assert pod["metadata"]["annotations"] == values["podAnnotations"]
    for key in ("nodeSelector", "tolerations", "affinity"):
        assert pod["spec"][key] == values[key]
    assert pod["spec"]["containers"][0]["resources"] == {"requests": {"cpu": "50m", "memory": "64Mi"}}


# --- install, upgrade, uninstall on the real server ---


def wait_gone(kube: KubeClient, rt: ResourceType, ns: str | None, name: str) -> None:
    deadline = time.monotonic() + 60
    while kube.get(rt, ns, name) is not None:
        assert time.monotonic() < deadline, f"{rt.kind} {ns or ''}/{name} is still there"
        time.sleep(0.2)


def test_install_upgrade_and_uninstall(run, kube, crds, cluster, helm, tmp_path, monkeypatch):
    """Installed with no restoreTypes, the ClusterRoles name what the cluster serves (Helm's lookup of CRDs), as
    `controller render` discovers it; an upgrade to lockdown takes the controller's ClusterRole away."""
    for name in STORAGE_ENV:
        monkeypatch.delenv(name, raising=False)
    ns, release = unique("helmi"), "sv"
    on_cluster = ("--kubeconfig", str(cluster.kubeconfig), "-n", ns)
    schedules = {"schedules": [{"name": "nightly", "schedule": "0 2 * * *"}]}
    helm("install", release, str(CHART), *on_cluster, "--create-namespace", "--set", f"storage={STORAGE}",
         "-f", values_file(tmp_path, schedules))  # fmt: skip
    try:
        rendered = run("controller", "render", "-n", ns, "--storage", STORAGE)
        assert rendered.code == 0, rendered.err
        want = by_identity(rendered.out)
        want.pop(("Namespace", "", ns))
        installed = by_identity(helm("get", "manifest", release, *on_cluster))
        templates = {k for k in want if k[0] != "CustomResourceDefinition"}  # crds/ are not the release's manifest
        assert set(installed) == templates | {("BackupSchedule", ns, "nightly")}
        served = discover(kube)
        for (kind, obj_ns, name), obj in installed.items():
            group = obj["apiVersion"].rpartition("/")[0]
            rt = served.resolve(f"{kind.lower()}.{group}" if group else kind)
            assert kube.get(rt, obj_ns or None, name) is not None, f"{kind} {obj_ns}/{name} was not installed"
        for name in (f"statusvault-controller-{ns}", f"statusvault-backup-{ns}"):
            live = kube.get(CLUSTER_ROLES, None, name)
            assert live is not None, f"ClusterRole {name} was not installed"
            assert live["rules"] == want[("ClusterRole", "", name)]["rules"], f"{name}: Helm's lookup != discovery"
            assert any("kubernetesclusters" in rule["resources"] for rule in live["rules"]), "a served CRD is in"
        schedules_rt = served.resolve("backupschedules.statusvault.dev")
        assert kube.get(schedules_rt, ns, "nightly")["spec"]["schedule"] == "0 2 * * *"

        helm("upgrade", release, str(CHART), *on_cluster, "--reuse-values", "--set", "replicas=2",
             "--set", "requireServiceAccount=true")  # fmt: skip
        deployment = kube.get(DEPLOYMENTS, ns, "statusvault-controller")
        assert deployment["spec"]["replicas"] == 2
        assert "--require-service-account" in deployment["spec"]["template"]["spec"]["containers"][0]["command"]
        wait_gone(kube, CLUSTER_ROLES, None, f"statusvault-controller-{ns}")
        assert kube.get(CLUSTER_ROLES, None, f"statusvault-backup-{ns}") is not None, "the CronJobs' account stays"
    finally:
        helm("uninstall", release, *on_cluster, "--wait")
    wait_gone(kube, DEPLOYMENTS, ns, "statusvault-controller")
    wait_gone(kube, SERVICE_ACCOUNTS, ns, "statusvault-controller")
    wait_gone(kube, CLUSTER_ROLES, None, f"statusvault-backup-{ns}")
    assert discover(kube).by_qualified("restores.statusvault.dev") is not None, "Helm never deletes crds/"
    delete_namespace(kube, ns)


# --- the installed ServiceAccount's rights are enough, and no more ---


def test_the_installed_controller_account_restores_and_backs_up_and_may_not_grant_itself_more(
    run, kube, crds, make, namespace, cluster, helm, tmp_path
):
    make(cr(KC, "KubernetesCluster", "prod", status=kc_status(3)), namespace)
    assert run("backup", "nightly", "-n", namespace, "--include-resources", "kc").code == 0
    delete_namespace(kube, namespace)
    ns, release = unique("helmc"), "sv"
    on_cluster = ("--kubeconfig", str(cluster.kubeconfig), "-n", ns)
    values = {**BASE_VALUES, "schedules": [{"name": "hourly", "schedule": "0 * * * *", "namespace": [namespace]}]}
    helm("install", release, str(CHART), *on_cluster, "--create-namespace", "-f", values_file(tmp_path, values))
    try:
        served = discover(kube)
        restores, backups = (served.by_qualified(f"{r}.statusvault.dev") for r in ("restores", "backups"))
        kube.create(restores, ns, {"apiVersion": "statusvault.dev/v1alpha1", "kind": "Restore",
                                   "metadata": {"name": "back"}, "spec": {"backup": "nightly"}})  # fmt: skip
        kube.create(backups, ns, {"apiVersion": "statusvault.dev/v1alpha1", "kind": "Backup",
                                  "metadata": {"name": "after"},
                                  "spec": {"namespace": [namespace], "include-resources": [KC_TYPE]}})  # fmt: skip
        as_sa = _service_account_kubeconfig(kube, cluster, ns, "statusvault-controller", tmp_path)

        result = run("controller", "run", "-n", ns, "--once", kubeconfig=as_sa)

        assert result.code == 0, result.err
        restored = wait_for(restores, kube, ns, "back")["status"]
        assert (restored["phase"], restored["failed"], restored["withoutStatus"]) == ("Complete", 0, 0), restored
        assert kube.get(crds.resolve("kc"), namespace, "prod")["status"] == kc_status(3)
        backed_up = wait_for(backups, kube, ns, "after")["status"]
        counts = (backed_up["phase"], backed_up["objects"], backed_up["withStatus"])
        assert counts == ("Complete", 2, 1), f"the KubernetesCluster and its CRD: {backed_up}"
        schedule = wait_for(served.by_qualified("backupschedules.statusvault.dev"), kube, ns, "hourly")["status"]
        assert schedule["cronJob"] == "statusvault-hourly"

        as_controller = KubeClient(load_transport(str(as_sa)))
        role = {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole", "metadata": {"name": ns},
                "rules": [{"apiGroups": ["*"], "resources": ["*"], "verbs": ["*"]}]}  # fmt: skip
        for refused in (
            lambda: as_controller.create(CLUSTER_ROLES, None, role),
            lambda: as_controller.list_names(SECRETS, ns),
        ):
            with pytest.raises(KubeApiError) as forbidden:
                refused()
            assert forbidden.value.code == 403, forbidden.value
    finally:
        helm("uninstall", release, *on_cluster, "--wait")
        delete_namespace(kube, ns)
