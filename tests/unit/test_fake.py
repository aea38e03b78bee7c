"""The in-memory API server (tests/fake/) answers as the real one does where the engines' decisions depend on it:
LIST pages and their continue tokens, WATCH events and 410 Gone, DELETE preconditions, CRDs, faults."""

from __future__ import annotations

import orjson
import pytest

from statusvault.errors import KubeApiError, KubeConnectionError
from statusvault.kube.transport import METADATA_LIST, Request
from statusvault.vocabulary.kinds import CRDS
from tests.builders import cr, crd, resource_type
from tests.fake import FakeKube

KC = resource_type("xyz.example.com", "KubernetesCluster")


@pytest.fixture
def fake() -> FakeKube:
    kube = FakeKube()
    kube.put(CRDS, crd("xyz.example.com", "KubernetesCluster"))
    for ns, name in [("a", "x"), ("a-b", "x"), ("a", "y")]:
        body = cr("xyz.example.com/v1", "KubernetesCluster", name, labels={"tier": ns})
        kube.put(KC, {**body, "metadata": {**body["metadata"], "namespace": ns}})
    return kube


def page(fake: FakeKube, **params: str) -> dict:
    return fake.request_json(Request("GET", KC.path(), tuple(params.items())))


def test_a_list_is_in_etcd_key_order_paged_by_continue_tokens(fake):
    first = page(fake, limit="2")
    assert [f"{o['metadata']['namespace']}/{o['metadata']['name']}" for o in first["items"]] == ["a-b/x", "a/x"]
    assert first["metadata"]["remainingItemCount"] == 1
    second = page(fake, limit="2", **{"continue": first["metadata"]["continue"]})
    assert [o["metadata"]["name"] for o in second["items"]] == ["y"] and "continue" not in second["metadata"]
    assert second["metadata"]["resourceVersion"] == first["metadata"]["resourceVersion"]
    assert [o["metadata"]["name"] for o in page(fake, labelSelector="tier=a-b")["items"]] == ["x"]
    metadata_only = fake.request_json(Request("GET", KC.path("a"), accept=METADATA_LIST))["items"]
    assert [set(o) for o in metadata_only] == [{"kind", "metadata"}] * 2


def test_a_continue_token_from_before_a_compaction_is_410_expired(fake):
    token = page(fake, limit="1")["metadata"]["continue"]
    fake.compact()
    with pytest.raises(KubeApiError) as gone:
        page(fake, limit="1", **{"continue": token})
    assert (gone.value.code, gone.value.reason) == (410, "Expired") and "too old" in str(gone.value)


def test_a_watch_gives_the_changes_after_its_position_then_a_bookmark(fake):
    rv = page(fake)["metadata"]["resourceVersion"]
    fake.delete(KC, "a", "y")
    live = fake.get(KC, "a", "x")
    fake.replace(KC, "a", "x", {**live, "spec": {"n": 1}})
    events = [(e.type, e.object["metadata"].get("name")) for e in fake.watch(KC, "a", "", rv)]
    assert events == [("DELETED", "y"), ("MODIFIED", "x"), ("BOOKMARK", None)]
    fake.compact()
    with pytest.raises(KubeApiError) as gone:
        list(fake.watch(KC, None, "", rv))
    assert gone.value.code == 410
    fake.break_watch(KC, after=0)
    with pytest.raises(KubeConnectionError):
        list(fake.watch(KC, None, "", str(fake.log.revision)))


def test_a_delete_with_a_stale_uid_precondition_is_a_conflict(fake):
    body = orjson.dumps({"preconditions": {"uid": "not-its-uid"}})
    with pytest.raises(KubeApiError) as conflict:
        fake.request_json(Request("DELETE", KC.path("a", "x"), body=body))
    assert conflict.value.code == 409 and fake.get(KC, "a", "x") is not None


def test_deleting_a_crd_deletes_its_objects_and_its_resource_is_no_longer_served(fake):
    assert KC.qualified in {rt.qualified for rt in fake.discovery().preferred}
    fake.delete(CRDS, None, KC.qualified)
    with pytest.raises(KubeApiError) as gone:
        page(fake)
    assert gone.value.code == 404 and fake.get(KC, "a", "x") is None
    assert KC.qualified not in {rt.qualified for rt in fake.discovery().preferred}


def test_a_forbidden_fault_is_worded_as_the_server_words_it(fake):
    fake.fail("list", KC, 403)
    with pytest.raises(KubeApiError) as refused:
        page(fake)
    assert str(refused.value) == (
        "GET /apis/xyz.example.com/v1/kubernetesclusters: kubernetesclusters.xyz.example.com is forbidden: "
        'User "fake-user" cannot list resource "kubernetesclusters" in API group "xyz.example.com" at the cluster '
        "scope (403 Forbidden)"
    )
    assert page(fake)["items"], "once"
