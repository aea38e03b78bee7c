"""Keeping operators quiet: pause markers, scaling controllers down, fencing found from RBAC, unpausing."""
