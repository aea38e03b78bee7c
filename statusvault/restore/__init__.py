"""The restore engine: plan (a value), then execute in waves with per-object results."""
