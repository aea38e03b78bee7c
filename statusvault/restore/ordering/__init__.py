"""Ordering: --order's groups and the gates between them."""
