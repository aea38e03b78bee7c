"""Every pod that `schedule render`, `controller render` and `watch render` produce meets the Pod Security
Standard "restricted" of Kubernetes 1.30 (baseline included), checked by a small implementation of its rules."""

from __future__ import annotations

import copy
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from statusvault.controller import install as controller
from statusvault.model import Selection
from statusvault.schedule import SA_DIR, ScheduleSpec
from statusvault.schedule import render as render_schedule
from statusvault.storage.base import S3Options
from statusvault.watch import install as watch
from tests.builders import resource_type

Pod = dict[str, Any]

CONTAINER_LISTS = ("initContainers", "containers", "ephemeralContainers")
RESTRICTED_VOLUMES = {"configMap", "csi", "downwardAPI", "emptyDir", "ephemeral", "persistentVolumeClaim"}
RESTRICTED_VOLUMES |= {"projected", "secret"}
SAFE_SYSCTLS = {
    "kernel.shm_rmid_forced",
    "net.ipv4.ip_local_port_range",
    "net.ipv4.ip_unprivileged_port_start",
    "net.ipv4.tcp_syncookies",
    "net.ipv4.ping_group_range",
    "net.ipv4.ip_local_reserved_ports",  # 1.27
    "net.ipv4.tcp_keepalive_time",  # 1.29, and the three below
    "net.ipv4.tcp_fin_timeout",
    "net.ipv4.tcp_keepalive_intvl",
    "net.ipv4.tcp_keepalive_probes",
}
SELINUX_TYPES = {"", "container_t", "container_init_t", "container_kvm_t"}  # container_engine_t only from 1.31
CONFINED = {"RuntimeDefault", "Localhost"}  # seccomp and AppArmor profile types
APPARMOR_ANNOTATION = "container.apparmor.security.beta.kubernetes.io/"


def restricted_violations(template: Pod) -> list[str]:
    """The rules of "restricted" this pod (template) breaks, one line each naming the field; [] when it passes."""
    spec = template["spec"]
    containers = [c for key in CONTAINER_LISTS for c in spec.get(key) or []]
    annotations = (template.get("metadata") or {}).get("annotations") or {}
    return [
        *_host_access(spec, containers),
        *_volumes(spec),
        *_contexts(spec, containers),
        *_containers(containers),
        *_pod_or_every_container(spec, containers),
        *_apparmor_annotations(annotations),
    ]


def _host_access(spec: Pod, containers: list[Pod]) -> Iterator[str]:
    for field in ("hostNetwork", "hostPID", "hostIPC"):
        if spec.get(field):
            yield f"spec.{field} is true"
    for c in containers:
        if any(p.get("hostPort") for p in c.get("ports") or []):
            yield f"container {c['name']}: hostPort"


def _volumes(spec: Pod) -> Iterator[str]:
    for v in spec.get("volumes") or []:
        kinds = set(v) - {"name"}
        if not kinds <= RESTRICTED_VOLUMES:
            yield f"volume {v['name']}: type {', '.join(sorted(kinds - RESTRICTED_VOLUMES))} is not allowed"


def _contexts(spec: Pod, containers: list[Pod]) -> Iterator[str]:
    """Rules that hold for the pod's securityContext and for each container's alike."""
    pod_sc = spec.get("securityContext") or {}
    for sc in pod_sc.get("sysctls") or []:
        if sc["name"] not in SAFE_SYSCTLS:
            yield f"pod: sysctl {sc['name']} is not safe"
    for where, sc in [
        ("pod", pod_sc),
        *((f"container {c['name']}", c.get("securityContext") or {}) for c in containers),
    ]:
        if (sc.get("windowsOptions") or {}).get("hostProcess"):
            yield f"{where}: windowsOptions.hostProcess"
        if sc.get("runAsUser") == 0:
            yield f"{where}: runAsUser 0"
        for field in ("seccompProfile", "appArmorProfile"):
            kind = (sc.get(field) or {}).get("type")
            if kind is not None and kind not in CONFINED:
                yield f"{where}: {field}.type {kind}"
        selinux = sc.get("seLinuxOptions") or {}
        if selinux.get("type", "") not in SELINUX_TYPES or selinux.get("user") or selinux.get("role"):
            yield f"{where}: seLinuxOptions {selinux}"


