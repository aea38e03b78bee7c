"""Hostile archives, members: paths, entry types and tar headers, identities, sizes and bombs, counts and
order, JSON shapes. Each keeps every hash and both manifests consistent (tests/hostile.py)."""

from __future__ import annotations

from collections.abc import Iterator

import orjson

from tests.hostile import END, Backup, Planted, entry, gz, header, manifest_bytes, padded, pax, sha, special, summary_of
from tests.hostile_cases import KCQ, Case, MiB, kc, obj, prod, registrar, renamed, with_json, with_tar

CASES: list[Case] = []
case = registrar(CASES)


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
