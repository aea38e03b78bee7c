"""Render the manifests of a scheduled in-cluster backup: ServiceAccount, least-privilege RBAC, CronJob."""

from __future__ import annotations

import dataclasses
import hashlib
import shlex
from pathlib import Path
from typing import Any

from statusvault import VERSION
from statusvault.errors import ConfigError
from statusvault.model import KubeObject, ResourceType, Selection
from statusvault.storage.base import S3Options
from statusvault.vocabulary.kinds import CRDS

LABELS = {"app.kubernetes.io/name": "statusvault", "app.kubernetes.io/component": "scheduled-backup"}
DEFAULT_IMAGE = f"ghcr.io/statusvault/statusvault:{VERSION}"  # the image of this release
READ_VERBS = ["get", "list"]


CRONJOB_NAME_MAX = 52  # the API server's limit: a CronJob's Jobs add an 11-character suffix within 63


def bounded_name(name: str, limit: int) -> str:
    """`name` itself when it fits in `limit` characters, else its start and a hash of the whole: still unique,
    and the same on every run."""
    if len(name) <= limit:
        return name
    digest = hashlib.sha256(name.encode()).hexdigest()[:8]
    return f"{name[: limit - len(digest) - 1].rstrip('-.')}-{digest}"


@dataclasses.dataclass(frozen=True)
class ScheduleSpec:
    name: str
    cron: str
    selection: Selection
    storage: str
    s3: S3Options = dataclasses.field(default_factory=S3Options)
    job_namespace: str = "statusvault"
    image: str = DEFAULT_IMAGE
    credentials_secret: str = ""
    keep_last: int | None = None
    ttl: str = ""
    keep_daily: int | None = None
    keep_weekly: int | None = None
    metrics_pushgateway: str = ""
    cronjob_api: str = "batch/v1"  # batch/v1beta1 before Kubernetes 1.21
    encryption_secret: str = ""  # a Secret whose "key" is the base64 encryption key
    kms_key_ids: tuple[str, ...] = ()  # KMS keys that wrap each backup's data key as well
    lock_mode: str = ""  # governance | compliance: S3 Object Lock on each backup, for lock_for from its start
    lock_for: str = ""
    legal_hold: bool = False
    account_name: str = ""  # a shared ServiceAccount (the controller's BackupSchedules); default: its own
    backup_tuning: tuple[str, ...] = ()  # more `backup` options (--page-size N, ...), after the rendered ones
    ca_pem: str = ""  # the S3 CA bundle's content: rendered as its own ConfigMap, mounted into the pod
    ca_configmap_name: str = ""  # a shared ConfigMap holding the bundle (the controller's, for its BackupSchedules)

    @property
    def account(self) -> str:
        return self.account_name or f"statusvault-{self.name}"

    @property
    def ca_configmap(self) -> str:
        """The ConfigMap whose ca.crt the pod mounts: a shared one, else its own when it carries a bundle."""
        return self.ca_configmap_name or (f"{self.cronjob_name}-s3-ca" if self.ca_pem else "")

    @property
    def cronjob_name(self) -> str:
        return bounded_name(f"statusvault-{self.name}", CRONJOB_NAME_MAX)

    @property
    def retention(self) -> bool:
        return any(v for v in (self.keep_last, self.ttl, self.keep_daily, self.keep_weekly))


def cronjob_api_for(version: str) -> str:
    """CronJob is batch/v1 from Kubernetes 1.21; older servers only serve batch/v1beta1."""
    parts = version.lstrip("v").split(".")
    try:
        major, minor = int(parts[0]), int("".join(ch for ch in parts[1] if ch.isdigit()) or 0)
    except (IndexError, ValueError):
        return "batch/v1"
    return "batch/v1" if (major, minor) >= (1, 21) else "batch/v1beta1"


def offline_types(sel: Selection) -> list[ResourceType]:
    """Resource types from `resource.group` names alone, for rendering without a cluster."""
    if not sel.include_resources:
        raise ConfigError(
            "no cluster is reachable to list the custom resources: pass --include-resources "
            "resource.group,... (or --kubeconfig)"
        )
    out = []
    for name in sel.include_resources:
        resource, _, group = name.partition(".")
        if not group or not resource.islower():
            raise ConfigError(f"without a cluster, name resources as resource.group (got {name!r})")
        out.append(ResourceType(group, "", resource, "", namespaced=bool(sel.namespaces)))
    if sel.include_crds:
        out.insert(0, CRDS)
    return out


