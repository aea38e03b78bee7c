"""Real operators for the tests: Flux's source-controller and kustomize-controller, built from the Go module proxy
once per machine (like the 1.36 control plane) and run as local processes against a test control plane.

Each runs as its own release runs it in a cluster, with three differences that running outside a cluster needs: it
reads a kubeconfig holding its own ServiceAccount's token (from the TokenRequest API) instead of a mounted one,
leader election is off (one replica), and its HTTP endpoints listen on free loopback ports. Its CRDs and RBAC are
its release's own files (config/crd/bases, config/rbac/role.yaml), installed as they are.

python -m statusvault.testing.operators build   # build or find the operators, print the directory
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import Any, Self

from statusvault.errors import KubeApiError
from statusvault.kube.client import KubeClient
from statusvault.kube.discovery import Discovery, discover
from statusvault.kube.transport import Request
from statusvault.model import KubeObject
from statusvault.testing.cluster import cache_dir, kubeconfig_yaml
from statusvault.testing.controlplane import free_ports, terminate
from statusvault.testing.fixtures import ensure_namespace, install_crds, read_docs
from statusvault.testing.gobuild import build_main


@dataclass(frozen=True)
class GoController:
    """One controller's release on the Go module proxy, and what building it from there takes."""

    name: str
    module: str
    version: str
    # A release's go.mod points its own API package at ./api, a nested module the proxy's zip of the release leaves
    # out: the build takes the API module of the same version from the proxy instead.
    api: str
    # Dependencies pinned to a version the proxy serves, where the release asks for one it does not.
    pins: tuple[tuple[str, str], ...] = ()


FLUX_VERSION = "v1.9.6"  # source-controller and kustomize-controller of one Flux release (client-go 1.36)
SOURCE = GoController(
    "source-controller",
    "github.com/fluxcd/source-controller",
    FLUX_VERSION,
    "github.com/fluxcd/source-controller/api",
    pins=(("github.com/fluxcd/pkg/artifact", "v0.18.0"),),  # v0.18.3 is not served; 0.18.x keeps its API
)
KUSTOMIZE = GoController(
    "kustomize-controller",
    "github.com/fluxcd/kustomize-controller",
    FLUX_VERSION,
    "github.com/fluxcd/kustomize-controller/api",
)
FLUX = (SOURCE, KUSTOMIZE)


def flux_dir() -> Path:
    return cache_dir() / f"flux-{FLUX_VERSION}"


def ensure_flux() -> Path:
    """The directory holding Flux's controllers (bin/), CRDs (crds/) and roles (rbac/), built the first time."""
    root = flux_dir()
    if all((root / "bin" / c.name).exists() for c in FLUX):
        return root
    go = shutil.which("go")
    if go is None:
        raise RuntimeError("building Flux's controllers needs Go on PATH")
    for sub in ("bin", "crds", "rbac"):
        (root / sub).mkdir(parents=True, exist_ok=True)
    for controller in FLUX:
        _build(go, controller, root)
    return root


def _build(go: str, controller: GoController, root: Path) -> None:
    env = {**os.environ, "GOFLAGS": "-mod=mod -buildvcs=false"}
    with tempfile.TemporaryDirectory(prefix=f"statusvault-{controller.name}-") as tmp:
        listing = subprocess.run(
            [go, "mod", "download", "-json", f"{controller.module}@{controller.version}"],
            check=True, capture_output=True, env=env, cwd=tmp,
        )  # fmt: skip
        source = Path(tmp) / "src"
        shutil.copytree(json.loads(listing.stdout)["Dir"], source)
        for path in source.rglob("*"):
            path.chmod(path.stat().st_mode | 0o200)  # the module cache's files are read-only
        edits = [f"-dropreplace={controller.api}"]
        edits += [f"-replace={module}={module}@{version}" for module, version in controller.pins]
        subprocess.run([go, "mod", "edit", *edits], check=True, env=env, cwd=source)
        out = Path(tmp) / controller.name
        subprocess.run([go, "build", "-trimpath", "-ldflags=-s", "-o", str(out), "."], check=True, env=env, cwd=source)
        for crd in sorted((source / "config" / "crd" / "bases").glob("*.yaml")):
            shutil.copy(crd, root / "crds" / crd.name)
        shutil.copy(source / "config" / "rbac" / "role.yaml", root / "rbac" / f"{controller.name}.yaml")
        shutil.move(out, root / "bin" / controller.name)


