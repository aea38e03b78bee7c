"""Shared fixtures: a real kube-apiserver + etcd (session), a moto S3 server (session), per-test namespaces.

Where each integration test runs is a decision every module states (docs/development/testing.md;
tests/unit/test_suite.py holds every module to it), as a session-scoped parameter `kube_version` (test ids `[1.20]`,
`[1.36]`):

- `version_neutral(why)`: on Kubernetes 1.36 (with etcd 3.6), the version users run: what it tests does not differ
  by server.
- `version_sensitive(why)`: on 1.36 and on Kubernetes 1.20.2 (etcd 3.4), where what it tests differs by version;
  the custom-resource tests of tests/integration/crs/ that have a branch for a server without the core API also
  run on the 1.36 CRD-only server (`[1.36-crd]`, its conftest).
- Per test, `store_only` runs on 1.20 alone, `current_only` on 1.36 alone, `core_api` never on the CRD-only server.

`make test-all` (STATUSVAULT_TEST_ALL=1) runs every integration test on both control planes, as before the split.
Under pytest-xdist (`make test`) each worker starts the servers it needs (its own, so no two tests share a server
across workers); the tests of a module that starts a second control plane (`target`) stay on one worker."""

from __future__ import annotations

import faulthandler
import os
import signal
import subprocess
import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import boto3
import pytest