def rules_for(types: list[ResourceType]) -> list[dict[str, Any]]:
    """get/list on exactly these resources, one rule per API group."""
    groups: dict[str, set[str]] = {}
    for rt in types:
        groups.setdefault(rt.group, set()).add(rt.resource)
    return [{"apiGroups": [g], "resources": sorted(r), "verbs": list(READ_VERBS)} for g, r in sorted(groups.items())]


def _meta(name: str, namespace: str | None = None) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name, "labels": dict(LABELS)}
    if namespace:
        meta["namespace"] = namespace
    return meta


def rbac(spec: ScheduleSpec, types: list[ResourceType]) -> list[KubeObject]:
    """Roles in each selected namespace for namespaced types; a ClusterRole only for what is cluster-wide."""
    subject = [{"kind": "ServiceAccount", "name": spec.account, "namespace": spec.job_namespace}]
    namespaced = [rt for rt in types if rt.namespaced]
    cluster_scoped = [rt for rt in types if not rt.namespaced]
    out: list[KubeObject] = []
    if spec.selection.namespaces:
        for ns in spec.selection.namespaces:
            out.append(
                {
                    "apiVersion": "rbac.authorization.k8s.io/v1",
                    "kind": "Role",
                    "metadata": _meta(spec.account, ns),
                    "rules": rules_for(namespaced),
                }
            )
            out.append(
                {
                    "apiVersion": "rbac.authorization.k8s.io/v1",
                    "kind": "RoleBinding",
                    "metadata": _meta(spec.account, ns),
                    "subjects": subject,
                    "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": spec.account},
                }
            )
        cluster_types = cluster_scoped
    else:
        cluster_types = types
    if cluster_types:
        out.append(
            {
                "apiVersion": "rbac.authorization.k8s.io/v1",
                "kind": "ClusterRole",
                "metadata": _meta(spec.account),
                "rules": rules_for(cluster_types),
            }
        )
        out.append(
            {
                "apiVersion": "rbac.authorization.k8s.io/v1",
                "kind": "ClusterRoleBinding",
                "metadata": _meta(spec.account),
                "subjects": subject,
                "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": spec.account},
            }
        )
    return out


KEY_DIR = "/etc/statusvault/encryption"
KEY_ARGS = ["--encryption-key-file", f"{KEY_DIR}/key"]


def mount_encryption_key(pod: dict[str, Any], secret: str) -> None:
    """Mount the Secret holding the encryption key (its "key" entry) read-only into the pod's container."""
    if not secret:
        return
    spec = pod["spec"]
    spec["volumes"].append({"name": "encryption-key", "secret": {"secretName": secret, "defaultMode": 0o400}})
    spec["containers"][0]["volumeMounts"].append({"name": "encryption-key", "mountPath": KEY_DIR, "readOnly": True})


CA_DIR = "/etc/statusvault/s3-ca"
CA_KEY = "ca.crt"
CA_FILE = f"{CA_DIR}/{CA_KEY}"
CONFIGMAP_MAX_BYTES = 1 << 20  # the API server's limit on a ConfigMap


def read_ca_bundle(path: str) -> str:
    """The PEM certificates of a CA bundle file, read now to be carried into the cluster as a ConfigMap (a pod has
    none of this machine's files); ConfigError names the file and what is wrong with it."""
    try:
        data = Path(path).read_bytes()
    except OSError as e:
        raise ConfigError(f"--s3-ca-bundle {path}: cannot read it ({e.strerror or e})") from e
    if len(data) > CONFIGMAP_MAX_BYTES - 1024:  # room for the ConfigMap's metadata
        raise ConfigError(f"--s3-ca-bundle {path}: {len(data)} bytes, more than a ConfigMap holds (1 MiB)")
    from cryptography import x509  # here: every command imports this module, few read a CA bundle

    try:
        pem = data.decode("ascii")
        x509.load_pem_x509_certificates(data)
    except ValueError as e:  # UnicodeDecodeError included
        raise ConfigError(f"--s3-ca-bundle {path}: not a PEM file of certificates (-----BEGIN CERTIFICATE-----)") from e
    if "PRIVATE KEY-----" in pem:
        raise ConfigError(f"--s3-ca-bundle {path}: holds a private key; a CA bundle holds certificates only")
    return pem


