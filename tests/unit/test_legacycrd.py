"""apiextensions.k8s.io/v1beta1 CRDs written as v1, field by field as the API server converts them."""

from __future__ import annotations

from statusvault.velero.legacycrd import as_v1, is_v1beta1


def old(**spec) -> dict:
    base = {"group": "g.io", "scope": "Namespaced", "names": {"plural": "ws", "singular": "w", "kind": "W"}}
    return {"apiVersion": "apiextensions.k8s.io/v1beta1", "kind": "CustomResourceDefinition",
            "metadata": {"name": "ws.g.io"}, "spec": {**base, **spec}}  # fmt: skip


SCHEMA = {"openAPIV3Schema": {"type": "object", "properties": {"spec": {"type": "object"}}}}


def test_one_version_with_shared_schema_subresources_and_columns():
    age = {"name": "Age", "type": "date", "JSONPath": ".metadata.creationTimestamp"}
    crd = old(version="v1", validation=SCHEMA, subresources={"status": {}}, additionalPrinterColumns=[age])
    v1 = as_v1(crd)
    assert is_v1beta1(crd) and not is_v1beta1(v1) and v1["apiVersion"] == "apiextensions.k8s.io/v1"
    assert set(v1["spec"]) == {"group", "scope", "names", "versions"}, "nothing shared is left at the top"
    [version] = v1["spec"]["versions"]
    assert version["name"] == "v1" and version["served"] and version["storage"]
    assert version["subresources"] == {"status": {}}
    assert version["additionalPrinterColumns"] == [
        {"name": "Age", "type": "date", "jsonPath": ".metadata.creationTimestamp"}
    ]
    root = version["schema"]["openAPIV3Schema"]
    assert root["x-kubernetes-preserve-unknown-fields"] is True, "v1beta1 kept unknown fields unless told not to"
    assert root["properties"]["spec"] == {"type": "object", "x-kubernetes-preserve-unknown-fields": True}, (
        "every object in it: a v1 server prunes each object's unknown fields on its own"
    )
    assert crd["apiVersion"].endswith("v1beta1") and "validation" in crd["spec"], "the argument is not changed"


def test_pruning_asked_for_stays_pruning_and_a_version_keeps_what_it_has_of_its_own():
    own = {"openAPIV3Schema": {"type": "object", "properties": {"a": {"type": "string"}}}}
    crd = old(preserveUnknownFields=False, validation=SCHEMA, subresources={"status": {}},
              versions=[{"name": "v2", "served": True, "storage": True, "schema": own, "subresources": {}},
                        {"name": "v1", "served": True, "storage": False}])  # fmt: skip
    v2, v1 = as_v1(crd)["spec"]["versions"]
    assert v2["schema"] == own and v2["subresources"] == {}, "its own schema and subresources win"
    assert v1["schema"] == SCHEMA and v1["subresources"] == {"status": {}}, "the shared ones, where it has none"
    assert "preserveUnknownFields" not in as_v1(crd)["spec"]


def test_a_version_without_any_schema_keeps_every_field_as_an_object():
    [version] = as_v1(old(version="v1alpha1"))["spec"]["versions"]
    assert version["schema"] == {"openAPIV3Schema": {"type": "object", "x-kubernetes-preserve-unknown-fields": True}}, (
        "v1 requires a schema for every version"
    )


def test_a_conversion_webhook_moves_under_webhook_with_its_review_versions():
    config = {"service": {"name": "conv", "namespace": "sys", "path": "/convert"}, "caBundle": "Zm9v"}
    crd = old(version="v1", conversion={"strategy": "Webhook", "webhookClientConfig": config})
    assert as_v1(crd)["spec"]["conversion"] == {
        "strategy": "Webhook",
        "webhook": {"clientConfig": config, "conversionReviewVersions": ["v1beta1"]},
    }
    none = as_v1(old(version="v1", conversion={"strategy": "None"}))
    assert none["spec"]["conversion"] == {"strategy": "None"}


def test_a_malformed_spec_is_converted_as_far_as_it_goes():
    assert as_v1({"apiVersion": "apiextensions.k8s.io/v1beta1", "kind": "CustomResourceDefinition"})["apiVersion"] == (
        "apiextensions.k8s.io/v1"
    )
    assert as_v1(old(versions="nonsense"))["spec"]["versions"] == [], "the server refuses it, and says why"


def test_a_v1_crd_without_a_schema_gets_one_keeping_every_field_and_loses_the_top_level_setting():
    from statusvault.velero.legacycrd import as_v1, refused_shape

    typed = {"openAPIV3Schema": {"type": "object", "properties": {"spec": {"type": "object"}}}}
    versions = [{"name": "v1", "served": True, "storage": True, "subresources": {"status": {}}},
                {"name": "v2", "served": True, "storage": False, "schema": typed}]  # fmt: skip
    crd = {"apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition", "metadata": {"name": "a.b"},
           "spec": {"group": "b", "preserveUnknownFields": True, "names": {"plural": "a", "kind": "A"},
                    "versions": versions}}  # fmt: skip
    assert refused_shape(crd)
    out = as_v1(crd)
    assert "preserveUnknownFields" not in out["spec"] and crd["spec"]["preserveUnknownFields"] is True, "a copy"
    v1, v2 = out["spec"]["versions"]
    assert v1["schema"]["openAPIV3Schema"] == {"type": "object", "x-kubernetes-preserve-unknown-fields": True}
    assert v1["subresources"] == {"status": {}}
    spec = v2["schema"]["openAPIV3Schema"]["properties"]["spec"]
    assert spec["x-kubernetes-preserve-unknown-fields"] is True, "kept unknown fields at every level, as before"
    assert not refused_shape(out)
    current = {**out, "spec": {**out["spec"], "versions": [v2]}}
    assert not refused_shape(current), "a CRD a current server accepts is left alone"
