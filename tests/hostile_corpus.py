"""The corpus of hostile archives: each case twists the base backup (tests/hostile.py) in one way, keeps
every hash and both manifests consistent, and names the one-line refusal it expects."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterator
from typing import Any

import orjson

from tests.hostile import (
    END,
    KEY,
    Backup,
    Planted,
    entry,
    gz,
    header,
    manifest_bytes,
    padded,
    pax,
    sha,
    special,
    summary_of,
)

MiB = 1 << 20
KCQ = "kubernetesclusters.xyz.example.com"


@dataclasses.dataclass(frozen=True)
class Case:
    id: str
    build: Callable[[Backup], Planted]
    error: str  # a fragment of the one-line refusal
    encrypted: bool = False
    bomb: bool = False  # big: its memory is measured in a subprocess


CASES: list[Case] = []


def case(error: str, encrypted: bool = False, bomb: bool = False) -> Callable[[Callable[[Backup], Planted]], None]:
    def register(build: Callable[[Backup], Planted]) -> None:
        CASES.append(Case(build.__name__, build, error, encrypted, bomb))

    return register


def prod(b: Backup) -> str:
    return b.path(KCQ, "prod", b.ns)


def obj(b: Backup, path: str) -> dict[str, Any]:
    data: dict[str, Any] = orjson.loads(dict(b.members)[path])
    return data


def renamed(b: Backup, new_path: str, name: str | None = None, namespace: str | None = None) -> Planted:
    """prod moved to another path (its JSON following, so only the path itself is wrong)."""
    o = obj(b, prod(b))
    o["metadata"]["name"] = name if name is not None else o["metadata"]["name"]
    o["metadata"]["namespace"] = namespace if namespace is not None else o["metadata"]["namespace"]
    b.replace(prod(b), orjson.dumps(o), new_path)
    return b.planted()


def with_json(b: Backup, data: bytes, path: str | None = None) -> Planted:
    b.replace(path or prod(b), data)
    b.restate()
    return b.planted()


def kc(name: str, ns: str, padding: int = 0) -> bytes:
    """A minimal KubernetesCluster's JSON, whitespace-padded to grow it."""
    meta = {"name": name, "namespace": ns}
    body = {"apiVersion": "xyz.example.com/v1", "kind": "KubernetesCluster", "metadata": meta}
    return orjson.dumps(body) + b" " * padding


def with_tar(b: Backup, before_manifest: bytes, listed: list[tuple[str, str]] | None = None) -> Planted:
    """The base members, then raw entries, then a manifest listing `listed` as well."""
    body = b"".join(entry(p, d) for p, d in b.members) + before_manifest
    manifest = manifest_bytes(b.head, b.files() + (listed or []))
    return b.planted(body + entry("manifest.json", manifest) + END)


# --- paths ---


@case("outside the archive layout")
def path_absolute(b: Backup) -> Planted:
    return renamed(b, "/etc/cron.d/prod.json")


@case("outside the archive layout")
def path_traversal(b: Backup) -> Planted:
    return renamed(b, f"resources/{KCQ}/namespaces/{b.ns}/../../../../etc/prod.json")


@case("outside the archive layout")
def path_dot_segment(b: Backup) -> Planted:
    return renamed(b, f"resources/{KCQ}/namespaces/./{b.ns}/prod.json")


@case("outside the archive layout")
def path_double_slash(b: Backup) -> Planted:
    return renamed(b, f"resources/{KCQ}//namespaces/{b.ns}/prod.json")


@case("outside the archive layout")
def path_not_json(b: Backup) -> Planted:
    return renamed(b, f"resources/{KCQ}/namespaces/{b.ns}/prod.yaml")


@case("outside the archive layout")
def name_with_newline(b: Backup) -> Planted:
    return renamed(b, f"resources/{KCQ}/namespaces/{b.ns}/prod\nevil.json", name="prod\nevil")


@case("outside the archive layout")
def name_with_percent(b: Backup) -> Planted:
    return renamed(b, f"resources/{KCQ}/namespaces/{b.ns}/%2e%2e.json", name="%2e%2e")