def ca_bundle_configmap(name: str, namespace: str, pem: str, labels: dict[str, str]) -> KubeObject:
    """The ConfigMap that carries the S3 CA bundle into the cluster, under "ca.crt"."""
    meta = {"name": name, "namespace": namespace, "labels": dict(labels)}
    return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": meta, "data": {CA_KEY: pem}}


def mount_ca_bundle(pod: dict[str, Any], configmap: str) -> None:
    """Mount the ConfigMap holding the S3 CA bundle (its "ca.crt") read-only into the pod's container, at CA_FILE."""
    if not configmap:
        return
    spec = pod["spec"]
    items = [{"key": CA_KEY, "path": CA_KEY}]
    spec["volumes"].append({"name": "s3-ca", "configMap": {"name": configmap, "items": items}})
    spec["containers"][0]["volumeMounts"].append({"name": "s3-ca", "mountPath": CA_DIR, "readOnly": True})


def storage_args(storage: str, s3: S3Options, ca_configmap: str = "") -> list[str]:
    """The store's options for a pod: the CA bundle is the one mounted from `ca_configmap` (mount_ca_bundle), never
    a path of the machine that rendered them; a profile is not carried."""
    args = ["--storage", storage]
    for flag, value in (
        ("--s3-endpoint-url", s3.endpoint_url),
        ("--s3-region", s3.region),
        ("--s3-ca-bundle", CA_FILE if ca_configmap else None),
        ("--s3-sse", s3.sse),
        ("--s3-kms-key-id", s3.kms_key_id),
    ):
        if value:
            args += [flag, value]
    if s3.addressing_style != "auto":
        args += ["--s3-addressing-style", s3.addressing_style]
    if s3.checksum != "when_supported":
        args += ["--s3-checksum", s3.checksum]
    if s3.insecure_skip_tls_verify:
        args.append("--s3-insecure-skip-tls-verify")
    return args


def backup_args(spec: ScheduleSpec, types: list[ResourceType]) -> list[str]:
    """The backup takes exactly the resources the RBAC was rendered for: a CRD added later is not silently
    backed up without permission (re-render to add it)."""
    sel = spec.selection
    args = ["backup", "--schedule", spec.name, *storage_args(spec.storage, spec.s3, spec.ca_configmap)]
    for ns in sel.namespaces:
        args += ["-n", ns]
    names = [rt.qualified for rt in types if not rt.is_crd]
    if names:
        args += ["--include-resources", ",".join(names)]
    if sel.label_selector:
        args += ["-l", sel.label_selector]
    if sel.names:
        args += ["--name", ",".join(sel.names)]
    if spec.encryption_secret:
        args += KEY_ARGS
    for kms in spec.kms_key_ids:
        args += ["--kms-key-id", kms]
    if spec.lock_mode:
        args += ["--lock-mode", spec.lock_mode, "--lock-for", spec.lock_for]
    if spec.legal_hold:
        args.append("--legal-hold")
    args.append("--include-crds" if sel.include_crds else "--no-include-crds")
    if sel.include_cluster_resources is not None:  # else the default, which takes a cluster-scoped type named above
        args.append(
            "--include-cluster-resources" if sel.include_cluster_resources else "--no-include-cluster-resources"
        )
    if spec.metrics_pushgateway:
        args += ["--metrics-pushgateway", spec.metrics_pushgateway]
    return [*args, *spec.backup_tuning]


def prune_args(spec: ScheduleSpec) -> list[str]:
    args = ["prune", "--schedule", spec.name, *storage_args(spec.storage, spec.s3, spec.ca_configmap)]
    for flag, value in (
        ("--keep-last", spec.keep_last),
        ("--ttl", spec.ttl),
        ("--keep-daily", spec.keep_daily),
        ("--keep-weekly", spec.keep_weekly),
    ):
        if value:
            args += [flag, str(value)]
    if spec.metrics_pushgateway:
        args += ["--metrics-pushgateway", spec.metrics_pushgateway]
    return args


def command(spec: ScheduleSpec, types: list[ResourceType]) -> list[str]:
    """The container command: back up, then (when retention is set) prune."""
    run = "statusvault --log-format json " + shlex.join(backup_args(spec, types))
    if spec.retention:
        run += " && statusvault --log-format json " + shlex.join(prune_args(spec))
    return ["/bin/sh", "-c", run]


