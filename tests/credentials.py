"""Builders for credential tests: an exec plugin that counts its runs, a kubeconfig for any user entry."""

from __future__ import annotations

import json
import stat
import sys
import time
from pathlib import Path
from typing import Any

import yaml

PLUGIN = """#!{python}
import datetime as dt, json, sys
from pathlib import Path

runs, statuses, lifetime = Path(sys.argv[1]), json.loads(Path(sys.argv[2]).read_text()), float(sys.argv[3])
n = len(runs.read_text().splitlines()) if runs.exists() else 0
status, issued = dict(statuses[min(n, len(statuses) - 1)]), dt.datetime.now(dt.timezone.utc)
if lifetime:
    status["expirationTimestamp"] = (issued + dt.timedelta(seconds=lifetime)).isoformat()
with runs.open("a") as f:
    f.write(f"{{issued.timestamp()}} {{lifetime}}\\n")
print(json.dumps({{"apiVersion": "client.authentication.k8s.io/v1", "kind": "ExecCredential", "status": status}}))
"""


class Plugin:
    """An exec plugin whose n-th run prints the n-th status (the last one from then on), valid for `lifetime` s."""

    def __init__(self, directory: Path, *statuses: dict[str, Any], lifetime: float = 0):
        directory.mkdir(parents=True, exist_ok=True)
        self.runs_file = directory / "runs"
        (directory / "statuses.json").write_text(json.dumps(statuses))
        self.script = directory / "plugin.py"
        self.script.write_text(PLUGIN.format(python=sys.executable))
        self.script.chmod(self.script.stat().st_mode | stat.S_IEXEC)
        self.args = [str(self.runs_file), str(directory / "statuses.json"), str(lifetime)]

    @property
    def runs(self) -> int:
        return len(self.runs_file.read_text().splitlines()) if self.runs_file.exists() else 0

    def wait_until_half_life(self) -> None:
        """Return once half the lifetime of the credential last issued has passed: a client renews it from then."""
        issued, lifetime = map(float, self.runs_file.read_text().splitlines()[-1].split())
        time.sleep(max(0.0, issued + lifetime / 2 - time.time()) + 0.05)

    def spec(self) -> dict[str, Any]:
        return {"apiVersion": "client.authentication.k8s.io/v1", "command": str(self.script), "args": self.args}


def tokens(*values: str) -> list[dict[str, Any]]:
    return [{"token": v} for v in values]


def kubeconfig(path: Path, server: str, user: dict[str, Any], insecure: bool = True) -> Path:
    """A one-context kubeconfig whose user entry is `user` (token, tokenFile, exec, ...)."""
    cluster: dict[str, Any] = {"server": server, "insecure-skip-tls-verify": insecure}
    path.write_text(
        yaml.safe_dump(
            {
                "apiVersion": "v1",
                "kind": "Config",
                "current-context": "c",
                "clusters": [{"name": "c", "cluster": cluster}],
                "users": [{"name": "u", "user": user}],
                "contexts": [{"name": "c", "context": {"cluster": "c", "user": "u"}}],
            }
        )
    )
    return path