@case("outside the archive layout")
def name_too_long(b: Backup) -> Planted:
    return renamed(b, f"resources/{KCQ}/namespaces/{b.ns}/{'p' * 5000}.json", name="p" * 5000)


@case("outside the archive layout")
def namespace_not_a_label(b: Backup) -> Planted:
    return renamed(b, f"resources/{KCQ}/namespaces/Kube_System/prod.json", namespace="Kube_System")


# --- entry types and tar headers ---


@case("is a symbolic link, not a regular file")
def symlink(b: Backup) -> Planted:
    path = b.path(KCQ, "link", b.ns)
    return with_tar(b, special(path, b"2", "/etc/shadow"), [(path, sha(b""))])


@case("is a hard link, not a regular file")
def hardlink(b: Backup) -> Planted:
    path = b.path(KCQ, "link", b.ns)
    return with_tar(b, special(path, b"1", prod(b)), [(path, sha(b""))])


@case("is a directory, not a regular file")
def directory(b: Backup) -> Planted:
    return with_tar(b, special(f"resources/{KCQ}/", b"5"))


@case("is a character device, not a regular file")
def char_device(b: Backup) -> Planted:
    return with_tar(b, special(b.path(KCQ, "tty", b.ns), b"3"))


@case("is a FIFO, not a regular file")
def fifo(b: Backup) -> Planted:
    return with_tar(b, special(b.path(KCQ, "pipe", b.ns), b"6"))


@case("is a GNU long name, not a regular file")
def gnu_long_name(b: Backup) -> Planted:
    path = b.path(KCQ, "x" * 120, b.ns)
    return with_tar(b, special("././@LongLink", b"L", data=path.encode() + b"\0"))


@case("is a global extended header, not a regular file")
def global_header(b: Backup) -> Planted:
    return with_tar(b, pax({"comment": "hello"}, b"g"))


@case("is a second extended header, not a regular file")
def extended_header_chain(b: Backup) -> Planted:
    return with_tar(b, pax({"comment": "a"}) + pax({"comment": "b"}) + entry(b.path(KCQ, "c", b.ns), b"{}"))


@case("extended header (limit")
def extended_header_huge(b: Backup) -> Planted:
    return with_tar(b, pax({f"k{i}": "v" * 40 for i in range(20000)}))


@case("is a GNU sparse file, not a regular file")
def sparse_file(b: Backup) -> Planted:
    path = b.path(KCQ, "sparse", b.ns)
    data = b"{}"
    return with_tar(b, pax({"GNU.sparse.major": "1", "GNU.sparse.minor": "0"}) + entry(path, data), [(path, sha(data))])


@case("invalid size in its extended header")
def extended_size_not_a_number(b: Backup) -> Planted:
    return with_tar(b, pax({"size": "-1"}) + header(b.path(KCQ, "s", b.ns), 0))


@case("damaged tar header")
def bad_header_checksum(b: Backup) -> Planted:
    block = bytearray(header(b.path(KCQ, "c", b.ns), 2))
    block[0] ^= 1
    return with_tar(b, bytes(block) + padded(b"{}"))


# --- kinds, names, namespaces ---


@case("does not match its path")
def kind_swapped(b: Backup) -> Planted:
    o = obj(b, prod(b))
    o["kind"] = "ClusterRoleBinding"
    return with_json(b, orjson.dumps(o))


@case("does not match its path")
def name_swapped(b: Backup) -> Planted:
    o = obj(b, prod(b))
    o["metadata"]["name"] = "someone-else"
    return with_json(b, orjson.dumps(o))


@case("does not match its path")
def namespace_smuggled(b: Backup) -> Planted:
    o = obj(b, prod(b))
    o["metadata"]["namespace"] = "kube-system"
    return with_json(b, orjson.dumps(o))


@case("has a namespaced path, unlike its resource")
def cluster_object_in_a_namespace(b: Backup) -> Planted:
    pool = b.members[0][0]
    o = obj(b, pool)
    o["metadata"]["namespace"] = b.ns
    b.replace(pool, orjson.dumps(o), b.path("clusterpools.infra.example.com", o["metadata"]["name"], b.ns))
    b.restate()
    return b.planted()


