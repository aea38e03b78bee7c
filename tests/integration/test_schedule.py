"""Scheduled backups: rendered manifests on the real API server, least privilege, retention, metrics."""

from __future__ import annotations

import http.server
import json
import threading
from pathlib import Path

import orjson
import pytest
import yaml

from statusvault.errors import ExitStatus, KubeApiError
from statusvault.kube.client import KubeClient
from statusvault.kube.transport import Request, load_transport
from statusvault.model import ResourceType
from statusvault.testing.cluster import kubeconfig_yaml
from statusvault.testing.fixtures import ensure_namespace
from statusvault.vocabulary.kinds import NAMESPACES
from tests.builders import cr, kc_status, unique
from tests.faultproxy import self_signed
from tests.unit.test_pod_security import pod_templates, restricted_violations

pytestmark = pytest.mark.version_sensitive("the CronJob it renders is batch/v1beta1 on 1.20 and batch/v1 from 1.21")

KC = "xyz.example.com/v1"
CRONJOB_API = {"1.20": "batch/v1beta1", "1.36": "batch/v1"}  # batch/v1 from 1.21, batch/v1beta1 until 1.24


def render(run, name, *args):
    result = run("schedule", "render", name, "--schedule", "0 2 * * *", "--storage", "s3://bkt/sv", *args)
    assert result.code == 0, result.err
    return list(yaml.safe_load_all(result.out))


def test_render_targets_the_served_cronjob_version_and_is_least_privilege(run, crds, namespace, kube_version):
    docs = render(run, "nightly", "-n", namespace, "--keep-last", "7", "--credentials-secret", "s3")
    kinds = [d["kind"] for d in docs]
    assert kinds == ["Namespace", "ServiceAccount", "Role", "RoleBinding", "CronJob"], "nothing cluster-wide"
    cron = docs[-1]
    assert cron["apiVersion"] == CRONJOB_API[kube_version], "the served version (1.20 serves only batch/v1beta1)"
    spec = cron["spec"]
    assert (spec["concurrencyPolicy"], spec["startingDeadlineSeconds"]) == ("Forbid", 600)
    pod = spec["jobTemplate"]["spec"]["template"]["spec"]
    container = pod["containers"][0]
    assert pod["securityContext"]["runAsNonRoot"] is True
    assert container["securityContext"]["readOnlyRootFilesystem"] is True
    assert restricted_violations(spec["jobTemplate"]["spec"]["template"]) == []
    assert container["envFrom"] == [{"secretRef": {"name": "s3"}}]
    assert "statusvault --log-format json backup --schedule nightly --storage s3://bkt/sv" in container["command"][2]
    assert "&& statusvault --log-format json prune --schedule nightly" in container["command"][2]
    role = docs[2]
    assert all(r["verbs"] == ["get", "list"] for r in role["rules"])
    assert {"apiGroups": ["xyz.example.com"], "resources": ["kubernetesclusters"], "verbs": ["get", "list"]} in role[
        "rules"
    ]
    assert not any("customresourcedefinitions" in r["resources"] for r in role["rules"])


def test_render_without_a_cluster_defaults_to_batch_v1(run, tmp_path):
    (tmp_path / "none.yaml").write_text(kubeconfig_yaml("https://127.0.0.1:1", "x", "y"))
    result = run(
        "schedule",
        "render",
        "n",
        "--schedule",
        "@daily",
        "--storage",
        "s3://b",
        "--include-resources",
        "kubernetesclusters.xyz.example.com",
        kubeconfig=tmp_path / "none.yaml",
    )
    assert result.code == 0, result.err
    docs = list(yaml.safe_load_all(result.out))
    assert docs[-1]["apiVersion"] == "batch/v1"
    assert [d["kind"] for d in docs][2:4] == ["ClusterRole", "ClusterRoleBinding"]
    overridden = run(
        "schedule",
        "render",
        "n",
        "--schedule",
        "@daily",
        "--storage",
        "s3://b",
        "--kube-version",
        "1.20",
        "--include-resources",
        "kubernetesclusters.xyz.example.com",
        kubeconfig=tmp_path / "none.yaml",
    )
    assert list(yaml.safe_load_all(overridden.out))[-1]["apiVersion"] == "batch/v1beta1"


RENDER_COMMANDS = {
    "schedule": ("schedule", "render", "nightly", "--schedule", "0 2 * * *", "--namespace-of-job"),
    "controller": ("controller", "render", "--namespace"),
    "watch": ("watch", "render", "nightly", "--namespace-of-watch"),
}
SECRETS = ("--credentials-secret", "s3", "--encryption-key-secret", "backup-key")
CA_BUNDLE = ("--s3-ca-bundle", "<ca.pem>")  # a throwaway self-signed certificate's file


