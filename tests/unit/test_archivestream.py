"""The tar header checksum: the byte sum is computed in C, exactly as the per-byte sum."""

from __future__ import annotations

import io
import random
import tarfile

import pytest

from statusvault.archive.stream import _header, byte_sum
from statusvault.errors import ArchiveError


@pytest.mark.parametrize("size", [0, 1, 148, 255, 256, 257, 356, 512, 1000])
def test_the_byte_sum_equals_the_plain_sum(size):
    rng = random.Random(size)
    for data in (bytes(rng.randrange(256) for _ in range(size)), b"\xff" * size, bytes(size)):
        assert byte_sum(data) == sum(data)


def _block(name: str, size: int) -> bytes:
    info = tarfile.TarInfo(name)
    info.size = size
    return info.tobuf(tarfile.USTAR_FORMAT)[:512]


def test_a_header_is_read_and_a_changed_byte_refused():
    block = _block("resources/widgets.example.com/namespaces/a/w.json", 1234)
    assert _header(block, "a.tar.gz") == ("resources/widgets.example.com/namespaces/a/w.json", 1234, b"0")
    for at in (0, 130, 300, 511):
        damaged = bytearray(block)
        damaged[at] ^= 0x01
        with pytest.raises(ArchiveError, match="damaged tar header"):
            _header(bytes(damaged), "a.tar.gz")


def test_a_tar_written_by_tarfile_has_headers_we_accept():
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.USTAR_FORMAT) as tar:
        info = tarfile.TarInfo("resources/x/cluster/é.json")
        info.size = 3
        tar.addfile(info, io.BytesIO(b"{}\n"))
    assert _header(buf.getvalue()[:512], "t")[0] == "resources/x/cluster/é.json"