@case("belongs to a resource the manifest does not describe")
def undescribed_resource(b: Backup) -> Planted:
    secret = {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "token", "namespace": b.ns}}
    b.members.append((b.path("secrets", "token", b.ns), orjson.dumps(secret)))
    b.restate()
    return b.planted()


# --- sizes ---


@case("above the limit for an object", bomb=True)
def member_declared_huge(b: Backup) -> Planted:
    """A header saying 1 GiB of zeros follow (they do not need to: the header is refused)."""
    path = b.path(KCQ, "huge", b.ns)
    return with_tar(b, header(path, 1 << 30), [(path, sha(b""))])


@case("above the limit for an object")
def member_declared_huge_in_extended_header(b: Backup) -> Planted:
    path = b.path(KCQ, "huge", b.ns)
    return with_tar(b, pax({"size": str(10 << 30)}) + header(path, 0), [(path, sha(b""))])


@case("invalid size field")
def member_size_in_base_256(b: Backup) -> Planted:
    path = b.path(KCQ, "huge", b.ns)
    return with_tar(b, header(path, 10 << 40), [(path, sha(b""))])


@case("above the limit for an object")
def member_over_the_limit(b: Backup) -> Planted:
    o = obj(b, prod(b))
    return with_json(b, orjson.dumps(o) + b" " * (17 * MiB))


@case("uncompressedBytes", bomb=True)
def decompression_bomb(b: Backup) -> Planted:
    """Forty 15 MiB objects (whitespace-padded, each valid JSON) where the manifest says a few KiB."""
    files = b.files()

    def parts() -> Iterator[bytes]:
        yield from (entry(p, d) for p, d in b.members)
        for i in range(40):
            data = kc(f"b{i}", b.ns, padding=15 * MiB)
            files.append((b.path(KCQ, f"b{i}", b.ns), sha(data)))
            yield entry(files[-1][0], data)
        yield entry("manifest.json", manifest_bytes(b.head, files)) + END

    b.head["resources"][KCQ]["count"] += 40
    return b.planted(parts())


@case("above the limit")
def manifest_declared_huge(b: Backup) -> Planted:
    body = b"".join(entry(p, d) for p, d in b.members)
    return b.planted(body + header("manifest.json", 300 * MiB) + padded(b"{") + END)


@case("JSON values (the limit)", bomb=True)
def json_values_bomb(b: Backup) -> Planted:
    o = obj(b, prod(b))
    head = orjson.dumps(o)[:-1]
    return with_json(b, head + b',"x":[' + b'{"a":1},' * 1_500_000 + b"{}]}")


def heavy_then_unlisted(b: Backup, filler: bytes) -> Planted:
    """prod made as costly to parse as the limits allow (and valid), then a member the manifest does not
    list: the first read parses the heavy one before it meets the refusal."""
    with_json(b, orjson.dumps(obj(b, prod(b)))[:-1] + b',"x":[' + filler + b"]}")
    data = kc("late", b.ns)
    b.restate(len(data))
    return with_tar(b, entry(b.path(KCQ, "late", b.ns), data))


@case("not listed in the manifest at its place", bomb=True)
def json_dicts_at_the_limit(b: Backup) -> Planted:
    return heavy_then_unlisted(b, b",".join([b'{"a":1}'] * 330_000))


@case("not listed in the manifest at its place", bomb=True)
def json_strings_at_the_limit(b: Backup) -> Planted:
    return heavy_then_unlisted(b, b",".join(b'"%014d"' % i for i in range(900_000)))


@case("not listed in the manifest at its place", bomb=True)
def limits_combined(b: Backup, members: int = 200_000) -> Planted:
    """Both manifests' heads near their value limit, 200,000 unlisted members, then the heaviest object."""
    b.head["padding"] = [{"a": 1}] * 60_000
    filler = b",".join(b'"%014d"' % i for i in range(900_000))
    b.replace(prod(b), orjson.dumps(obj(b, prod(b)))[:-1] + b',"x":[' + filler + b"]}")
    extra = [(b.path(KCQ, f"m{i}", b.ns), kc(f"m{i}", b.ns)) for i in range(members)]
    b.restate(sum(len(d) for _, d in extra))
    b.head["totals"]["objects"] += members

    def parts() -> Iterator[bytes]:
        yield from (entry(p, d) for p, d in [*b.members[:2], *extra, *b.members[2:]])
        yield entry("manifest.json", manifest_bytes(b.head, b.files())) + END

    return b.planted(parts())


