"""Build (once, cached) and run a real etcd + kube-apiserver + kube-controller-manager on loopback.

python -m statusvault.testing.cluster up     # start in the background, print the kubeconfig path
python -m statusvault.testing.cluster down   # stop it by PID
python -m statusvault.testing.cluster run    # start, print the kubeconfig path, stay in the foreground
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shutil
import signal
import socket
import ssl
import subprocess
import sys
import tempfile
import time
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path

import yaml

ADMIN_TOKEN = "admintoken"
# Extra token users for least-privilege tests; they belong to no group, so they can do nothing until bound.
TEST_USERS = {f"sv-user-{i}": f"sv-user-{i}-token" for i in range(1, 6)}
# Two tokens of one cluster-admin user, for credential-rotation tests: any other token gets 401.
ROTATING_USER = "sv-rotating"
ROTATING_TOKENS = ("sv-rotating-token-1", "sv-rotating-token-2")


def cache_dir() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache")
    return Path(base) / "statusvault"


def ensure_binaries() -> Path:
    """Return the directory holding kube-apiserver and kube-controller-manager, building them if needed."""
    bindir = cache_dir() / "bin"
    needed = [bindir / "kube-apiserver", bindir / "kube-controller-manager"]
    if all(p.exists() for p in needed) and shutil.which("etcd") and shutil.which("openssl"):
        return bindir
    script = Path(__file__).with_name("build-kube.sh")
    subprocess.run(["bash", str(script), str(cache_dir())], check=True)
    return bindir


def _free_ports(n: int) -> list[int]:
    """n distinct free loopback ports (all held open while choosing, so none repeats)."""
    socks = [socket.socket() for _ in range(n)]
    try:
        for s in socks:
            s.bind(("127.0.0.1", 0))
        return [int(s.getsockname()[1]) for s in socks]
    finally:
        for s in socks:
            s.close()


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


@dataclass
class LocalCluster:
    """A running local control plane; `stop()` ends its processes by PID."""

    workdir: Path
    port: int = 0
    pids: dict[str, int] = field(default_factory=dict)
    _owned_workdir: bool = False

    @property
    def server(self) -> str:
        return f"https://127.0.0.1:{self.port}"

    @property
    def kubeconfig(self) -> Path:
        return self.workdir / "kubeconfig"

    @property
    def client_ca(self) -> tuple[Path, Path]:
        """The CA (certificate, key) whose client certificates the API server accepts (user = CN, groups = O)."""
        return self.workdir / "client-ca.crt", self.workdir / "client-ca.key"

    def kubeconfig_for(self, user: str) -> Path:
        """A kubeconfig for one of TEST_USERS (no permissions until a test binds a role)."""
        path = self.workdir / f"kubeconfig-{user}"
        path.write_text(kubeconfig_yaml(self.server, user, TEST_USERS[user]))
        return path

    @classmethod
    def start(cls, workdir: Path | None = None, detach: bool = False) -> LocalCluster:
        bindir = ensure_binaries()
        owned = workdir is None
        wd = Path(workdir or tempfile.mkdtemp(prefix="statusvault-cluster-"))
        wd.mkdir(parents=True, exist_ok=True)
        for attempt in range(3):  # a port taken between choosing and binding: try again with new ones
            cluster = cls(wd, _owned_workdir=owned)
            try:
                cluster._start(bindir, detach)
                return cluster
            except BaseException as e:
                cluster.stop(keep_workdir=True)
                if attempt == 2 or "address already in use" not in str(e):
                    if owned:
                        shutil.rmtree(wd, ignore_errors=True)
                    raise
                for child in ("etcd", "certs"):
                    shutil.rmtree(wd / child, ignore_errors=True)
        raise AssertionError("unreachable")

    def _spawn(self, name: str, argv: list[str], detach: bool) -> None:
        log = open(self.workdir / f"{name}.log", "wb")  # noqa: SIM115 - the child owns it
        proc = subprocess.Popen(
            argv, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=detach
        )
        log.close()
        self.pids[name] = proc.pid

    def _start(self, bindir: Path, detach: bool) -> None:
        wd = self.workdir
        self.port, etcd_port, peer_port = _free_ports(3)
        self._spawn(
            "etcd",
            [
                shutil.which("etcd") or "etcd",
                "--data-dir",
                str(wd / "etcd"),
                "--listen-client-urls",
                f"http://127.0.0.1:{etcd_port}",
                "--advertise-client-urls",
                f"http://127.0.0.1:{etcd_port}",
                "--listen-peer-urls",
                f"http://127.0.0.1:{peer_port}",
                "--initial-advertise-peer-urls",
                f"http://127.0.0.1:{peer_port}",
                "--initial-cluster",
                f"default=http://127.0.0.1:{peer_port}",
                "--quota-backend-bytes=8589934592",  # room for the 100k-object benchmark
            ],
            detach,
        )
        subprocess.run(["openssl", "genrsa", "-out", str(wd / "sa.key"), "2048"], check=True, capture_output=True)
        ca_cert, _ = issue_cert("/CN=statusvault-test-client-ca", *self.client_ca)
        lines = [f'{ADMIN_TOKEN},admin,admin,"system:masters"']
        lines += [f"{token},{user},{user}" for user, token in TEST_USERS.items()]
        lines += [f'{token},{ROTATING_USER},{ROTATING_USER},"system:masters"' for token in ROTATING_TOKENS]
        (wd / "tokens.csv").write_text("\n".join(lines) + "\n")
        self._spawn(
            "kube-apiserver",
            [
                str(bindir / "kube-apiserver"),
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
            ],
            detach,
        )
        self.kubeconfig.write_text(kubeconfig_yaml(self.server, "admin", ADMIN_TOKEN))
        self._wait_ready()
        self._spawn(
            "kube-controller-manager",
            [
                str(bindir / "kube-controller-manager"),
                f"--kubeconfig={self.kubeconfig}",
                "--leader-elect=false",
                # no serviceaccount-token: no token Secrets, as on Kubernetes 1.24+ (tests use TokenRequest)
                "--controllers=namespace,garbagecollector,deployment,replicaset",
                "--bind-address=127.0.0.1",
                "--secure-port=0",
                "--port=0",
            ],
            detach,
        )
        (wd / "cluster.json").write_text(json.dumps({"port": self.port, "pids": self.pids}))

    def _wait_ready(self, timeout: float = 90.0) -> None:
        ctx = ssl.create_default_context()
        ctx.check_hostname = False
        ctx.verify_mode = ssl.CERT_NONE
        deadline = time.monotonic() + timeout
        last = ""
        while time.monotonic() < deadline:
            for name, pid in self.pids.items():
                if not _alive(pid):
                    tail = (self.workdir / f"{name}.log").read_text(errors="replace")[-2000:]
                    raise RuntimeError(f"{name} exited during start-up:\n{tail}")
            req = urllib.request.Request(f"{self.server}/readyz", headers={"Authorization": f"Bearer {ADMIN_TOKEN}"})
            try:
                with urllib.request.urlopen(req, context=ctx, timeout=5) as resp:
                    if resp.status == 200:
                        return
            except OSError as e:
                last = str(e)
            time.sleep(0.3)
        raise RuntimeError(f"kube-apiserver not ready after {timeout:.0f}s: {last}")

    def stop(self, keep_workdir: bool = False) -> None:
        for name in ("kube-controller-manager", "kube-apiserver", "etcd"):
            pid = self.pids.pop(name, None)
            if pid is not None:
                _terminate(pid)
        if self._owned_workdir and not keep_workdir:
            shutil.rmtree(self.workdir, ignore_errors=True)

    def __enter__(self) -> LocalCluster:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


def _alive(pid: int) -> bool:
    try:
        waited, _ = os.waitpid(pid, os.WNOHANG)
    except ChildProcessError:
        waited = 0
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return False
    return waited == 0


def _terminate(pid: int, grace: float = 10.0) -> None:
    try:
        os.kill(pid, signal.SIGTERM)
    except ProcessLookupError:
        return
    deadline = time.monotonic() + grace
    while time.monotonic() < deadline and _alive(pid):
        time.sleep(0.1)
    if _alive(pid):
        os.kill(pid, signal.SIGKILL)
    with contextlib.suppress(ChildProcessError):
        os.waitpid(pid, 0)


def _state_dir(arg: str | None) -> Path:
    return Path(arg or cache_dir() / "cluster")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m statusvault.testing.cluster")
    parser.add_argument("command", choices=["up", "down", "run", "build"])
    parser.add_argument("--state-dir", help="where the cluster keeps its data (default: cache dir)")
    args = parser.parse_args(argv)
    state = _state_dir(args.state_dir)
    if args.command == "build":
        print(ensure_binaries())
        return 0
    if args.command == "down":
        info = state / "cluster.json"
        if not info.exists():
            print("no local cluster is running", file=sys.stderr)
            return 0
        pids = json.loads(info.read_text())["pids"]
        for name in ("kube-controller-manager", "kube-apiserver", "etcd"):
            if name in pids:
                _terminate(pids[name])
        shutil.rmtree(state, ignore_errors=True)
        print("local cluster stopped")
        return 0
    if (state / "cluster.json").exists():
        print(f"a local cluster is already running; run 'down' first ({state})", file=sys.stderr)
        return 1
    shutil.rmtree(state, ignore_errors=True)
    cluster = LocalCluster.start(state, detach=args.command == "up")
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