from statusvault.cli.main import main
from statusvault.kube.client import KubeClient
from statusvault.kube.discovery import Discovery, discover
from statusvault.kube.transport import load_transport
from statusvault.testing.apiext import ApiextServer
from statusvault.testing.cluster import ADMIN_TOKEN, RELEASES, LocalCluster, kubeconfig_yaml
from statusvault.testing.controlplane import free_ports
from statusvault.testing.fixtures import create_with_status, ensure_namespace, fixture_crds, install_crds
from statusvault.vocabulary.kinds import NAMESPACES
from tests.builders import unique
from tests.faultproxy import S3_FAULTS, FaultProxy, s3_faults_on, s3_operation, self_signed


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Every test under tests/integration/ is marked `integration` (it needs a real server): `-m "not
    integration"` selects the tests that need none. Under `--dist loadgroup`, tests that share servers go to one
    worker (_worker_group). A `comparison` (how another tool or a restore without status does, for the docs'
    tables) runs only when asked for (STATUSVAULT_COMPARISONS=1: make operators-report, make test-all)."""
    root = Path(__file__).parent / "integration"
    if not (COMPARISONS or EVERY_VERSION):
        left_out = [item for item in items if item.get_closest_marker("comparison")]
        if left_out:
            config.hook.pytest_deselected(items=left_out)
            items[:] = [item for item in items if not item.get_closest_marker("comparison")]
    for item in items:
        if root in Path(str(item.path)).parents:
            item.add_marker(pytest.mark.integration)
        group = _worker_group(item)
        if group:
            item.add_marker(pytest.mark.xdist_group(group))


def _worker_group(item: pytest.Item) -> str:
    """The tests that must share a worker (its servers): those of 1.20, and of the CRD-only server, each on one
    worker (one such server started instead of one per worker: the suite is CPU-bound on 2 cores), those of
    a module that starts a second control plane (`target`), and those of a module that runs a real operator (its
    steady state, set up once per module, is minutes of work)."""
    version = item.callspec.params.get("kube_version", "") if hasattr(item, "callspec") else ""
    if version and version != CURRENT:
        return f"kube-{version}"
    if "target" in getattr(item, "fixturenames", ()):
        return f"{item.module.__name__}-{version}"
    if item.module.__name__.rpartition(".")[2].startswith("test_operator_"):  # one operator set-up per module
        return item.module.__name__
    return ""


def pytest_terminal_summary(terminalreporter: Any) -> None:
    """Where the time went: test time (set-up and teardown included) summed by server and by module, the
    slowest first, so a slow day or a slow new module shows in CI's output. Under xdist the sums exceed the
    wall time: workers run side by side."""
    by_server: dict[str, float] = {}
    by_module: dict[str, float] = {}
    for reports in terminalreporter.stats.values():
        for report in reports:
            if not isinstance(report, pytest.TestReport):
                continue
            module = report.nodeid.split("::", 1)[0]
            params = report.nodeid.rpartition("[")[2]
            server = next((v for v in (CRD_ONLY, *RELEASES) if v in params), "no server")
            if "tests/integration/" not in module:
                server = "unit"
            by_server[server] = by_server.get(server, 0.0) + report.duration
            by_module[module] = by_module.get(module, 0.0) + report.duration
    if not by_module:
        return
    write = terminalreporter.write_line
    write("test time by server: " + ", ".join(f"{k} {v / 60:.1f} min" for k, v in sorted(by_server.items())))
    write("slowest modules (test time, summed): ")
    for module, seconds in sorted(by_module.items(), key=lambda kv: -kv[1])[:15]:
        write(f"  {seconds:7.0f}s  {module}")


def pytest_unconfigure(config: pytest.Config) -> None:
    """A run that hangs after its last test (a thread that never ends, a lock taken twice) fails within a
    minute with every thread's stack, instead of running into CI's time limit without a word."""
    faulthandler.dump_traceback_later(60, exit=True)


# A shell that starts a command in the background without job control (`make test &`, `(pytest ...) &`) starts it
# with Ctrl-C ignored, and every process started under it inherits that: the CLI the tests interrupt
# (tests/integration/test_processes.py) would then run to its end. Ctrl-C is put back to its default here, so the CLI
# starts as from a terminal whichever way the suite was started.
if signal.getsignal(signal.SIGINT) == signal.SIG_IGN:
    signal.signal(signal.SIGINT, signal.default_int_handler)

# Restores in the suite do not wait before looking again at what they restored (restore/core/settle.py): the tests of
# that look (tests/integration/test_settle.py) ask for it with --settle-seconds. Subprocesses inherit it.
os.environ["STATUSVAULT_SETTLE_SECONDS"] = "0"
# Nor do they wait out an API server that stops answering (kube/transport.py): the fault tests' servers fail on purpose.
# tests/integration/test_restart.py restarts one for real and asks for the default wait; tests/unit/test_transport.py
# holds the rule.
os.environ["STATUSVAULT_SERVER_WAIT_SECONDS"] = "0"

CRD_ONLY = "1.36-crd"  # the apiextensions-apiserver 1.36 of tests/integration/crs/ (no core API)
CURRENT = "1.36"  # the version users run: every integration test runs on it
EVERY_VERSION = os.environ.get("STATUSVAULT_TEST_ALL") == "1"  # make test-all: every test on every control plane
COMPARISONS = os.environ.get("STATUSVAULT_COMPARISONS") == "1"  # make operators-report: the docs' comparison runs


def servers(metafunc: pytest.Metafunc) -> tuple[str, ...]:
    """The servers one test runs on (see the module's docstring)."""
    mark = metafunc.definition.get_closest_marker
    if mark("store_only"):
        return ("1.20",)
    if mark("current_only"):
        return (CURRENT,)
    if not (EVERY_VERSION or mark("version_sensitive")):
        return (CURRENT,)
    full = tuple(RELEASES)
    if "core_api" in metafunc.fixturenames and not mark("core_api"):  # it has a branch for a server without
        return (*full, CRD_ONLY)
    return full


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    if "kube_version" in metafunc.fixturenames:
        metafunc.parametrize("kube_version", servers(metafunc), indirect=True, scope="session")


@pytest.fixture(scope="session")
def kube_version(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture(scope="session")
def control_planes() -> Iterator[Callable[[str], LocalCluster]]:
    """control_planes(version): the session's control plane of that version, started when first asked for (all stay
    up: the CRD-only server's tests come in between). Never skipped: a missing cluster binary is a failure."""
    started: dict[str, LocalCluster] = {}

    def get(version: str) -> LocalCluster:
        if version not in started:
            started[version] = LocalCluster.start(version=version)
        return started[version]

    yield get
    for plane in started.values():
        plane.stop()


@pytest.fixture(scope="session")
def cluster(request: pytest.FixtureRequest, control_planes: Callable[[str], LocalCluster], kube_version: str) -> Any:
    """The server of this parameter: a LocalCluster, or on 1.36-crd an ApiextServer (with `server`, `kubeconfig`)."""
    return request.getfixturevalue("apiext") if kube_version == CRD_ONLY else control_planes(kube_version)


@pytest.fixture(scope="module")
def target(kube_version: str) -> Iterator[LocalCluster]:
    """A second control plane of the same version, for the tests of one module: the cluster a move goes to."""
    with LocalCluster.start(version=kube_version) as c:
        yield c


@pytest.fixture(scope="session")
def apiext() -> Iterator[ApiextServer]:
    """A Kubernetes 1.36 CRD server (apiextensions-apiserver + etcd; no core API), started when first asked for.
    Never skipped: a missing build is a failure."""
    with ApiextServer.start() as server:
        yield server


@pytest.fixture(scope="session")
def kube(cluster: LocalCluster) -> KubeClient:
    return KubeClient(load_transport(str(cluster.kubeconfig)))


@pytest.fixture(scope="session")
def crds(kube: KubeClient) -> Discovery:
    """The fixture CRDs, installed once; returns discovery that serves them."""
    return install_crds(kube, fixture_crds())


@pytest.fixture
def namespace(kube: KubeClient) -> Iterator[str]:
    name = unique("t")
    ensure_namespace(kube, name)
    yield name
    kube.delete(NAMESPACES, None, name)


@pytest.fixture
def make(kube: KubeClient, crds: Discovery) -> Callable[..., dict[str, Any]]:
    """Create an object with its status as an operator would leave it."""

    def _make(obj: dict[str, Any], namespace: str | None = None, discovery: Discovery | None = None) -> Any:
        return create_with_status(kube, discovery or crds, obj, namespace)

    return _make


@pytest.fixture
def grant(kube: KubeClient) -> Callable[[str, str, list[dict[str, Any]]], None]:
    """grant(namespace, user, rules): a Role with the rules in the namespace, bound to one of TEST_USERS."""

    def _grant(namespace: str, user: str, rules: list[dict[str, Any]]) -> None:
        rbac = "rbac.authorization.k8s.io/v1"
        role = {"apiVersion": rbac, "kind": "Role", "metadata": {"name": user}, "rules": rules}
        binding = {
            "apiVersion": rbac,
            "kind": "RoleBinding",
            "metadata": {"name": user},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": user},
            "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": user}],
        }
        d = discover(kube)
        kube.create(d.resolve("roles.rbac.authorization.k8s.io"), namespace, role)
        kube.create(d.resolve("rolebindings.rbac.authorization.k8s.io"), namespace, binding)

    return _grant


