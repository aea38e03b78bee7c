"""Kubernetes vocabulary statusvault names directly: the built-in resource types, label selectors."""