@case("not valid JSON")
def json_deeply_nested(b: Backup) -> Planted:
    o = obj(b, prod(b))
    return with_json(b, orjson.dumps(o)[:-1] + b',"x":' + b"[" * 100_000 + b"]" * 100_000 + b"}")


@case("cut short")
def tar_cut_short(b: Backup) -> Planted:
    tar = b.tar()
    return b.planted(tar[: len(tar) // 2])


@case("cut short")
def gzip_cut_short(b: Backup) -> Planted:
    stored = gz(b.tar())
    stored = stored[: len(stored) - 40]
    return Planted(stored, summary_of(b.head, stored))


# --- counts and order ---


@case("not listed in the manifest at its place")
def member_not_listed(b: Backup) -> Planted:
    data = kc("x", b.ns)
    b.restate(len(data))
    return with_tar(b, entry(b.path(KCQ, "x", b.ns), data))


@case("appears twice")
def member_twice(b: Backup) -> Planted:
    b.members.append(b.members[-1])
    return b.planted()


@case("not listed in the manifest at its place", bomb=True)
def many_members(b: Backup) -> Planted:
    """100,000 tiny objects the manifest does not list (its totals count their bytes)."""
    extra = [(b.path(KCQ, f"m{i}", b.ns), kc(f"m{i}", b.ns)) for i in range(100_000)]
    b.restate(sum(len(d) for _, d in extra))

    def parts() -> Iterator[bytes]:
        yield from (entry(p, d) for p, d in [*b.members, *extra])
        yield entry("manifest.json", manifest_bytes(b.head, b.files())) + END

    return b.planted(parts())


@case("the manifest lists object files the archive does not hold")
def member_missing(b: Backup) -> Planted:
    manifest = manifest_bytes(b.head, [*b.files(), (b.path(KCQ, "ghost", b.ns), sha(b"{}"))])
    return b.planted(b.tar(manifest))


@case("not listed in the manifest at its place")
def members_reordered(b: Backup) -> Planted:
    files = b.files()
    b.members[2], b.members[3] = b.members[3], b.members[2]
    return b.planted(b.tar(manifest_bytes(b.head, files)))


@case("follows manifest.json")
def member_after_manifest(b: Backup) -> Planted:
    tar = b.tar()[: -len(END)]
    return b.planted(tar + entry(b.path(KCQ, "late", b.ns), b"{}") + END)


@case("follows manifest.json")
def two_manifests(b: Backup) -> Planted:
    tar = b.tar()[: -len(END)]
    return b.planted(tar + entry("manifest.json", manifest_bytes(b.head, [])) + END)


@case("has no manifest.json")
def no_manifest(b: Backup) -> Planted:
    return b.planted(b"".join(entry(p, d) for p, d in b.members) + END)


# --- JSON shapes ---


@case("does not hold a JSON object")
def json_array(b: Backup) -> Planted:
    return with_json(b, b'[{"kind":"KubernetesCluster"}]')


@case("does not hold a JSON object")
def json_null(b: Backup) -> Planted:
    return with_json(b, b"null")


@case("not valid JSON")
def json_not_utf8(b: Backup) -> Planted:
    return with_json(b, orjson.dumps(obj(b, prod(b))).replace(b'"eu"', b'"\xff\xfe"'))


@case("does not match its path")
def json_metadata_not_an_object(b: Backup) -> Planted:
    return with_json(b, b'{"kind":"KubernetesCluster","metadata":["prod"]}')


# --- manifest fields ---


def embedded(b: Backup, manifest: bytes) -> Planted:
    """Another embedded manifest; the summary manifest stays the base's (its checks pass)."""
    return b.planted(b.tar(manifest))


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
