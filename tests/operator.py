"""A small operator for the tests: it "provisions" (writes a new external ID into status, and logs it) every
object of its resource that it sees without `status.externalID`, unless the object is paused
(`crossplane.io/paused: "true"`) or its Deployment is scaled to 0 (as if its pod were gone). With --observes it also
does what every real operator does with an object it finds provisioned: it writes `status.observedGeneration`, a
status write built on the status it found.

python -m tests.operator KUBECONFIG QUALIFIED NAMESPACE LOGFILE [DEPLOYMENT_NS/NAME] [--observes]
"""

from __future__ import annotations

import contextlib
import itertools
import sys
import time
import uuid
from pathlib import Path

from statusvault.errors import KubeApiError
from statusvault.kube.client import KubeClient
from statusvault.kube.discovery import discover
from statusvault.kube.transport import load_transport

PAUSED = "crossplane.io/paused"


def running(kube: KubeClient, deployment: str) -> bool:
    if not deployment:
        return True
    ns, name = deployment.split("/")
    scale = kube.get_path(f"/apis/apps/v1/namespaces/{ns}/deployments/{name}/scale")
    return int((scale.get("spec") or {}).get("replicas") or 0) > 0


def reconcile(kube: KubeClient, rt, namespace: str, log: Path, observes: bool = False) -> None:
    for page in kube.list_pages(rt, namespace):
        for obj in page:
            meta = obj["metadata"]
            if (meta.get("annotations") or {}).get(PAUSED) == "true":
                continue
            if (obj.get("status") or {}).get("externalID"):
                if observes and obj["status"].get("observedGeneration") != meta.get("generation"):
                    obj["status"] = {**obj["status"], "observedGeneration": meta.get("generation")}
                    with contextlib.suppress(KubeApiError):  # changed under us: look again next pass
                        kube.replace(rt, namespace, meta["name"], obj, sub="status", manager="test-operator")
                continue
            new_id = f"dup-{uuid.uuid4().hex[:8]}"
            obj["status"] = {**(obj.get("status") or {}), "externalID": new_id}
            try:
                kube.replace(rt, namespace, meta["name"], obj, sub="status", manager="test-operator")
            except KubeApiError:
                continue  # changed under us: look again next pass
            with log.open("a") as f:
                f.write(f"{meta['name']} {new_id}\n")


def main(argv: list[str]) -> int:
    observes = "--observes" in argv
    argv = [a for a in argv if a != "--observes"]
    kubeconfig, qualified, namespace, log = argv[:4]
    deployment = argv[4] if len(argv) > 4 else ""
    kube = KubeClient(load_transport(kubeconfig))
    Path(log).touch()
    rt = discover(kube).by_qualified(qualified)
    while rt is None:  # its CRD may come with the restore
        time.sleep(0.2)
        rt = discover(kube).by_qualified(qualified)
    passes = Path(f"{log}.passes")  # the count of finished passes, for tests to wait on
    for n in itertools.count(1):
        try:
            if running(kube, deployment):
                reconcile(kube, rt, namespace, Path(log), observes)
        except KubeApiError:
            pass  # a namespace being deleted and the like: the next pass sees
        passes.write_text(str(n))
        time.sleep(0.05)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
