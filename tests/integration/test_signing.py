"""Signed backups against a store writer, on the real API server (docs/security.md): with a verification key, a
restore takes only backups the signing key's holder wrote. A backup planted by whoever can write the store (with its
digests recomputed), a signed backup changed after signing, one stripped of its signature, one copied under another
name and one signed by another key are each refused with one line before anything is written. Each fails without
archive/signing.py: the restore wrote the planted or changed objects and exited 0."""

from __future__ import annotations

import json
import shutil

import orjson
import pytest

from statusvault.archive import signing
from statusvault.errors import ExitStatus
from statusvault.vocabulary.kinds import NAMESPACES
from tests.builders import cr, kc_status, unique
from tests.hostile import Backup
from tests.integration.crs.servers import wait_gone
from tests.integration.test_trust import none_written, plant_smuggled

pytestmark = pytest.mark.version_sensitive(
    "the attack suite runs on both servers: a refusal must come before the first write on each"
)
KC = "xyz.example.com/v1"


@pytest.fixture
def signing_key(tmp_path):
    pub, _ = signing.generate(tmp_path / "signing.pem")
    return str(tmp_path / "signing.pem"), str(pub)


@pytest.fixture
def signed(run, kube, crds, make, namespace, signing_key):
    """Backup `good` of two KubernetesClusters with status, signed; the objects deleted since."""
    kc = crds.resolve("kc")
    for i in range(2):
        make(cr(KC, "KubernetesCluster", f"k-{i}", spec={"region": "eu"}, status=kc_status(i)), namespace)
    made = run("backup", "good", "-n", namespace, "--no-include-crds", "--signing-key-file", signing_key[0])
    assert made.code == 0, made.err
    for i in range(2):
        kube.delete(kc, namespace, f"k-{i}")
        wait_gone(kube, kc, namespace, f"k-{i}")
    return kc


def folder(run, name: str):
    return run.storage / "backups" / name


def manifest(run, name: str) -> dict:
    return orjson.loads((folder(run, name) / "manifest.json").read_bytes())


def write_manifest(run, name: str, m: dict) -> None:
    (folder(run, name) / "manifest.json").write_bytes(orjson.dumps(m, option=orjson.OPT_INDENT_2))


def test_a_signed_backup_restores_with_its_public_key_and_describe_and_verify_name_the_key(
    run, kube, signed, namespace, signing_key
):
    key_id = manifest(run, "good")["signature"]["keyId"]

    restored = run("restore", "good", "--verify-key-file", signing_key[1])

    assert restored.code == 0, restored.err
    assert [kube.get(signed, namespace, f"k-{i}")["status"] for i in range(2)] == [kc_status(0), kc_status(1)]
    described = run("describe", "good")
    assert f"Signed:     by key {key_id} (Ed25519" in described.out
    verified = run("verify", "good", "--verify-key-file", signing_key[1], "-o", "json")
    assert verified.code == 0 and json.loads(verified.out)["signedBy"] == key_id, verified.err


def tampered(run, how: str, namespace: str, tmp_path) -> str:
    """Backup `good` as a store writer leaves it; returns the name to restore."""
    m = manifest(run, "good")
    if how == "stripped":  # a downgrade: the same backup, no signature
        write_manifest(run, "good", {k: v for k, v in m.items() if k != "signature"})
    elif how == "archive-replaced":  # the writer's own archive, digests recomputed, the signature kept
        evil = Backup.base("good", namespace)
        evil.head["selection"] = m["selection"]
        planted = evil.planted()
        (folder(run, "good") / "archive.tar.gz").write_bytes(planted.archive)
        write_manifest(run, "good", {**m, "archive": planted.summary["archive"]})
    elif how == "copied":  # a replay: the whole signed backup under another name
        shutil.copytree(folder(run, "good"), folder(run, "copy"))
        return "copy"
    elif how == "other-key":  # signed, by the writer's own key
        signing.generate(tmp_path / "mallory.pem")
        mallory = signing.FileSigner.from_file(tmp_path / "mallory.pem")
        body = {k: v for k, v in m.items() if k != "signature"}
        write_manifest(run, "good", {**body, "signature": signing.sign(body, signing.BACKUP, mallory)})
    return "good"