def _containers(containers: list[Pod]) -> Iterator[str]:
    for c in containers:
        where, sc = f"container {c['name']}", c.get("securityContext") or {}
        if sc.get("privileged"):
            yield f"{where}: privileged"
        if sc.get("allowPrivilegeEscalation") is not False:
            yield f"{where}: allowPrivilegeEscalation is not false"
        if sc.get("procMount", "Default") != "Default":
            yield f"{where}: procMount {sc['procMount']}"
        caps = sc.get("capabilities") or {}
        if "ALL" not in (caps.get("drop") or []):
            yield f"{where}: capabilities.drop lacks ALL"
        if set(caps.get("add") or []) - {"NET_BIND_SERVICE"}:
            yield f"{where}: capabilities.add {caps['add']}"


def _pod_or_every_container(spec: Pod, containers: list[Pod]) -> Iterator[str]:
    """runAsNonRoot true and a confined seccomp profile: at pod level, or in every container."""
    pod_sc = spec.get("securityContext") or {}
    contexts = [c.get("securityContext") or {} for c in containers]
    if pod_sc.get("runAsNonRoot") is False or any(sc.get("runAsNonRoot") is False for sc in contexts):
        yield "runAsNonRoot is false"
    elif pod_sc.get("runAsNonRoot") is not True and not all(sc.get("runAsNonRoot") for sc in contexts):
        yield "runAsNonRoot is not true in the pod or in every container"
    if (pod_sc.get("seccompProfile") or {}).get("type") not in CONFINED and not all(
        (sc.get("seccompProfile") or {}).get("type") in CONFINED for sc in contexts
    ):
        yield "seccompProfile is not RuntimeDefault or Localhost in the pod or in every container"


def _apparmor_annotations(annotations: dict[str, str]) -> Iterator[str]:
    for key, value in annotations.items():
        if key.startswith(APPARMOR_ANNOTATION) and value != "runtime/default" and not value.startswith("localhost/"):
            yield f"annotation {key}: {value}"


def pod_templates(manifest: dict[str, Any]) -> list[Pod]:
    """The pods a manifest makes: a Pod itself, a workload's template, a CronJob's job template's."""
    spec = manifest.get("spec") or {}
    if manifest["kind"] == "Pod":
        return [manifest]
    if manifest["kind"] == "CronJob":
        return [spec["jobTemplate"]["spec"]["template"]]
    return [spec["template"]] if "template" in spec else []


KC = resource_type("xyz.example.com", "KubernetesCluster")
# what a pod mounts: the Secrets, and the CA bundle's ConfigMap
MOUNTED = {"credentials_secret": "s3", "encryption_secret": "backup-key", "ca_pem": "-----BEGIN CERTIFICATE-----"}
S3 = S3Options(endpoint_url="https://minio:9000", region="eu-1", ca_bundle="/etc/ca.pem", sse="AES256")


def _schedule(cron: str = "0 2 * * *", selection: Selection | None = None, **kw: Any) -> ScheduleSpec:
    return ScheduleSpec("nightly", cron, selection or Selection(), "s3://b/p", **kw)


