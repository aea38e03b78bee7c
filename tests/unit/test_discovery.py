"""Discovery knows every type of every served version: a type its group's preferred version lacks is taken in the
first version that serves it (Velero's DataUploads exist only as velero.io/v2alpha1, the group preferring v1)."""

from __future__ import annotations

from typing import Any

from statusvault.kube.discovery import discover


def resource(name: str, kind: str) -> dict[str, Any]:
    return {"name": name, "kind": kind, "namespaced": True, "verbs": ["get", "list", "create", "update"],
            "singularName": kind.lower()}  # fmt: skip


VELERO = {
    "name": "velero.io",
    "preferredVersion": {"groupVersion": "velero.io/v1"},
    "versions": [
        {"groupVersion": "velero.io/v1", "version": "v1"},
        {"groupVersion": "velero.io/v2alpha1", "version": "v2alpha1"},
    ],
}
CRDS = [{"spec": {"group": "velero.io", "names": {"plural": p}}} for p in ("backups", "restores", "datauploads")]


class Server:
    paths = {
        "/api": {"versions": ["v1"]},
        "/api/v1": {"resources": [resource("configmaps", "ConfigMap")]},
        "/apis": {"groups": [VELERO]},
        "/apis/velero.io/v1": {"resources": [resource("backups", "Backup"), resource("restores", "Restore")]},
        "/apis/velero.io/v2alpha1": {
            "resources": [resource("datauploads", "DataUpload"), resource("backups", "Backup")]
        },
        "/apis/apiextensions.k8s.io/v1/customresourcedefinitions": {"items": CRDS},
    }

    def get_path(self, path: str) -> Any:
        return self.paths[path]


def test_a_type_only_another_version_serves_is_known_in_that_version():
    found = discover(Server())  # type: ignore[arg-type]
    uploads = found.resolve("datauploads.velero.io")
    assert (uploads.version, uploads.custom) == ("v2alpha1", True)
    assert found.resolve("backups.velero.io").version == "v1", "the preferred version where it serves the type"
    assert sorted(rt.qualified for rt in found.custom()) == ["backups.velero.io", "datauploads.velero.io",
                                                              "restores.velero.io"]  # fmt: skip
