"""Cluster API's real controllers for the tests: the core manager, the kubeadm bootstrap and control plane providers
(sigs.k8s.io/cluster-api v1.13.6) and the dev infrastructure provider with its in-memory backend (CAPD, from
sigs.k8s.io/cluster-api/test v1.13.7, which builds against core v1.13.6: core v1.13.7 is not on the proxy), built
from the Go module proxy once per machine and run as local processes against a test control plane.

Running outside a cluster takes:
- the webhooks served, not dropped: each manager serves its admission webhooks on a loopback port with one
  self-signed certificate, and the release's webhook configurations point at them by URL (without the defaulting
  webhooks a MachineDeployment lacks its selector);
- the labels the release's kustomize overlays put on CRDs: the contract versions on provider CRDs (the core manager
  follows references by them) and clusterctl's label;
- leader election off, the health and diagnostics endpoints on free loopback ports;
- POD_IP=127.0.0.1 for CAPD, whose in-memory workload API servers listen there. CAPD also binds :19000 and ports
  from 20000 (fixed in the release), so one runs per machine at a time: `ClusterAPI.start` holds a file lock.

A move needs Cluster API in two management clusters at once, with every provider's webhooks reachable in both
(`clusterctl move` and statusvault's create and delete objects on both sides). The one CAPD is the source's: the
target's `ClusterAPI.start(..., infrastructure_from=source)` runs the other three managers and points its CAPD
webhook configurations at the source's CAPD (admission webhooks only check what they are sent). Once the move is
done, `take_infrastructure()` hands CAPD over: the source's stops, the target's starts and serves its webhooks.
The in-memory provider rebuilds its simulated machines from its objects, as a real provider finds its machines in
the cloud that both management clusters share; the target's other managers then start again, so that none keeps a
connection to the simulated workload clusters of the stopped process (`_reconnect`).

Each manager runs as its own ServiceAccount (a TokenRequest token), with its release's ClusterRole
(config/rbac/role.yaml) bound as the release binds it: where the release aggregates it (core, kubeadm control
plane), to the aggregated role that takes it in by its label.

python -m statusvault.testing.capi build   # build or find the managers, print the directory
"""

from __future__ import annotations

import base64
import contextlib
import fcntl
import json
import os
import shutil
import subprocess
import sys
import tempfile
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import IO

from statusvault.kube.client import KubeClient
from statusvault.kube.discovery import discover
from statusvault.model import KubeObject
from statusvault.testing.cluster import cache_dir
from statusvault.testing.controlplane import free_ports
from statusvault.testing.fixtures import install_crds, read_docs
from statusvault.testing.gobuild import build_main
from statusvault.testing.operators import Processes, apply_docs, cluster_role_binding, own_kubeconfig, wait_for

CORE, CORE_VERSION = "sigs.k8s.io/cluster-api", "v1.13.6"
TEST, TEST_VERSION = "sigs.k8s.io/cluster-api/test", "v1.13.7"
NAMESPACE = "capi-system"


@dataclass(frozen=True)
class Manager:
    name: str
    module: str  # CORE or TEST
    package: str
    config: str  # its config/ directory in the module
    provider: str  # clusterctl's name for it
    contract: bool  # a provider: its CRDs carry the contract-version labels
    flags: tuple[str, ...]
    env: tuple[tuple[str, str], ...] = ()

    @property
    def infrastructure(self) -> bool:
        return self.module == TEST


MANAGERS = (
    Manager("capi-manager", CORE, ".", "config", "cluster-api", False,
            ("--feature-gates=ClusterTopology=false,MachinePool=true,RuntimeSDK=false",)),
    Manager("kubeadm-bootstrap-manager", CORE, "./bootstrap/kubeadm", "bootstrap/kubeadm/config", "bootstrap-kubeadm",
            True, ("--feature-gates=MachinePool=true",)),
    Manager("kubeadm-control-plane-manager", CORE, "./controlplane/kubeadm", "controlplane/kubeadm/config",
            "control-plane-kubeadm", True, ("--feature-gates=ClusterTopology=false",)),
    Manager("capd-manager", TEST, "./infrastructure/docker", "infrastructure/docker/config", "infrastructure-docker",
            True, ("--feature-gates=MachinePool=true",), (("POD_IP", "127.0.0.1"),)),
)  # fmt: skip
PROVIDERS = (  # what `clusterctl init` records: clusterctl move refuses a cluster without it
    ("cluster-api", "cluster-api", "CoreProvider", CORE_VERSION),
    ("bootstrap-kubeadm", "kubeadm", "BootstrapProvider", CORE_VERSION),
    ("control-plane-kubeadm", "kubeadm", "ControlPlaneProvider", CORE_VERSION),
    ("infrastructure-docker", "docker", "InfrastructureProvider", TEST_VERSION),
)


