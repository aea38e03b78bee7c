"""Log setup shared by the CLI and its worker processes: plain `LEVEL message` lines or JSON, on stderr."""

from __future__ import annotations

import datetime as dt
import json
import logging
import sys

from statusvault import rfc3339


class JsonFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        entry = {
            "time": rfc3339.format_micro(dt.datetime.fromtimestamp(record.created, dt.UTC)),  # UTC, zoned
            "level": record.levelname.lower(),
            "logger": record.name,
            "msg": record.getMessage(),
        }
        if record.exc_info:
            entry["exc"] = self.formatException(record.exc_info)
        return json.dumps(entry)


def setup_logging(log_format: str, debug: bool) -> None:
    handler = logging.StreamHandler(sys.stderr)
    if log_format == "json":
        handler.setFormatter(JsonFormatter())
    else:
        handler.setFormatter(logging.Formatter("%(levelname)s %(message)s"))
    root = logging.getLogger("statusvault")
    root.handlers[:] = [handler]
    root.setLevel(logging.DEBUG if debug else logging.INFO)
    root.propagate = False
