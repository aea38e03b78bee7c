"""The custom-resource tests run on each control plane (tests/conftest.py: `[1.20]`, `[1.36]`), and those with a
branch for a server without the core API (they take the `core_api` fixture) on a third server too:

- `[1.36-crd]`: the standalone CRD server of Kubernetes 1.36 (apiextensions-apiserver + etcd 3.5, `apiext`): CRDs
  and custom resources with current semantics, but no core API: no Namespaces (a namespaced object can be created
  in any namespace name), RBAC, Services or Deployments, and only a client certificate for its admin. What it
  alone covers is statusvault on such a server: discovery with an empty /api, backups and restores that find no
  Namespaces to save or create, `cluster-info` without the core API.

A test that needs the core API says so with `@pytest.mark.core_api("why")` (never on the CRD-only server); one that
exercises the store rather than the server with `@pytest.mark.store_only("why")` (1.20 only); one about what only a
current server does (CEL rules) with `@pytest.mark.current_only("why")` (1.36 only). The markers are registered in
pyproject.toml.

`namespace` is overridden here: on the CRD-only server a namespace is only a name."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from statusvault.kube.client import KubeClient
from statusvault.testing.cluster import RELEASES
from statusvault.testing.fixtures import ensure_namespace
from statusvault.vocabulary.kinds import NAMESPACES
from tests.builders import unique
from tests.conftest import CRD_ONLY

CRD_ONLY_VERSION = "v1.36.4"  # what the CRD-only server says it is (Debian unstable's source package)


@pytest.fixture
def git_version(kube_version: str) -> str:
    return CRD_ONLY_VERSION if kube_version == CRD_ONLY else RELEASES[kube_version].git_version


@pytest.fixture
def core_api(kube_version: str) -> bool:
    """Whether this server serves Namespaces and the rest of the core API."""
    return kube_version != CRD_ONLY


@pytest.fixture
def namespace(kube: KubeClient, kube_version: str) -> Iterator[str]:
    """A fresh namespace; on a server without Namespaces, a fresh name (objects may be created in any). It takes
    no `core_api`: that would bring every test that has a namespace to the CRD-only server."""
    name = unique("t")
    if kube_version != CRD_ONLY:
        ensure_namespace(kube, name)
    yield name
    if kube_version != CRD_ONLY:
        kube.delete(NAMESPACES, None, name)