RENDERS: dict[str, Callable[[], list[dict[str, Any]]]] = {
    "schedule": lambda: render_schedule(_schedule(), [KC]),
    "schedule-namespaced-secrets-retention": lambda: render_schedule(
        _schedule(selection=Selection(namespaces=("prod",)), s3=S3, keep_last=7, ttl="30d", **MOUNTED), [KC]
    ),
    "schedule-batch-v1beta1-pushgateway": lambda: render_schedule(
        _schedule(cronjob_api="batch/v1beta1", metrics_pushgateway="http://pgw:9091"), [KC]
    ),
    "controller": lambda: controller.render(controller.ControllerSpec("sv", "s3://b/p"), [KC], []),
    "controller-secrets-replicas": lambda: controller.render(
        controller.ControllerSpec("sv", "s3://b/p", S3, replicas=3, **MOUNTED), [KC], []
    ),
    "watch": lambda: watch.render(watch.WatchSpec(_schedule(cron="")), [KC]),
    "watch-namespaced-secrets": lambda: watch.render(
        watch.WatchSpec(_schedule(cron="", selection=Selection(namespaces=("prod",)), s3=S3, **MOUNTED), 3), [KC]
    ),
}


def rendered_pods(case: str) -> list[Pod]:
    return [pod for m in RENDERS[case]() for pod in pod_templates(m)]


@pytest.mark.parametrize("case", RENDERS)
def test_every_rendered_pod_is_restricted(case):
    pods = rendered_pods(case)
    assert len(pods) == 1, "each render makes one workload"
    assert restricted_violations(pods[0]) == []


@pytest.mark.parametrize("case", RENDERS)
def test_every_rendered_pod_authenticates_with_a_bound_token_not_a_secret(case):
    """The token is a projected TokenRequest one (Kubernetes 1.24+ writes no token Secrets), where in-cluster
    clients read it, with the CA and namespace beside it."""
    spec = rendered_pods(case)[0]["spec"]
    assert spec["automountServiceAccountToken"] is False, "no legacy automount: the projected volume below"
    (volume,) = [v for v in spec["volumes"] if "projected" in v]
    sources = volume["projected"]["sources"]
    assert sources[0]["serviceAccountToken"]["path"] == "token"
    assert sources[0]["serviceAccountToken"]["expirationSeconds"] >= 600, "the API server's minimum"
    assert sources[1]["configMap"] == {"name": "kube-root-ca.crt", "items": [{"key": "ca.crt", "path": "ca.crt"}]}
    assert sources[2]["downwardAPI"]["items"][0]["path"] == "namespace"
    mounts = [m for m in spec["containers"][0]["volumeMounts"] if m["name"] == volume["name"]]
    assert mounts == [{"name": volume["name"], "mountPath": SA_DIR, "readOnly": True}]


def _set(path: str, value: Any) -> Callable[[Pod], None]:
    """A change to the pod template at a dotted path ("spec.containers.0.securityContext.privileged")."""

    def change(pod: Pod) -> None:
        *parents, last = path.split(".")
        node: Any = pod
        for key in parents:
            node = node[int(key)] if isinstance(node, list) else node.setdefault(key, {})
        at: Any = int(last) if isinstance(node, list) else last
        if value is None:
            del node[at]
        else:
            node[at] = value

    return change


def _both(*changes: Callable[[Pod], None]) -> Callable[[Pod], None]:
    def change(pod: Pod) -> None:
        for each in changes:
            each(pod)

    return change


