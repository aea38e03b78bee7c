"""Build (once, cached) and run a real etcd + kube-apiserver + kube-controller-manager on loopback, of Kubernetes
1.20 (kube-apiserver 1.20.2 and Debian's etcd 3.4, build-kube.sh) or 1.36 (Go modules, etcd 3.6, build-kube136.sh).

python -m statusvault.testing.cluster up     # start in the background, print the kubeconfig path
python -m statusvault.testing.cluster down   # stop it by PID
python -m statusvault.testing.cluster run    # start, print the kubeconfig path, stay in the foreground
python -m statusvault.testing.cluster build  # build or find the binaries, print their directory
(each takes --kube-version 1.20|1.36; 1.20 unless told)
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import subprocess
import sys
import time
import urllib.request
from dataclasses import dataclass
from pathlib import Path

import yaml

from statusvault.testing.controlplane import ControlPlane, free_ports, insecure_context, terminate

ADMIN_TOKEN = "admintoken"
# Extra token users for least-privilege tests; they belong to no group, so they can do nothing until bound.
TEST_USERS = {f"sv-user-{i}": f"sv-user-{i}-token" for i in range(1, 6)}
# Two tokens of one cluster-admin user, for credential-rotation tests: any other token gets 401.
ROTATING_USER = "sv-rotating"
ROTATING_TOKENS = ("sv-rotating-token-1", "sv-rotating-token-2")


def cache_dir() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache")
    return Path(base) / "statusvault"


@dataclass(frozen=True)
class Release:
    """A Kubernetes release the local cluster runs: its binaries (in the cache's bin/), the script that builds them,
    and the few flags in which its components differ."""

    version: str  # "1.20"
    git_version: str  # what its API server says it is (kube136/go.mod names the 1.36 one)
    apiserver: str
    controller_manager: str
    etcd: str  # a file in bin/, or "" for the etcd on PATH
    build_script: str
    controller_manager_flags: tuple[str, ...] = ()


RELEASES = {
    "1.20": Release(
        "1.20",
        "v1.20.2",
        "kube-apiserver",
        "kube-controller-manager",
        "",  # Debian's etcd 3.4
        "build-kube.sh",
        ("--port=0",),  # the insecure port, removed in 1.24
    ),
    "1.36": Release(
        "1.36", "v1.36.4", "kube-apiserver-1.36", "kube-controller-manager-1.36", "etcd-3.6", "build-kube136.sh"
    ),
}
DEFAULT_VERSION = "1.20"


def ensure_binaries(version: str = DEFAULT_VERSION) -> Path:
    """Return the directory holding the release's binaries, building them if needed (its script is a no-op when
    they are there)."""
    script = Path(__file__).with_name(RELEASES[version].build_script)
    subprocess.run(["bash", str(script), str(cache_dir())], check=True)
    return cache_dir() / "bin"


def issue_cert(subject: str, cert: Path, key: Path, ca: tuple[Path, Path] | None = None) -> tuple[Path, Path]:
    """Write a key and a 30-day certificate for `subject` ("/CN=user/O=group"), signed by `ca` or by itself."""
    new = ["openssl", "req", "-newkey", "rsa:2048", "-nodes", "-subj", subject, "-keyout", str(key)]
    if ca is None:
        subprocess.run([*new, "-x509", "-days", "30", "-out", str(cert)], check=True, capture_output=True)
        return cert, key
    csr = subprocess.run(new, check=True, capture_output=True).stdout
    sign = ["openssl", "x509", "-req", "-days", "30", "-CA", str(ca[0]), "-CAkey", str(ca[1]), "-out", str(cert)]
    subprocess.run(
        [*sign, "-set_serial", str(int.from_bytes(os.urandom(8)))], input=csr, check=True, capture_output=True
    )
    return cert, key


def kubeconfig_yaml(server: str, user: str, token: str) -> str:
    return yaml.safe_dump(
        {
            "apiVersion": "v1",
            "kind": "Config",
            "current-context": "statusvault-test",
            "clusters": [{"name": "statusvault-test", "cluster": {"server": server, "insecure-skip-tls-verify": True}}],
            "users": [{"name": user, "user": {"token": token}}],
            "contexts": [{"name": "statusvault-test", "context": {"cluster": "statusvault-test", "user": user}}],
        }
    )


class LocalCluster(ControlPlane):
    """A running local control plane: etcd, kube-apiserver and kube-controller-manager of one release."""

    release: Release = RELEASES[DEFAULT_VERSION]

    PROCESSES = ("kube-controller-manager", "kube-apiserver", "etcd")
    SERVER = "kube-apiserver"
    PREFIX = "statusvault-cluster-"

    @property
    def client_ca(self) -> tuple[Path, Path]:
        """The CA (certificate, key) whose client certificates the API server accepts (user = CN, groups = O)."""
        return self.workdir / "client-ca.crt", self.workdir / "client-ca.key"

    def restart_apiserver(self, down: float) -> None:
        """Stop the API server, leave it down `down` seconds, start it again as before and wait until it is ready:
        the outage of an upgrade or a failover (etcd and every object stay)."""
        terminate(self.pids.pop(self.SERVER))
        time.sleep(down)
        self.spawn(self.SERVER, self.apiserver_argv, detach=False)
        self.wait_ready(self._readyz(), insecure_context())

    def _readyz(self) -> urllib.request.Request:
        return urllib.request.Request(f"{self.server}/readyz", headers={"Authorization": f"Bearer {ADMIN_TOKEN}"})

    def kubeconfig_for(self, user: str) -> Path:
        """A kubeconfig for one of TEST_USERS (no permissions until a test binds a role)."""
        path = self.workdir / f"kubeconfig-{user}"
        path.write_text(kubeconfig_yaml(self.server, user, TEST_USERS[user]))
        return path

    @classmethod
    def start(cls, workdir: Path | None = None, detach: bool = False, version: str = DEFAULT_VERSION) -> LocalCluster:
        release = RELEASES[version]
        bindir = ensure_binaries(version)
        return cls.launch(workdir, lambda cluster: cluster._start(release, bindir, detach))

    def _start(self, release: Release, bindir: Path, detach: bool) -> None:
        wd = self.workdir
        self.release = release
        self.port, etcd_port, peer_port = free_ports(3)
        etcd = str(bindir / release.etcd) if release.etcd else shutil.which("etcd") or "etcd"
        self.spawn_etcd(etcd, etcd_port, peer_port, detach)
        subprocess.run(["openssl", "genrsa", "-out", str(wd / "sa.key"), "2048"], check=True, capture_output=True)
        ca_cert, _ = issue_cert("/CN=statusvault-test-client-ca", *self.client_ca)
        lines = [f'{ADMIN_TOKEN},admin,admin,"system:masters"']
        lines += [f"{token},{user},{user}" for user, token in TEST_USERS.items()]
        lines += [f'{token},{ROTATING_USER},{ROTATING_USER},"system:masters"' for token in ROTATING_TOKENS]
        (wd / "tokens.csv").write_text("\n".join(lines) + "\n")
        self.apiserver_argv = [
            str(bindir / release.apiserver),
            f"--etcd-servers=http://127.0.0.1:{etcd_port}",
            f"--secure-port={self.port}",
            "--bind-address=127.0.0.1",
            f"--cert-dir={wd / 'certs'}",
            f"--service-account-key-file={wd / 'sa.key'}",
            f"--service-account-signing-key-file={wd / 'sa.key'}",
            "--service-account-issuer=https://kubernetes.default.svc",
            f"--token-auth-file={wd / 'tokens.csv'}",
            f"--client-ca-file={ca_cert}",
            "--authorization-mode=RBAC",
            "--service-cluster-ip-range=10.0.0.0/24",
            "--disable-admission-plugins=ServiceAccount",
            "--max-requests-inflight=800",
            "--max-mutating-requests-inflight=400",
        ]
        self.spawn("kube-apiserver", self.apiserver_argv, detach)
        self.kubeconfig.write_text(kubeconfig_yaml(self.server, "admin", ADMIN_TOKEN))
        self.wait_ready(self._readyz(), insecure_context())
        self.spawn(
            "kube-controller-manager",
            [
                str(bindir / release.controller_manager),
                f"--kubeconfig={self.kubeconfig}",
                "--leader-elect=false",
                # no serviceaccount-token: no token Secrets, as on Kubernetes 1.24+ (tests use TokenRequest)
                # clusterrole-aggregation: operators' releases bind aggregated ClusterRoles (Cluster API's do)
                "--controllers=namespace,garbagecollector,deployment,replicaset,cronjob,clusterrole-aggregation",
                "--bind-address=127.0.0.1",
                "--secure-port=0",
                *release.controller_manager_flags,
            ],
            detach,
        )
        (wd / "cluster.json").write_text(json.dumps({"port": self.port, "pids": self.pids, "version": release.version}))


def _state_dir(arg: str | None) -> Path:
    return Path(arg or cache_dir() / "cluster")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m statusvault.testing.cluster")
    parser.add_argument("command", choices=["up", "down", "run", "build"])
    parser.add_argument("--state-dir", help="where the cluster keeps its data (default: cache dir)")
    parser.add_argument("--kube-version", choices=sorted(RELEASES), default=DEFAULT_VERSION)
    args = parser.parse_args(argv)
    state = _state_dir(args.state_dir)
    if args.command == "build":
        print(ensure_binaries(args.kube_version))
        return 0
    if args.command == "down":
        info = state / "cluster.json"
        if not info.exists():
            print("no local cluster is running", file=sys.stderr)
            return 0
        pids = json.loads(info.read_text())["pids"]
        for name in ("kube-controller-manager", "kube-apiserver", "etcd"):
            if name in pids:
                terminate(pids[name])
        shutil.rmtree(state, ignore_errors=True)
        print("local cluster stopped")
        return 0
    if (state / "cluster.json").exists():
        print(f"a local cluster is already running; run 'down' first ({state})", file=sys.stderr)
        return 1
    shutil.rmtree(state, ignore_errors=True)
    cluster = LocalCluster.start(state, detach=args.command == "up", version=args.kube_version)
    print(cluster.kubeconfig)
    if args.command == "run":
        try:
            signal.pause()
        except KeyboardInterrupt:
            pass
        finally:
            cluster.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