@pytest.mark.parametrize("options", [(), SECRETS, (*SECRETS, *CA_BUNDLE)], ids=["plain", "secrets", "ca-bundle"])
@pytest.mark.parametrize("command", RENDER_COMMANDS)
def test_each_render_command_makes_a_restricted_pod_the_server_accepts(run, kube, crds, command, options, tmp_path):
    """Pod Security "restricted" and a projected token (no token Secret): valid for Kubernetes 1.30+ too. A CA
    bundle comes with its ConfigMap, which the pod mounts."""
    job_ns = unique("sv")
    ensure_namespace(kube, job_ns)  # a server dry run cannot create the namespace its other objects go into
    options = tuple(str(self_signed(tmp_path)[0]) if o == CA_BUNDLE[1] else o for o in options)
    args = (*RENDER_COMMANDS[command], job_ns, "--storage", "s3://b/p", "--include-resources", "kc", *options)
    try:
        rendered = run(*args)
        assert rendered.code == 0, rendered.err
        docs = list(yaml.safe_load_all(rendered.out))
        pods = [pod for doc in docs for pod in pod_templates(doc)]
        assert len(pods) == 1 and restricted_violations(pods[0]) == []
        configmaps = [d["metadata"]["name"] for d in docs if d["kind"] == "ConfigMap"]
        mounted = [v["configMap"]["name"] for v in pods[0]["spec"]["volumes"] if v["name"] == "s3-ca"]
        assert mounted == configmaps, "the pod mounts the ConfigMap rendered with it"
        assert len(configmaps) == (1 if CA_BUNDLE[0] in options else 0)
        dry = run(*args, "--apply", "--dry-run", "server")
        assert dry.code == 0, dry.err
        assert [line for line in dry.out.splitlines() if line.startswith("configmap/")] == [
            f"configmap/{name} applied (server dry run)" for name in configmaps
        ]
    finally:
        kube.delete(NAMESPACES, None, job_ns)


def test_render_refuses_local_storage(run):
    result = run("schedule", "render", "n", "--schedule", "@daily", "--storage", "/tmp/x")
    assert result.code == ExitStatus.USAGE
    assert "needs --storage s3://" in result.err


def _service_account_kubeconfig(
    kube: KubeClient, cluster, ns: str, account: str, tmp_path: Path, server: str = ""
) -> Path:
    """A kubeconfig holding a bound token of the ServiceAccount, from the TokenRequest API (Kubernetes 1.24+
    writes no token Secrets; the test cluster's token controller is off, as there); `server`: another URL (a
    proxy's) than the cluster's."""
    sa_type = ResourceType("", "v1", "serviceaccounts", "ServiceAccount", True)
    request = {"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest", "spec": {"expirationSeconds": 3600}}
    answer = kube.request_json(Request("POST", sa_type.path(ns, account, "token"), body=orjson.dumps(request)))
    path = tmp_path / f"kubeconfig-{account}"
    path.write_text(kubeconfig_yaml(server or cluster.server, account, answer["status"]["token"]))
    return path


