"""Build (once, cached) and run a current (Kubernetes 1.36) CRD API server on loopback: etcd 3.5 + the standalone
k8s.io/apiextensions-apiserver, both from Debian unstable (see build-apiext.sh).

It serves CustomResourceDefinitions and custom resources with 1.36 semantics (CEL rules, defaulting, managedFields,
status subresources, paging) but no core API: no Namespaces, no RBAC, no Deployments. A namespaced custom resource
can be created in any namespace name. Only the admin identity works: a client certificate in group system:masters
(bearer tokens would need a TokenReview, other users a SubjectAccessReview, from a kube-apiserver that is not there).

python -m statusvault.testing.apiext build   # build or find the binaries, print the bin directory
python -m statusvault.testing.apiext run     # start, print the kubeconfig path, stay in the foreground
"""

from __future__ import annotations

import argparse
import base64
import json
import shutil
import signal
import subprocess
import sys
import urllib.request
from pathlib import Path

import yaml

from statusvault.testing.cluster import cache_dir, issue_cert, kubeconfig_yaml
from statusvault.testing.controlplane import ControlPlane, free_ports, insecure_context

MINOR = "1.36"
# The stock server answers 404 for /api and /apis (kube-aggregator serves those in a real cluster); this build of
# it, the same server plus root discovery, answers /apis (legacy and aggregated) and /api (no versions).
SERVER_WITH_ROOT_DISCOVERY = f"statusvault-apiext-{MINOR}"
SERVER_STOCK = f"apiextensions-apiserver-{MINOR}"
ETCD = "etcd-3.5"  # the 1.36 server's streaming lists (sendInitialEvents) need etcd >= 3.4.31; bookworm has 3.4.23
# Admission plugins that read core objects through informers of a core API this server does not have.
CORE_ADMISSION_PLUGINS = (
    "NamespaceLifecycle",
    "MutatingAdmissionPolicy",
    "MutatingAdmissionWebhook",
    "ValidatingAdmissionPolicy",
    "ValidatingAdmissionWebhook",
)


def ensure_apiext_binary(root_discovery: bool = True) -> Path:
    """The apiextensions-apiserver 1.36 binary (with root discovery unless told otherwise), building it if needed."""
    bindir = cache_dir() / "bin"
    needed = [bindir / SERVER_WITH_ROOT_DISCOVERY, bindir / SERVER_STOCK, bindir / ETCD]
    if not all(p.exists() for p in needed) or not shutil.which("openssl"):
        script = Path(__file__).with_name("build-apiext.sh")
        subprocess.run(["bash", str(script), str(cache_dir())], check=True)
    return bindir / (SERVER_WITH_ROOT_DISCOVERY if root_discovery else SERVER_STOCK)


def _b64(path: Path) -> str:
    return base64.b64encode(path.read_bytes()).decode()


class ApiextServer(ControlPlane):
    """A running etcd + apiextensions-apiserver."""

    PROCESSES = ("apiextensions-apiserver", "etcd")
    SERVER = "apiextensions-apiserver"
    PREFIX = "statusvault-apiext-"

    @property
    def admin_cert(self) -> tuple[Path, Path]:
        """The admin client certificate and key (CN=admin, O=system:masters)."""
        return self.workdir / "admin.crt", self.workdir / "admin.key"

    @classmethod
    def start(cls, workdir: Path | None = None, detach: bool = False, root_discovery: bool = True) -> ApiextServer:
        binary = ensure_apiext_binary(root_discovery)
        return cls.launch(workdir, lambda server: server._start(binary, detach))

    def _write_kubeconfig(self) -> None:
        cfg = yaml.safe_load(kubeconfig_yaml(self.server, "admin", ""))
        cert, key = self.admin_cert
        cfg["users"][0]["user"] = {"client-certificate-data": _b64(cert), "client-key-data": _b64(key)}
        self.kubeconfig.write_text(yaml.safe_dump(cfg))

    def _start(self, binary: Path, detach: bool) -> None:
        wd = self.workdir
        self.port, etcd_port, peer_port = free_ports(3)
        self.spawn_etcd(str(binary.with_name(ETCD)), etcd_port, peer_port, detach)
        ca = issue_cert("/CN=statusvault-apiext-client-ca", wd / "client-ca.crt", wd / "client-ca.key")
        issue_cert("/CN=admin/O=system:masters", *self.admin_cert, ca=ca)
        self._write_kubeconfig()
        self.spawn(
            "apiextensions-apiserver",
            [
                str(binary),
                f"--etcd-servers=http://127.0.0.1:{etcd_port}",
                f"--secure-port={self.port}",
                "--bind-address=127.0.0.1",
                f"--cert-dir={wd / 'certs'}",
                # Identity: client certificates of this CA (user = CN, groups = O); system:masters may do anything
                # without asking anyone. Nothing else in the configmap of a kube-system to look up.
                f"--client-ca-file={ca[0]}",
                "--authentication-skip-lookup",
                # The "core" cluster these options require (there is no in-cluster config to fall back on) is the
                # server itself: TokenReviews and SubjectAccessReviews get 404 there, so bearer tokens get 401 and
                # anyone outside system:masters (anonymous included) gets 500 except on /healthz, /livez, /readyz.
                f"--kubeconfig={self.kubeconfig}",
                f"--authentication-kubeconfig={self.kubeconfig}",
                f"--authorization-kubeconfig={self.kubeconfig}",
                f"--disable-admission-plugins={','.join(CORE_ADMISSION_PLUGINS)}",
                # Priority and fairness reads its FlowSchemas from the core cluster: without them it would reject.
                "--enable-priority-and-fairness=false",
                "--max-requests-inflight=800",
                "--max-mutating-requests-inflight=400",
            ],
            detach,
        )
        self._wait_ready()
        (wd / "apiext.json").write_text(json.dumps({"port": self.port, "pids": self.pids}))

    def _wait_ready(self) -> None:
        context = insecure_context()
        context.load_cert_chain(*map(str, self.admin_cert))
        # informer-sync never passes: the Service informer (for conversion webhooks' service references) lists
        # /api/v1/services, which this server does not have.
        self.wait_ready(urllib.request.Request(f"{self.server}/readyz?exclude=informer-sync"), context)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m statusvault.testing.apiext")
    parser.add_argument("command", choices=["build", "run"])
    parser.add_argument("--state-dir", help="where the server keeps its data (default: a temporary directory)")
    parser.add_argument("--stock", action="store_true", help="the stock server: 404 for /api and /apis")
    args = parser.parse_args(argv)
    if args.command == "build":
        print(ensure_apiext_binary(not args.stock).parent)
        return 0
    server = ApiextServer.start(Path(args.state_dir) if args.state_dir else None, root_discovery=not args.stock)
    print(server.kubeconfig, flush=True)
    try:
        signal.pause()
    except KeyboardInterrupt:
        pass
    finally:
        server.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
