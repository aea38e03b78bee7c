"""The Kubernetes adapter: the only package that talks to the API server."""

from statusvault.kube.client import KubeClient
from statusvault.kube.transport import KubeTransport, load_transport

__all__ = ["KubeClient", "KubeTransport", "load_transport"]