CLUSTERCTL = "clusterctl"  # from core's ./cmd/clusterctl: the comparison's `clusterctl move`


def capi_dir() -> Path:
    return cache_dir() / f"capi-{CORE_VERSION}"


def ensure_capi() -> Path:
    """The directory holding the managers and clusterctl (bin/), the managers' CRDs (crds/NAME/), webhook
    configurations (webhooks/) and roles (rbac/NAME/), built the first time (what is missing only)."""
    root = capi_dir()
    builds = [(m.name, m.module, m.package) for m in MANAGERS] + [(CLUSTERCTL, CORE, "./cmd/clusterctl")]
    missing = [b for b in builds if not (root / "bin" / b[0]).exists()]
    if not missing and all((root / "rbac" / m.name / "role.yaml").exists() for m in MANAGERS):
        return root
    go = shutil.which("go")
    if go is None:
        raise RuntimeError("building Cluster API needs Go on PATH")
    env = {**os.environ, "GOFLAGS": "-mod=mod -buildvcs=false"}
    with tempfile.TemporaryDirectory(prefix="statusvault-capi-") as tmp:
        sources = {}
        for module, version in ((CORE, CORE_VERSION), (TEST, TEST_VERSION)):
            listing = subprocess.run([go, "mod", "download", "-json", f"{module}@{version}"],
                                     check=True, capture_output=True, env=env, cwd=tmp)  # fmt: skip
            sources[module] = Path(tmp) / module.rsplit("/", 1)[-1]
            shutil.copytree(json.loads(listing.stdout)["Dir"], sources[module])
            for path in sources[module].rglob("*"):
                path.chmod(path.stat().st_mode | 0o200)  # the module cache's files are read-only
        # the test module replaces core with ../ (its repository's tree): the release of core instead
        subprocess.run([go, "mod", "edit", f"-replace={CORE}={CORE}@{CORE_VERSION}"], check=True, env=env,
                       cwd=sources[TEST])  # fmt: skip
        for sub in ("bin", "crds", "webhooks", "rbac"):
            (root / sub).mkdir(parents=True, exist_ok=True)
        clusterctl_crd = sources[CORE] / "cmd/clusterctl/config/crd/bases/clusterctl.cluster.x-k8s.io_providers.yaml"
        shutil.copy(clusterctl_crd, root / "crds" / "clusterctl-providers.yaml")
        for m in MANAGERS:
            config = sources[m.module] / m.config
            (root / "crds" / m.name).mkdir(exist_ok=True)
            for crd in sorted((config / "crd" / "bases").glob("*.yaml")):
                shutil.copy(crd, root / "crds" / m.name / crd.name)
            shutil.copy(config / "webhook" / "manifests.yaml", root / "webhooks" / f"{m.name}.yaml")
            (root / "rbac" / m.name).mkdir(exist_ok=True)
            for role in ("role.yaml", "aggregated_role.yaml"):
                if (config / "rbac" / role).exists():
                    shutil.copy(config / "rbac" / role, root / "rbac" / m.name / role)
        for name, module, package in missing:
            out = Path(tmp) / name
            build = [go, "build", "-trimpath", "-ldflags=-s", "-o", str(out), package]
            subprocess.run(build, check=True, env=env, cwd=sources[module])
            shutil.move(out, root / "bin" / name)
    return root