class Processes:
    """Operator processes a test started, each logging to a file in a temporary directory of its own; `stop()`
    ends them all and removes the directory."""

    def __init__(self, prefix: str):
        self._tmp = tempfile.TemporaryDirectory(prefix=prefix)
        self.workdir = Path(self._tmp.name)
        self.processes: dict[str, subprocess.Popen[bytes]] = {}

    def spawn(self, name: str, argv: list[str], env: dict[str, str]) -> None:
        log = open(self.workdir / f"{name}.log", "ab")  # noqa: SIM115 - the process holds it
        self.processes[name] = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, env=env)

    def log_tail(self, name: str = "", lines: int = 15) -> str:
        """The last lines of one process's log (every process's, without a name): for a failure's message."""
        tails = []
        for n in [name] if name else list(self.processes):
            with contextlib.suppress(OSError):
                tails.append(f"{n}: " + "\n".join((self.workdir / f"{n}.log").read_text().splitlines()[-lines:]))
        return "\n".join(tails)

    def end(self, name: str) -> None:
        """Stop one process (its log stays)."""
        terminate(self.processes.pop(name).pid)

    def stop(self) -> None:
        for process in self.processes.values():
            terminate(process.pid)
        self.processes.clear()
        self._tmp.cleanup()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, kind: type[BaseException] | None, error: BaseException | None, tb: TracebackType | None) -> None:
        self.stop()


class Flux(Processes):
    """source-controller and kustomize-controller running against one control plane, in namespace flux-system:
    `Flux.start(kubeconfig)` installs what they need and returns once both are reconciling; `stop()` ends them
    (their CRDs and objects stay, as when a cluster's operators are gone)."""

    NAMESPACE = "flux-system"

    def __init__(self, admin: KubeClient, root: Path):
        super().__init__("statusvault-flux-")
        self.admin, self.root = admin, root
        self.storage_port = 0

    @classmethod
    def start(cls, admin: KubeClient, timeout: float = 120.0) -> Flux:
        flux = cls(admin, ensure_flux())
        try:
            flux.install()
            flux.run()
            flux.wait_reconciling(timeout)
        except BaseException:
            flux.stop()
            raise
        return flux

    def install(self) -> None:
        """Flux's CRDs, its namespace, and for each controller a ServiceAccount with its release's ClusterRole. The
        kustomize-controller is also bound to cluster-admin, as Flux's install binds it ("cluster-reconciler"): it
        applies whatever its sources hold."""
        crds = [doc for path in sorted((self.root / "crds").glob("*.yaml")) for doc in read_docs(path)]
        install_crds(self.admin, crds)
        ensure_namespace(self.admin, self.NAMESPACE)
        for controller in FLUX:
            (role,) = read_docs(self.root / "rbac" / f"{controller.name}.yaml")
            role["metadata"] = {"name": f"flux-{controller.name}"}
            roles = [role["metadata"]["name"]] + (["cluster-admin"] if controller is KUSTOMIZE else [])
            docs = [
                {"apiVersion": "v1", "kind": "ServiceAccount",
                 "metadata": {"name": controller.name, "namespace": self.NAMESPACE}},
                role,
                *(cluster_role_binding(f"flux-{controller.name}-{r}", r, controller.name, self.NAMESPACE)
                  for r in roles),
            ]  # fmt: skip
            apply_docs(self.admin, discover(self.admin), docs)

    def run(self) -> None:
        storage, *ports = free_ports(5)
        self.storage_port = storage
        (self.workdir / "storage").mkdir(exist_ok=True)
        source_args = [
            "--watch-all-namespaces", f"--storage-path={self.workdir / 'storage'}",
            f"--storage-addr=127.0.0.1:{storage}", f"--storage-adv-addr=127.0.0.1:{storage}",
        ]  # fmt: skip
        for controller, extra, (metrics, health) in (
            (SOURCE, source_args, ports[:2]),
            (KUSTOMIZE, ["--watch-all-namespaces"], ports[2:]),
        ):
            kubeconfig = own_kubeconfig(self.admin, self.NAMESPACE, controller.name, self.workdir)
            # a /tmp of its own, as its pod would have: kustomize-controller removes every kustomization-* directory
            # in its temp dir when it starts, which would pull the build out from under another Flux's reconcile
            # (two tests' Flux at once: "evalsymlink failure ... lstat /tmp/kustomization-...", retried in 10 min)
            tmp = self.workdir / f"tmp-{controller.name}"
            tmp.mkdir(exist_ok=True)
            argv = [
                str(self.root / "bin" / controller.name), *extra, "--enable-leader-election=false",
                f"--metrics-addr=127.0.0.1:{metrics}", f"--health-addr=127.0.0.1:{health}", "--log-encoding=json",
            ]  # fmt: skip
            env = {**os.environ, "KUBECONFIG": str(kubeconfig), "RUNTIME_NAMESPACE": self.NAMESPACE, "TMPDIR": str(tmp)}
            self.spawn(controller.name, argv, env)
            self._wait_healthy(controller.name, health)

    def _wait_healthy(self, name: str, port: int, timeout: float = 60.0) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            process = self.processes[name]
            if process.poll() is not None:
                raise RuntimeError(f"{name} exited with {process.returncode}: {self.log_tail(name)}")
            url = f"http://127.0.0.1:{port}/readyz"
            with contextlib.suppress(OSError), urllib.request.urlopen(url, timeout=2) as answer:
                if answer.status == 200:
                    return
            time.sleep(0.2)
        raise TimeoutError(f"{name} not ready within {timeout:.0f}s: {self.log_tail(name)}")

    def wait_reconciling(self, timeout: float) -> None:
        """Both controllers answer for objects they are given: a Bucket that points nowhere and a Kustomization of
        it each get a Ready condition from their controller (False, with the reason), then are deleted."""
        discovery = discover(self.admin)
        probes: list[KubeObject] = [
            {"apiVersion": "source.toolkit.fluxcd.io/v1", "kind": "Bucket",
             "metadata": {"name": "statusvault-probe", "namespace": self.NAMESPACE},
             "spec": {"interval": "1h", "bucketName": "none", "endpoint": "127.0.0.1:9", "insecure": True}},
            {"apiVersion": "kustomize.toolkit.fluxcd.io/v1", "kind": "Kustomization",
             "metadata": {"name": "statusvault-probe", "namespace": self.NAMESPACE},
             "spec": {"interval": "1h", "prune": False, "sourceRef": {"kind": "Bucket", "name": "statusvault-probe"}}},
        ]  # fmt: skip
        apply_docs(self.admin, discovery, probes)

        def answered() -> bool:
            return all(condition(get_doc(self.admin, discovery, p), "Ready") is not None for p in probes)

        wait_for(answered, timeout, "the probes reconciled by Flux", self.log_tail)
        for probe in reversed(probes):
            delete_doc(self.admin, discovery, probe)
        wait_for(lambda: all(get_doc(self.admin, discovery, p) is None for p in probes), timeout, "probes deleted")


