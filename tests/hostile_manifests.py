"""Hostile archives, manifests and encryption: fields of both manifests, and the encryption header,
chunks and key. Each keeps every hash and both manifests consistent (tests/hostile.py)."""

from __future__ import annotations

import orjson

from tests.hostile import KEY, Backup, Planted, manifest_bytes, summary_of
from tests.hostile_cases import KCQ, Case, MiB, embedded, registrar, renamed

CASES: list[Case] = []
case = registrar(CASES)


# --- manifest fields ---


@case("is not supported by this statusvault")
def format_version_2(b: Backup) -> Planted:
    b.head["formatVersion"] = "2.0"
    return b.planted()


@case("is not supported by this statusvault")
def format_version_2_inside_only(b: Backup) -> Planted:
    head = {**b.head, "formatVersion": "2.0"}
    return embedded(b, manifest_bytes(head, b.files()))


@case("no valid formatVersion")
def format_version_missing(b: Backup) -> Planted:
    head = {k: v for k, v in b.head.items() if k != "formatVersion"}
    return embedded(b, manifest_bytes(head, b.files()))


@case("is malformed")
def resource_entry_malformed(b: Backup) -> Planted:
    b.head["resources"][KCQ]["namespaced"] = "yes"
    return embedded(b, manifest_bytes(b.head, b.files()))


@case("is malformed")
def short_names_not_a_list(b: Backup) -> Planted:
    b.head["resources"][KCQ]["shortNames"] = "kc"
    return b.planted()


@case("does not match its group/resource")
def resource_entry_under_another_name(b: Backup) -> Planted:
    b.head["resources"]["secrets"] = b.head["resources"].pop(KCQ)
    return embedded(b, manifest_bytes(b.head, b.files()))


@case("no resources map")
def resources_not_a_map(b: Backup) -> Planted:
    return embedded(b, manifest_bytes({**b.head, "resources": []}, b.files()))


@case("file list that is not an object")
def files_not_an_object(b: Backup) -> Planted:
    head = orjson.dumps(b.head, option=orjson.OPT_SORT_KEYS)[:-1]
    return embedded(b, head + b',"files":' + orjson.dumps([p for p, _ in b.files()]) + b"}")


@case("malformed file list")
def files_hash_not_hex(b: Backup) -> Planted:
    return embedded(b, manifest_bytes(b.head, [(p, h.upper()) for p, h in b.files()]))


@case("two file lists")
def files_twice(b: Backup) -> Planted:
    first = manifest_bytes(b.head, b.files())
    return embedded(b, first[:-1] + b',"files":{}}')


@case("is not a JSON object")
def manifest_not_json(b: Backup) -> Planted:
    return embedded(b, b"files: everything")


@case("larger than the limit")
def manifest_head_huge(b: Backup) -> Planted:
    return embedded(b, manifest_bytes({**b.head, "comment": "x" * (5 * MiB)}, b.files()))


@case("is not a count")
def totals_negative(b: Backup) -> Planted:
    b.head["totals"]["uncompressedBytes"] = -1
    return embedded(b, manifest_bytes(b.head, b.files()))


@case("is larger than the limit")
def summary_huge(b: Backup) -> Planted:
    planted = b.planted()
    planted.summary["padding"] = "x" * (5 * MiB)
    return planted


@case("no valid archive size and sha256")
def summary_without_archive(b: Backup) -> Planted:
    planted = b.planted()
    del planted.summary["archive"]
    return planted


@case("JSON values (the limit)")
def summary_values_bomb(b: Backup) -> Planted:
    planted = b.planted()
    planted.summary["padding"] = [{"a": 0}] * 400_000
    planted.compact = True
    return planted


# --- encryption: the side manifest names the corpus key; the CLI is given it ---


def sealed(b: Backup, ciphertext: bytes) -> Planted:
    return Planted(ciphertext, summary_of(b.head, ciphertext))


def chunks(b: Backup) -> tuple[bytes, list[bytes]]:
    stored = b.planted().archive
    head, body = stored[:15], stored[15:]
    return head, [body[i : i + 65552] for i in range(0, len(body), 65552)]


@case("no encryption header", encrypted=True)
def enc_header_cut(b: Backup) -> Planted:
    return sealed(b, b.planted().archive[:10])


@case("not an encrypted statusvault archive", encrypted=True)
def enc_other_version(b: Backup) -> Planted:
    return sealed(b, b"SVENC2\n" + b.planted().archive[7:])


@case("was encrypted with key", encrypted=True)
def enc_other_key_id(b: Backup) -> Planted:
    b.head["encryption"] = {**KEY.describe(), "keyId": "0123456789abcdef"}
    return b.planted()


@case("cannot decrypt", encrypted=True)
def enc_chunks_swapped(b: Backup) -> Planted:
    head, cs = chunks(b)
    return sealed(b, head + cs[1] + cs[0] + b"".join(cs[2:]))


@case("cannot decrypt", encrypted=True)
def enc_bit_flipped(b: Backup) -> Planted:
    stored = bytearray(b.planted().archive)
    stored[70_000] ^= 0x04
    return sealed(b, bytes(stored))


@case("cannot decrypt", encrypted=True)
def enc_last_chunk_dropped(b: Backup) -> Planted:
    head, cs = chunks(b)
    return sealed(b, head + b"".join(cs[:-1]))


@case("cannot decrypt", encrypted=True)
def enc_chunk_appended(b: Backup) -> Planted:
    head, cs = chunks(b)
    return sealed(b, head + b"".join(cs) + cs[-1])


@case("which this statusvault cannot read", encrypted=True)
def enc_unknown_algorithm(b: Backup) -> Planted:
    b.head["encryption"] = {**KEY.describe(), "algorithm": "AES-256-GCM-STREAM-1M"}
    return b.planted()


@case("is not encrypted, but an encryption key was given", encrypted=True)
def enc_swapped_for_plaintext(b: Backup) -> Planted:
    del b.head["encryption"]
    b.encrypted = False
    return b.planted()


@case("malformed encryption field", encrypted=True)
def enc_field_not_an_object(b: Backup) -> Planted:
    b.head["encryption"] = "AES"
    return b.planted()


@case("outside the archive layout", encrypted=True)
def enc_hostile_inside(b: Backup) -> Planted:
    """Sealed with the right key, so decryption succeeds: the plaintext gets every check."""
    return renamed(b, "/etc/cron.d/prod.json")