class ClusterAPI(Processes):
    """The four managers running against one control plane: `ClusterAPI.start(admin)` installs what they need
    and returns once each answers ready (webhooks included); `stop()` ends them. With `infrastructure_from`,
    the infrastructure provider is another ClusterAPI's until `take_infrastructure()`."""

    def __init__(self, admin: KubeClient, kubeconfig: Path, root: Path, infrastructure_from: ClusterAPI | None = None):
        super().__init__("statusvault-capi-")
        self.admin, self.kubeconfig, self.root = admin, kubeconfig, root
        kinds = ("webhook", "health", "diagnostics")
        self.ports = {m.name: dict(zip(kinds, free_ports(3), strict=True)) for m in MANAGERS}
        self.lent = infrastructure_from  # whose CAPD serves this control plane's infrastructure webhooks
        self._lock: IO[str] | None = None

    @classmethod
    def start(
        cls, admin: KubeClient, kubeconfig: Path, timeout: float = 120.0, infrastructure_from: ClusterAPI | None = None
    ) -> ClusterAPI:
        capi = cls(admin, kubeconfig, ensure_capi(), infrastructure_from)
        try:
            if infrastructure_from is None:
                capi._lock = open(cache_dir() / ".capd.lock", "w")  # noqa: SIM115 - held until stop()
                fcntl.flock(capi._lock, fcntl.LOCK_EX)  # CAPD's fixed ports: one at a time on this machine
            capi._certificate()
            capi.install()
            capi.run(timeout)
        except BaseException:
            capi.stop()
            raise
        return capi

    def take_infrastructure(self, timeout: float = 120.0) -> None:
        """The infrastructure provider moves here: the lender's CAPD stops (its lock comes here), this control
        plane's starts, and its webhook configurations point at it."""
        lender, self.lent = self.lent, None
        assert lender is not None, "this control plane runs its own infrastructure provider"
        (infra,) = (m for m in MANAGERS if m.infrastructure)
        lender.end(infra.name)
        self._lock, lender._lock = lender._lock, None
        apply_docs(self.admin, discover(self.admin), self._webhooks(infra))
        self._spawn(infra)
        wait_for(lambda: self._ready(infra), timeout, f"{infra.name} ready", self.log_tail)
        self._reconnect(timeout)

    def _reconnect(self, timeout: float) -> None:
        """The other managers start again: the simulated workload clusters were rebuilt by the new CAPD process at
        the same addresses, with a new history of resourceVersions, which no real workload cluster does. A manager
        that connected to the old one (a move unpauses the Cluster before the handover) resumes its watches there
        "not older than" a resourceVersion the new one has not reached, and its caches never sync again (seen:
        the KubeadmControlPlane's health checks "failed waiting for *v1.Node Informer to sync" for minutes).
        Started again, they connect afresh, as to a real workload cluster that never went away."""
        others = [m for m in MANAGERS if not m.infrastructure]
        for m in others:
            self.end(m.name)
            self._spawn(m)
        wait_for(lambda: all(self._ready(m) for m in others), timeout, "Cluster API's managers ready", self.log_tail)

    def clusterctl(self, *args: str) -> subprocess.CompletedProcess[str]:
        """Run clusterctl (its version check off, its config in this set-up's directory)."""
        env = {**os.environ, "CLUSTERCTL_DISABLE_VERSIONCHECK": "true", "XDG_CONFIG_HOME": str(self.workdir)}
        argv = [str(self.root / "bin" / CLUSTERCTL), *args]
        return subprocess.run(argv, env=env, capture_output=True, text=True, check=False)

    def _certificate(self) -> Path:
        certs = self.workdir / "certs"
        certs.mkdir(exist_ok=True)
        subprocess.run(
            ["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2", "-subj", "/CN=127.0.0.1",
             "-addext", "subjectAltName=IP:127.0.0.1",
             "-keyout", str(certs / "tls.key"), "-out", str(certs / "tls.crt")],
            check=True, capture_output=True,
        )  # fmt: skip
        return certs

    def install(self) -> None:
        """The CRDs with the overlays' labels, clusterctl's provider inventory, and the webhook configurations
        pointed at the managers' loopback ports."""
        crds = []
        for m in MANAGERS:
            for path in sorted((self.root / "crds" / m.name).glob("*.yaml")):
                for crd in read_docs(path):
                    labels = crd["metadata"].setdefault("labels", {})
                    labels.update({"clusterctl.cluster.x-k8s.io": "", "cluster.x-k8s.io/provider": m.provider})
                    if m.contract:
                        labels.update({"cluster.x-k8s.io/v1beta1": "v1beta1", "cluster.x-k8s.io/v1beta2": "v1beta2"})
                    crds.append(crd)
        for crd in read_docs(self.root / "crds" / "clusterctl-providers.yaml"):
            crd["metadata"].setdefault("labels", {}).update(
                {"clusterctl.cluster.x-k8s.io": "", "clusterctl.cluster.x-k8s.io/core": "inventory"}
            )
            crds.append(crd)
        install_crds(self.admin, crds, timeout=120)
        docs: list[KubeObject] = [{"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NAMESPACE}}]
        for name, provider, kind, version in PROVIDERS:
            labels = {"clusterctl.cluster.x-k8s.io": "", "cluster.x-k8s.io/provider": name}
            docs.append({"apiVersion": "clusterctl.cluster.x-k8s.io/v1alpha3", "kind": "Provider",
                         "metadata": {"name": name, "namespace": NAMESPACE, "labels": labels},
                         "providerName": provider, "type": kind, "version": version})  # fmt: skip
        for m in MANAGERS:
            docs += self._rbac(m) + self._webhooks(m)
        apply_docs(self.admin, discover(self.admin), docs)

    def _rbac(self, m: Manager) -> list[KubeObject]:
        """The manager's ServiceAccount and its release's ClusterRole, bound as the release binds it: to the
        aggregated role that selects it by a label, where the release has one."""
        rbac = self.root / "rbac" / m.name
        (role,) = read_docs(rbac / "role.yaml")
        role["metadata"] = {"name": f"statusvault-test-{m.name}"}
        bound, docs = role["metadata"]["name"], [role]
        if (rbac / "aggregated_role.yaml").exists():
            (aggregated,) = read_docs(rbac / "aggregated_role.yaml")
            (selector,) = aggregated["aggregationRule"]["clusterRoleSelectors"]
            role["metadata"]["labels"] = dict(selector["matchLabels"])
            aggregated["metadata"] = {"name": f"statusvault-test-{m.name}-aggregated"}
            bound = aggregated["metadata"]["name"]
            docs.append(aggregated)
        account: KubeObject = {"apiVersion": "v1", "kind": "ServiceAccount",
                               "metadata": {"name": m.name, "namespace": NAMESPACE}}  # fmt: skip
        return [account, *docs, cluster_role_binding(f"statusvault-test-{m.name}", bound, m.name, NAMESPACE)]

    def _webhooks(self, m: Manager) -> list[KubeObject]:
        """The manager's webhook configurations, pointed at the process that serves them: its own, or the
        lender's CAPD."""
        server = self.lent if m.infrastructure and self.lent is not None else self
        ca = base64.b64encode((server.workdir / "certs" / "tls.crt").read_bytes()).decode()
        docs = read_docs(self.root / "webhooks" / f"{m.name}.yaml")
        for config in docs:
            config["metadata"] = {"name": f"statusvault-test-{m.name}-{config['metadata']['name']}"}
            for hook in config["webhooks"]:
                path = hook["clientConfig"]["service"]["path"]
                url = f"https://127.0.0.1:{server.ports[m.name]['webhook']}{path}"
                hook["clientConfig"] = {"url": url, "caBundle": ca}
        return docs

    def run(self, timeout: float) -> None:
        running = [m for m in MANAGERS if not (m.infrastructure and self.lent is not None)]
        for m in running:
            self._spawn(m)
        wait_for(lambda: all(self._ready(m) for m in running), timeout, "Cluster API's managers ready", self.log_tail)

    def _spawn(self, m: Manager) -> None:
        p = self.ports[m.name]
        kubeconfig = own_kubeconfig(self.admin, NAMESPACE, m.name, self.workdir)
        argv = [
            str(self.root / "bin" / m.name), f"--kubeconfig={kubeconfig}", "--leader-elect=false",
            f"--webhook-port={p['webhook']}", f"--webhook-cert-dir={self.workdir / 'certs'}",
            f"--health-addr=127.0.0.1:{p['health']}", f"--diagnostics-address=127.0.0.1:{p['diagnostics']}",
            "--insecure-diagnostics", *m.flags,
        ]  # fmt: skip
        self.spawn(m.name, argv, {**os.environ, **dict(m.env)})

    def _ready(self, m: Manager) -> bool:
        process = self.processes[m.name]
        if process.poll() is not None:
            raise RuntimeError(f"{m.name} exited with {process.returncode}: {self.log_tail(m.name)}")
        url = f"http://127.0.0.1:{self.ports[m.name]['health']}/readyz"
        with contextlib.suppress(OSError), urllib.request.urlopen(url, timeout=2) as answer:
            return bool(answer.status == 200)
        return False

    def stop(self) -> None:
        super().stop()
        if self._lock is not None:
            self._lock.close()
            self._lock = None


def main(argv: list[str] | None = None) -> int:
    return build_main("statusvault.testing.capi", ensure_capi, argv)


if __name__ == "__main__":
    sys.exit(main())