def secure_container(name: str, image: str, command: list[str], credentials_secret: str) -> dict[str, Any]:
    """Non-root, read-only root filesystem, no capabilities; /tmp is the writable emptyDir."""
    container: dict[str, Any] = {
        "name": name,
        "image": image,
        "imagePullPolicy": "IfNotPresent",
        "command": command,
        "env": [{"name": "HOME", "value": "/tmp"}, {"name": "TMPDIR", "value": "/tmp"}],
        "resources": {"requests": {"cpu": "100m", "memory": "128Mi"}, "limits": {"cpu": "1", "memory": "512Mi"}},
        "securityContext": {
            "readOnlyRootFilesystem": True,
            "allowPrivilegeEscalation": False,
            "runAsNonRoot": True,
            "capabilities": {"drop": ["ALL"]},
        },
        "volumeMounts": [{"name": "tmp", "mountPath": "/tmp"}],
    }
    if credentials_secret:
        container["envFrom"] = [{"secretRef": {"name": credentials_secret}}]
    return container


SA_DIR = "/var/run/secrets/kubernetes.io/serviceaccount"  # where in-cluster clients look
TOKEN_SECONDS = 3600  # the kubelet rewrites the token before it expires; statusvault re-reads the file


def service_account_volume() -> dict[str, Any]:
    """A bound ServiceAccount token (TokenRequest), the cluster CA and the namespace: what the kubelet mounts by
    itself from Kubernetes 1.22, made explicit for every version. No token Secret, which 1.24+ no longer creates."""
    namespace = {"path": "namespace", "fieldRef": {"apiVersion": "v1", "fieldPath": "metadata.namespace"}}
    return {
        "name": "kube-api-access",
        "projected": {
            "sources": [
                {"serviceAccountToken": {"path": "token", "expirationSeconds": TOKEN_SECONDS}},
                {"configMap": {"name": "kube-root-ca.crt", "items": [{"key": "ca.crt", "path": "ca.crt"}]}},
                {"downwardAPI": {"items": [namespace]}},
            ]
        },
    }


def secure_pod(
    account: str, container: dict[str, Any], restart_policy: str, labels: dict[str, str] | None = None
) -> dict[str, Any]:
    """Pod Security Standard "restricted"; the API token is the projected one of service_account_volume."""
    container["volumeMounts"].append({"name": "kube-api-access", "mountPath": SA_DIR, "readOnly": True})
    return {
        "metadata": {"labels": dict(labels or LABELS)},
        "spec": {
            "serviceAccountName": account,
            "automountServiceAccountToken": False,
            "restartPolicy": restart_policy,
            "securityContext": {
                "runAsNonRoot": True,
                "runAsUser": 65532,
                "runAsGroup": 65532,
                "fsGroup": 65532,
                "seccompProfile": {"type": "RuntimeDefault"},
            },
            "containers": [container],
            "volumes": [{"name": "tmp", "emptyDir": {"sizeLimit": "2Gi"}}, service_account_volume()],
        },
    }


def cronjob(spec: ScheduleSpec, types: list[ResourceType]) -> KubeObject:
    container = secure_container("backup", spec.image, command(spec, types), spec.credentials_secret)
    pod = secure_pod(spec.account, container, "Never")
    mount_encryption_key(pod, spec.encryption_secret)
    mount_ca_bundle(pod, spec.ca_configmap)
    return {
        "apiVersion": spec.cronjob_api,
        "kind": "CronJob",
        "metadata": _meta(spec.cronjob_name, spec.job_namespace),
        "spec": {
            "schedule": spec.cron,
            "concurrencyPolicy": "Forbid",
            "startingDeadlineSeconds": 600,
            "successfulJobsHistoryLimit": 3,
            "failedJobsHistoryLimit": 3,
            "jobTemplate": {
                "metadata": {"labels": dict(LABELS)},
                "spec": {"backoffLimit": 1, "activeDeadlineSeconds": 6 * 3600, "template": pod},
            },
        },
    }


def render(spec: ScheduleSpec, types: list[ResourceType]) -> list[KubeObject]:
    """Every manifest of the schedule, in apply order."""
    own_ca = [ca_bundle_configmap(spec.ca_configmap, spec.job_namespace, spec.ca_pem, LABELS)] if spec.ca_pem else []
    return [
        {"apiVersion": "v1", "kind": "Namespace", "metadata": _meta(spec.job_namespace)},
        {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": _meta(spec.account, spec.job_namespace)},
        *own_ca,
        *rbac(spec, types),
        cronjob(spec, types),
    ]
