"""Continuous backup: a watcher writes bases and chained segments; a point in time is rebuilt from them."""