POD_SC, CONTAINER_SC = "spec.securityContext", "spec.containers.0.securityContext"
ROOT_INIT = {"name": "init", "image": "busybox", "securityContext": {"runAsUser": 0}}
VIOLATIONS = {
    "seccompProfile removed": (_set(f"{POD_SC}.seccompProfile", None), "seccompProfile is not RuntimeDefault"),
    "seccomp Unconfined in a container": (
        _set(f"{CONTAINER_SC}.seccompProfile", {"type": "Unconfined"}),
        "container backup: seccompProfile.type Unconfined",
    ),
    "privileged": (_set(f"{CONTAINER_SC}.privileged", True), "container backup: privileged"),
    "hostNetwork": (_set("spec.hostNetwork", True), "spec.hostNetwork is true"),
    "hostPID": (_set("spec.hostPID", True), "spec.hostPID is true"),
    "hostIPC": (_set("spec.hostIPC", True), "spec.hostIPC is true"),
    "hostPort": (_set("spec.containers.0.ports", [{"containerPort": 80, "hostPort": 80}]), "hostPort"),
    "hostPath volume": (_set("spec.volumes.0", {"name": "tmp", "hostPath": {"path": "/"}}), "type hostPath"),
    "nfs volume": (_set("spec.volumes.0", {"name": "tmp", "nfs": {"server": "n", "path": "/"}}), "type nfs"),
    "allowPrivilegeEscalation unset": (
        _set(f"{CONTAINER_SC}.allowPrivilegeEscalation", None),
        "allowPrivilegeEscalation is not false",
    ),
    "runAsNonRoot false in a container": (_set(f"{CONTAINER_SC}.runAsNonRoot", False), "runAsNonRoot is false"),
    "runAsNonRoot nowhere": (
        _both(_set(f"{POD_SC}.runAsNonRoot", None), _set(f"{CONTAINER_SC}.runAsNonRoot", None)),
        "runAsNonRoot is not true",
    ),
    "runAsUser 0": (_set(f"{CONTAINER_SC}.runAsUser", 0), "container backup: runAsUser 0"),
    "capabilities not dropped": (_set(f"{CONTAINER_SC}.capabilities.drop", []), "lacks ALL"),
    "capability added": (_set(f"{CONTAINER_SC}.capabilities.add", ["SYS_ADMIN"]), "capabilities.add"),
    "procMount Unmasked": (_set(f"{CONTAINER_SC}.procMount", "Unmasked"), "procMount Unmasked"),
    "unsafe sysctl": (_set(f"{POD_SC}.sysctls", [{"name": "kernel.msgmax", "value": "1"}]), "kernel.msgmax"),
    "AppArmor Unconfined": (_set(f"{POD_SC}.appArmorProfile", {"type": "Unconfined"}), "appArmorProfile"),
    "AppArmor annotation": (
        _set("metadata.annotations", {f"{APPARMOR_ANNOTATION}backup": "unconfined"}),
        "annotation container.apparmor",
    ),
    "SELinux type": (_set(f"{POD_SC}.seLinuxOptions", {"type": "spc_t"}), "seLinuxOptions"),
    "SELinux user": (_set(f"{CONTAINER_SC}.seLinuxOptions", {"user": "system_u"}), "seLinuxOptions"),
    "hostProcess": (_set(f"{POD_SC}.windowsOptions", {"hostProcess": True}), "hostProcess"),
    "a root init container": (_set("spec.initContainers", [ROOT_INIT]), "container init: runAsUser 0"),
}


@pytest.mark.parametrize("change, expected", VIOLATIONS.values(), ids=VIOLATIONS)
def test_the_checker_catches_each_violation(change, expected):
    pod = copy.deepcopy(rendered_pods("schedule")[0])
    change(pod)
    violations = restricted_violations(pod)
    assert any(expected in v for v in violations), violations


ALLOWED = {
    "NET_BIND_SERVICE added": _set(f"{CONTAINER_SC}.capabilities.add", ["NET_BIND_SERVICE"]),
    "Localhost seccomp": _set(f"{POD_SC}.seccompProfile", {"type": "Localhost", "localhostProfile": "sv.json"}),
    "seccomp in every container": _both(
        _set(f"{POD_SC}.seccompProfile", None), _set(f"{CONTAINER_SC}.seccompProfile", {"type": "RuntimeDefault"})
    ),
    "runAsNonRoot in every container": _set(f"{POD_SC}.runAsNonRoot", None),
    "safe sysctl": _set(f"{POD_SC}.sysctls", [{"name": "net.ipv4.ip_unprivileged_port_start", "value": "0"}]),
    "SELinux level": _set(f"{POD_SC}.seLinuxOptions", {"type": "container_t", "level": "s0:c1,c2"}),
}


@pytest.mark.parametrize("change", ALLOWED.values(), ids=ALLOWED)
def test_the_checker_allows_what_restricted_allows(change):
    pod = copy.deepcopy(rendered_pods("schedule")[0])
    change(pod)
    assert restricted_violations(pod) == []