def own_kubeconfig(admin: KubeClient, namespace: str, account: str, workdir: Path) -> Path:
    """A kubeconfig (mode 0600, in `workdir`) holding a token of the ServiceAccount, as a pod's projected volume
    would hold it (the TokenRequest API)."""
    path = f"/api/v1/namespaces/{namespace}/serviceaccounts/{account}/token"
    body = {"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest", "spec": {"expirationSeconds": 86400}}
    answer = admin.request_json(Request("POST", path, body=json.dumps(body).encode()))
    kubeconfig = workdir / f"{account}.kubeconfig"
    kubeconfig.write_text(kubeconfig_yaml(admin.server, account, str(answer["status"]["token"])))
    kubeconfig.chmod(0o600)
    return kubeconfig


def cluster_role_binding(name: str, role: str, account: str, namespace: str) -> KubeObject:
    return {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "ClusterRoleBinding",
        "metadata": {"name": name},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": role},
        "subjects": [{"kind": "ServiceAccount", "name": account, "namespace": namespace}],
    }


def _type_of(discovery: Discovery, doc: KubeObject) -> Any:
    group, _, version = doc["apiVersion"].rpartition("/")
    rt = discovery.find(group, version, doc["kind"])
    if rt is None:
        raise LookupError(f"{doc['apiVersion']} {doc['kind']} is not served")
    return rt


def apply_docs(client: KubeClient, discovery: Discovery, docs: list[KubeObject]) -> None:
    """Create each object, or replace the one of that name (kubectl apply's outcome for whole objects)."""
    for doc in docs:
        rt = _type_of(discovery, doc)
        ns = doc["metadata"].get("namespace") if rt.namespaced else None
        try:
            client.create(rt, ns, doc)
        except KubeApiError as e:
            if e.code != 409:
                raise
            live = client.get(rt, ns, doc["metadata"]["name"]) or {}
            body = {**doc, "metadata": {**doc["metadata"], "resourceVersion": live["metadata"]["resourceVersion"]}}
            client.replace(rt, ns, doc["metadata"]["name"], body)


def get_doc(client: KubeClient, discovery: Discovery, doc: KubeObject) -> KubeObject | None:
    rt = _type_of(discovery, doc)
    return client.get(rt, doc["metadata"].get("namespace") if rt.namespaced else None, doc["metadata"]["name"])


def delete_doc(client: KubeClient, discovery: Discovery, doc: KubeObject) -> None:
    rt = _type_of(discovery, doc)
    client.delete(rt, doc["metadata"].get("namespace") if rt.namespaced else None, doc["metadata"]["name"])


def condition(obj: KubeObject | None, kind: str) -> dict[str, Any] | None:
    """The object's status condition of that type, if it has one."""
    for c in ((obj or {}).get("status") or {}).get("conditions") or []:
        if c.get("type") == kind:
            return dict(c)
    return None


def wait_for(
    done: Callable[[], bool], timeout: float, what: str, diagnose: Callable[[], str] = lambda: "", every: float = 0.3
) -> None:
    deadline = time.monotonic() + timeout
    while not done():
        if time.monotonic() > deadline:
            raise TimeoutError(f"{what}: not within {timeout:.0f}s\n{diagnose()}")
        time.sleep(every)


def main(argv: list[str] | None = None) -> int:
    return build_main("statusvault.testing.operators", ensure_flux, argv)


if __name__ == "__main__":
    sys.exit(main())
