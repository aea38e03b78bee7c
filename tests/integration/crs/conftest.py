"""The custom-resource tests run on two API servers, as a test parameter (`[1.20]`, `[1.36]`):

- 1.20: kube-apiserver 1.20.2 + etcd, the whole Kubernetes API (tests/conftest.py `cluster`);
- 1.36: the standalone CRD server of Kubernetes 1.36 (apiextensions-apiserver + etcd 3.5, `apiext`): CRDs and
  custom resources with current semantics (CEL rules, defaulting, managedFields, field validation), but no core API:
  no Namespaces (a namespaced object can be created in any namespace name), RBAC, Services or Deployments.

A test that needs the core API says so with `@pytest.mark.core_api("why")`; one that exercises the store rather than
the server with `@pytest.mark.store_only("why")`. Both run on 1.20 only. One about what only a current server does
(CEL rules) says `@pytest.mark.current_only("why")` and runs on 1.36 only. The markers are registered in
pyproject.toml.

The fixtures that hold a server or a client (`cluster`, `kube`, `crds`, `namespace`) are overridden here, so that no
cached session value of one server reaches a test of the other (tests/conftest.py's function-scoped fixtures,
`run`, `make`, `proxied`, use these)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from statusvault.kinds import NAMESPACES
from statusvault.kube.client import KubeClient
from statusvault.kube.discovery import Discovery
from statusvault.kube.transport import load_transport
from statusvault.testing.fixtures import ensure_namespace, fixture_crds, install_crds
from tests.builders import unique

SERVERS = ("1.20", "1.36")
GIT_VERSIONS = {"1.20": "v1.20.2", "1.36": "v1.36.4"}  # what each server says it is
ONE_SERVER_MARKS = ("core_api", "store_only")


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    if "kube_version" not in metafunc.fixturenames:
        return
    servers = SERVERS
    if any(metafunc.definition.get_closest_marker(m) for m in ONE_SERVER_MARKS):
        servers = SERVERS[:1]
    elif metafunc.definition.get_closest_marker("current_only"):
        servers = SERVERS[1:]
    metafunc.parametrize("kube_version", servers, indirect=True, scope="session")


@pytest.fixture(scope="session")
def kube_version(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture(scope="session")
def cluster(request: pytest.FixtureRequest, kube_version: str) -> Any:
    """The server of this parameter: a LocalCluster (1.20) or an ApiextServer (1.36); both have `server`,
    `kubeconfig`."""
    return request.getfixturevalue("apiext" if kube_version == "1.36" else "cluster_120")


@pytest.fixture(scope="session")
def kube(cluster: Any, kube_version: str) -> KubeClient:
    return KubeClient(load_transport(str(cluster.kubeconfig)))


@pytest.fixture(scope="session")
def crds(kube: KubeClient) -> Discovery:
    return install_crds(kube, fixture_crds())


@pytest.fixture
def git_version(kube_version: str) -> str:
    return GIT_VERSIONS[kube_version]


@pytest.fixture
def core_api(kube_version: str) -> bool:
    """Whether this server serves Namespaces and the rest of the core API."""
    return kube_version != "1.36"


@pytest.fixture
def namespace(kube: KubeClient, core_api: bool) -> Iterator[str]:
    """A fresh namespace; on a server without Namespaces, a fresh name (objects may be created in any)."""
    name = unique("t")
    if core_api:
        ensure_namespace(kube, name)
    yield name
    if core_api:
        kube.delete(NAMESPACES, None, name)