@pytest.fixture
def cleanup(kube: KubeClient) -> Iterator[Callable[[Any, str], None]]:
    """cleanup(rt, name): delete that cluster-scoped object after the test."""
    made: list[tuple[Any, str]] = []
    yield lambda rt, name: made.append((rt, name))
    for rt, name in reversed(made):
        kube.delete(rt, None, name)


@pytest.fixture
def fresh_discovery(kube: KubeClient) -> Callable[[], Discovery]:
    return lambda: discover(kube)


@dataclass
class CliResult:
    code: int
    out: str
    err: str


@pytest.fixture
def run(cluster: LocalCluster, capsys: pytest.CaptureFixture[str], tmp_path: Path) -> Callable[..., CliResult]:
    """Run the CLI in-process against the test cluster; storage defaults to a per-test directory."""
    storage = tmp_path / "store"

    env = {"STATUSVAULT_STORAGE": str(storage), "STATUSVAULT_STATE_DIR": str(tmp_path / "state")}

    def _run(*args: str, kubeconfig: Path | None = None) -> CliResult:
        capsys.readouterr()
        saved = {k: os.environ.get(k) for k in env}
        os.environ.update(env)
        try:
            code = main(["--kubeconfig", str(kubeconfig or cluster.kubeconfig), *args])
        finally:
            for k, v in saved.items():
                if v is None:
                    os.environ.pop(k, None)
                else:
                    os.environ[k] = v
        out, err = capsys.readouterr()
        return CliResult(int(code), out, err)

    def spawn(
        *args: str, kubeconfig: Path | None = None, stop: tuple[str, str, Path] | None = None
    ) -> subprocess.Popen[bytes]:
        """The CLI in a process of its own (to be killed or interrupted), with the same storage and state;
        stop=(key suffix, action, mark): it stops itself at that store write (tests/stopper.py)."""
        command = ["tests.stopper", *map(str, stop)] if stop else ["statusvault"]
        return subprocess.Popen(
            [sys.executable, "-m", *command, "--kubeconfig", str(kubeconfig or cluster.kubeconfig), *args],
            env={**os.environ, **env},
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
        )

    _run.storage = storage  # type: ignore[attr-defined]
    _run.state = tmp_path / "state"  # type: ignore[attr-defined]
    _run.spawn = spawn  # type: ignore[attr-defined]
    return _run


