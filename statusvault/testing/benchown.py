"""The restore's own CPU per object, without the server's share: `python -m statusvault.testing.benchown ARGS` runs
`statusvault ARGS` with every create (POST) and replace (PUT) of a custom resource answered in this process, as the
API server would answer it (the body with a uid, a resourceVersion, a creationTimestamp and a generation; a replace
returns what was sent). Everything else (discovery, namespaces, the existence LISTs) still goes to the server; the
audit that reads the cluster back is left out (the objects are not there). Worker processes (the default options)
answer their writes the same way: each imports this module again when it is spawned.

A real restore's CPU per object moves by 10 % from one run to the next on a machine the API server shares (its load,
its growing etcd, the scheduler); this figure moves by about 1 %, so a change to the restore's own code (planning,
the archive walk, the writers' bookkeeping, the report) can be measured by it where a real run cannot tell."""

from __future__ import annotations

import itertools
import re
import runpy
import sys

from statusvault.kube import http

# a custom resource's collection, object or status: a group with a dot that is not Kubernetes' own (*.k8s.io)
_CUSTOM_WRITE = re.compile(
    r"^/apis/(?![^/]*\.k8s\.io/)[^/]+\.[^/]+/[^/]+/(namespaces/[^/]+/)?[^/?]+(/[^/?]+(/status)?)?(\?|$)"
)
_STAMP = b'"uid":"in-process-%d","resourceVersion":"%d","generation":1,"creationTimestamp":"2026-01-01T00:00:00Z",'


def answer_writes_in_process() -> None:
    """Patch the HTTP pool: custom resources' creates and replaces never leave the process."""
    real = http.HttpPool.request
    counter = itertools.count(1)

    def request(
        self: http.HttpPool, method: str, target: str, headers: dict[str, str], body: bytes | None
    ) -> http.Response:
        if method not in ("POST", "PUT") or body is None or not _CUSTOM_WRITE.match(target):
            return real(self, method, target, headers, body)
        if method == "PUT":
            return http.Response(200, b"Content-Type: application/json\r\n", body)
        at = body.index(b'"metadata":{') + len(b'"metadata":{')
        n = next(counter)
        return http.Response(201, b"Content-Type: application/json\r\n", body[:at] + _STAMP % (n, n) + body[at:])

    http.HttpPool.request = request  # type: ignore[method-assign]


def own_work(
    env: dict[str, str], n: int, namespaces: int, parallel: int, processes: int | None = 1
) -> dict[str, float]:
    """The benchmark backup (bench-dir-1) restored into fresh namespaces with its writes answered in-process, with
    `parallel` writer threads in `processes` processes (None: the default) and no settle LIST (its objects are not on
    the server)."""
    from statusvault.testing.benchcore import cli_figures, run_measured

    prefix = f"own{parallel}-{next(_RUNS)}"
    mapping = ",".join(f"bench-{k}:{prefix}-{k}" for k in range(namespaces))
    args = ["restore", "bench-dir-1", "--namespace-mapping", mapping, "--parallel", str(parallel)]
    args += ["--processes", str(processes)] if processes is not None else []
    run = run_measured([sys.executable, "-m", __name__, *args, "--settle-seconds", "0", "-o", "json"], env)
    return cli_figures(run, n + namespaces)


_RUNS = itertools.count()


def main() -> None:
    answer_writes_in_process()
    # its objects never reach the server, so reading the cluster back would find every one missing: the audit is left
    # out here (its own cost is in the real restores' rows: the report's audit figures, `make bench`'s "its audit")
    from statusvault.restore import runner
    from statusvault.restore.results.audit import Audit

    runner.audit = lambda client, served, plan, journal, strict=False: Audit()  # type: ignore[attr-defined]
    sys.argv = ["statusvault", *sys.argv[1:]]
    runpy.run_module("statusvault", run_name="__main__")  # as `python -m statusvault` runs


if __name__ == "__mp_main__":  # a spawned worker process of the restore
    answer_writes_in_process()

if __name__ == "__main__":
    main()
