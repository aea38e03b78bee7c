"""How a run lives in its process: logging, progress, metrics, client-side throttling, stopping on a signal, and the
test kill points."""