@pytest.fixture(scope="session")
def s3_endpoint() -> Iterator[str]:
    """A real HTTP S3 endpoint (moto's ThreadedMotoServer)."""
    from moto.server import ThreadedMotoServer

    os.environ.update(AWS_ACCESS_KEY_ID="testing", AWS_SECRET_ACCESS_KEY="testing", AWS_DEFAULT_REGION="us-east-1")
    os.environ.pop("AWS_PROFILE", None)
    (port,) = free_ports(1)
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=port, verbose=False)
    server.start()
    yield f"http://127.0.0.1:{port}"
    server.stop()


@pytest.fixture(scope="session")
def versitygw_endpoint() -> Iterator[str]:
    """A real S3-compatible server (versitygw, built from the Go module proxy once per machine), with the same
    credentials as moto's: `make s3-bin` builds it. Never skipped: a missing build is a failure."""
    from statusvault.testing.s3server import VersityServer

    os.environ.update(AWS_ACCESS_KEY_ID="testing", AWS_SECRET_ACCESS_KEY="testing", AWS_DEFAULT_REGION="us-east-1")
    os.environ.pop("AWS_PROFILE", None)
    with VersityServer.start("testing", "testing") as server:
        yield server.endpoint


@pytest.fixture(params=["moto", "versitygw"])
def s3_server(request: pytest.FixtureRequest) -> str:
    """Each S3 server the Object Lock tests run on: moto's, and versitygw."""
    return str(request.getfixturevalue("s3_endpoint" if request.param == "moto" else "versitygw_endpoint"))


@pytest.fixture
def bucket(s3_endpoint: str) -> str:
    name = unique("bkt")
    boto3.client("s3", endpoint_url=s3_endpoint, region_name="us-east-1").create_bucket(Bucket=name)
    return name


@pytest.fixture
def proxied(cluster, tmp_path) -> Iterator[Any]:
    """proxied(rate, faults=...) -> (proxy, kubeconfig) in front of the test cluster."""
    started: list[FaultProxy] = []

    client_cert = getattr(cluster, "admin_cert", None)  # the 1.36 CRD server knows its admin by certificate

    def _proxied(rate: float, **kw: Any) -> tuple[FaultProxy, Path]:
        proxy = FaultProxy(cluster.server, rate, certs=self_signed(tmp_path), client_cert=client_cert, **kw).start()
        started.append(proxy)
        path = tmp_path / f"kubeconfig-proxy-{len(started)}"
        path.write_text(kubeconfig_yaml(proxy.url, "admin", ADMIN_TOKEN))
        return proxy, path

    yield _proxied
    for p in started:
        p.stop()


@pytest.fixture
def s3_proxied(s3_endpoint: str) -> Iterator[Any]:
    """s3_proxied(rate, ops=(...), seed=..., faults=...) -> a FaultProxy in front of moto; pass its `url` as
    --s3-endpoint-url (path-style). Only the named S3 operations meet faults; `by_operation` counts them all."""
    started: list[FaultProxy] = []

    def _s3_proxied(rate: float, ops: tuple[str, ...], **kw: Any) -> FaultProxy:
        kw.setdefault("faults", S3_FAULTS)
        kw.setdefault("retry_after", "0")
        proxy = FaultProxy(
            s3_endpoint, rate, applies=s3_faults_on(*ops), dialect="s3", classify=s3_operation, **kw
        ).start()
        started.append(proxy)
        return proxy

    yield _s3_proxied
    for p in started:
        p.stop()