@pytest.mark.parametrize(
    ("how", "says"),
    [
        ("stripped", "backup 'good' is not signed, and a verification key was given"),
        ("archive-replaced", "the signature of backup 'good' does not verify with key"),
        ("copied", "backup 'copy' is a copy of backup 'good', signed under that name: refusing it"),
        ("other-key", "backup 'good' is signed by key"),
    ],
)
def test_a_signed_backup_changed_by_a_store_writer_is_refused_before_any_write(
    run, kube, signed, namespace, signing_key, tmp_path, how, says
):
    name = tampered(run, how, namespace, tmp_path)

    refused = run("restore", name, "--verify-key-file", signing_key[1])

    assert refused.code == ExitStatus.ERROR, refused.out + refused.err
    assert refused.err.startswith(f"error: {says}") and len(refused.err.strip().splitlines()) == 1, refused.err
    assert [kube.get(signed, namespace, f"k-{i}") for i in range(2)] == [None, None], "nothing written"
    for objects in ("prod", "dev"):
        assert kube.get(signed, namespace, objects) is None
    checked = run("verify", name, "--verify-key-file", signing_key[1])
    assert checked.code != 0 and says in checked.out + checked.err


def test_a_planted_backup_is_refused_with_the_key_set_for_every_restore(run, kube, crds, signing_key, monkeypatch,
                                                                         cleanup):  # fmt: skip
    """STATUSVAULT_VERIFY_KEY_FILE, as a platform sets it for every restore: the planted cluster-admin binding,
    webhook, Secret and hostPath Pod are refused with the rest, even when named and allowed."""
    ns, tag = unique("sign"), unique("evil")
    types = plant_smuggled(run.storage, kube, "planted", ns, tag)
    cleanup(types["clusterrolebindings.rbac.authorization.k8s.io"], f"{tag}-admin")
    cleanup(types["mutatingwebhookconfigurations.admissionregistration.k8s.io"], f"{tag}-hook")
    monkeypatch.setenv("STATUSVAULT_VERIFY_KEY_FILE", signing_key[1])

    refused = run("restore", "planted", "--include-resources", "*", "--allow-privileged-resources", "*")

    assert refused.code == ExitStatus.ERROR, refused.out + refused.err
    assert refused.err.startswith("error: backup 'planted' is not signed, and a verification key was given")
    assert kube.get(NAMESPACES, None, ns) is None, "nothing written"
    assert none_written(kube, types, ns, tag) == dict.fromkeys(("binding", "webhook", "secret", "pod"), True)


def test_an_encrypted_backup_opened_by_its_key_needs_no_signature(run, kube, crds, make, namespace, signing_key,
                                                                  tmp_path):  # fmt: skip
    """A key given that opens the backup authenticates it (its wrapped data key is bound to its name and archive)."""
    kc = crds.resolve("kc")
    make(cr(KC, "KubernetesCluster", "k-0", spec={"region": "eu"}, status=kc_status(0)), namespace)
    key = tmp_path / "data.key"
    key.write_text("a2V5LWtleS1rZXkta2V5LWtleS1rZXkta2V5LWtleSE=")
    made = run("backup", "sealed", "-n", namespace, "--no-include-crds", "--encryption-key-file", str(key))
    assert made.code == 0, made.err
    kube.delete(kc, namespace, "k-0")
    wait_gone(kube, kc, namespace, "k-0")

    restored = run("restore", "sealed", "--encryption-key-file", str(key), "--verify-key-file", signing_key[1])

    assert restored.code == 0, restored.err
    assert kube.get(kc, namespace, "k-0")["status"] == kc_status(0)