@pytest.mark.parametrize("scope", ["namespaced", "cluster"])
def test_backup_runs_with_the_rendered_permissions_and_nothing_more(
    run, kube, cluster, crds, make, namespace, tmp_path, scope
):
    make(cr(KC, "KubernetesCluster", "k1", status=kc_status(1)), namespace)
    job_ns = unique("sv")
    name = unique("s")
    args = ["--namespace-of-job", job_ns] + (["-n", namespace] if scope == "namespaced" else [])
    ensure_namespace(kube, job_ns)  # a dry run cannot create the namespace its other objects go into
    dry = run(
        "schedule",
        "render",
        name,
        "--schedule",
        "0 2 * * *",
        "--storage",
        "s3://b/p",
        *args,
        "--apply",
        "--dry-run",
        "server",
    )
    assert dry.code == 0, dry.err  # every manifest passes a server-side dry run
    assert dry.out.splitlines()[-1] == f"cronjob/statusvault-{name} applied (server dry run)"
    sa_type = crds.resolve("serviceaccounts")
    assert kube.get(sa_type, job_ns, f"statusvault-{name}") is None, "a server dry run persists nothing"
    applied = run("schedule", "render", name, "--schedule", "0 2 * * *", "--storage", "s3://b/p", *args, "--apply")
    assert applied.code == 0, applied.err
    try:
        kubeconfig = _service_account_kubeconfig(kube, cluster, job_ns, f"statusvault-{name}", tmp_path)
        backup = run(
            "backup",
            "--schedule",
            name,
            "-n",
            namespace,
            *(["--no-include-crds"] if scope == "namespaced" else []),
            "-o",
            "json",
            kubeconfig=kubeconfig,
        )
        assert backup.code == 0, backup.err
        assert json.loads(backup.out)["resources"]["kubernetesclusters.xyz.example.com"]["count"] == 1

        as_sa = KubeClient(load_transport(str(kubeconfig)))
        kc = crds.resolve("kc")
        writes = [
            lambda: as_sa.create(kc, namespace, cr(KC, "KubernetesCluster", "evil")),
            lambda: as_sa.replace(kc, namespace, "k1", {**kube.get(kc, namespace, "k1"), "status": {}}, sub="status"),
            lambda: as_sa.delete(kc, namespace, "k1"),
            lambda: as_sa.create(
                NAMESPACES, None, {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": unique("evil")}}
            ),
        ]
        for write in writes:
            with pytest.raises(KubeApiError) as err:
                write()
            assert err.value.code == 403
        assert kube.get(kc, namespace, "k1")["status"] == kc_status(1)
    finally:
        kube.delete(NAMESPACES, None, job_ns)


def _fake_backup(
    store: Path, name: str, created: str, schedule: str, complete: bool = True, stale: bool = False
) -> None:
    d = store / "backups" / name
    d.mkdir(parents=True)
    (d / "archive.tar.gz").write_bytes(b"x")
    if stale:  # an interrupted run of long ago: only its archive, last written then
        import datetime as dt
        import os

        when = dt.datetime(2026, 1, 1, 3, tzinfo=dt.UTC).timestamp()
        os.utime(d / "archive.tar.gz", (when, when))
    if complete:
        (d / "manifest.json").write_text(
            json.dumps(
                {
                    "formatVersion": "1.0",
                    "name": name,
                    "createdAt": created,
                    "schedule": schedule,
                    "totals": {"objects": 1},
                    "resources": {},
                }
            )
        )


def test_prune_keeps_exactly_what_the_policy_says(run):
    store = run.storage
    for day in range(1, 9):
        _fake_backup(store, f"nightly-2026010{day}020000", f"2026-01-0{day}T02:00:00Z", "nightly")
    _fake_backup(store, "other-20260101020000", "2026-01-01T02:00:00Z", "other")
    _fake_backup(store, "nightly-20260101030000", "", "nightly", complete=False, stale=True)
    _fake_backup(store, "nightly-recent", "", "nightly", complete=False)  # may still be running: kept
    dry = run("prune", "--schedule", "nightly", "--keep-last", "3", "--dry-run", "-o", "json")
    assert dry.code == 0, dry.err
    doomed = sorted(d["name"] for d in json.loads(dry.out)["decisions"] if d["delete"])
    assert doomed == [
        "nightly-20260101020000",
        "nightly-20260101030000",
        "nightly-20260102020000",
        "nightly-20260103020000",
        "nightly-20260104020000",
        "nightly-20260105020000",
    ]
    assert len(list((store / "backups").iterdir())) == 11, "a dry run deletes nothing"
    assert run("prune", "--schedule", "nightly", "--keep-last", "3").code == 0
    assert sorted(p.name for p in (store / "backups").iterdir()) == [
        "nightly-20260106020000",
        "nightly-20260107020000",
        "nightly-20260108020000",
        "nightly-recent",
        "other-20260101020000",
    ]


class _Gateway(http.server.BaseHTTPRequestHandler):
    received: list[tuple[str, str, str]] = []

    def _record(self):
        body = self.rfile.read(int(self.headers.get("Content-Length") or 0)).decode()
        self.received.append((self.command, self.path, body))
        self.send_response(200)
        self.end_headers()

    do_POST = do_PUT = _record

    def log_message(self, *args):
        pass


@pytest.fixture
def pushgateway():
    _Gateway.received = []
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Gateway)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_address[1]}", _Gateway.received
    server.shutdown()


def test_backup_metrics_textfile_and_push(run, make, namespace, tmp_path, pushgateway):
    url, received = pushgateway
    make(cr(KC, "KubernetesCluster", "k1", status=kc_status(1)), namespace)
    textfile = tmp_path / "metrics" / "statusvault.prom"
    ok = run(
        "backup",
        "--schedule",
        "nightly",
        "-n",
        namespace,
        "--metrics-textfile",
        str(textfile),
        "--metrics-pushgateway",
        url,
    )
    assert ok.code == 0, ok.err
    text = textfile.read_text()
    for series in (
        "statusvault_backup_success",
        "statusvault_backup_duration_seconds",
        "statusvault_backup_objects",
        "statusvault_backup_bytes",
        "statusvault_backup_errors",
        "statusvault_backup_last_success_timestamp_seconds",
    ):
        assert f'{series}{{schedule="nightly"}}' in text
    assert 'statusvault_backup_success{schedule="nightly"} 1.0' in text
    method, path, body = received[-1]
    assert method == "POST", "add semantics: other series in the group survive"
    assert path == "/metrics/job/statusvault/operation/backup/schedule/nightly"
    assert "statusvault_backup_last_success_timestamp_seconds" in body

    failed = run(
        "backup",
        "--schedule",
        "nightly",
        "-n",
        "no-such-ns-zz",
        "--metrics-textfile",
        str(textfile),
        "--metrics-pushgateway",
        url,
    )
    assert failed.code != 0
    text = textfile.read_text()
    assert 'statusvault_backup_success{schedule="nightly"} 0.0' in text
    assert "statusvault_backup_last_failure_timestamp_seconds" in text
    assert "statusvault_backup_last_success_timestamp_seconds" in text, "a failure keeps the last success"
    method, _, body = received[-1]
    assert method == "POST"
    assert "last_success_timestamp" not in body, "the push must not overwrite the last success"
