"""The archive's tar members, written without tarfile's per-member machinery, are byte for byte tarfile's."""

from __future__ import annotations

import io
import tarfile

import pytest

from statusvault.archive.writer import _TarOut

NAMES = [
    "resources/widgets.example.com/namespaces/team-a/w-1.json",
    "r/" + "x" * 98,  # exactly 100 bytes: still a plain ustar name
    "r/" + "y" * 99,  # 101 bytes: a pax header
    "resources/wídgets.example.com/cluster/ü.json",  # not ASCII: a pax header
    "resources/a/" + "z" * 200,
]


@pytest.mark.parametrize("sizes", [(0, 1, 511, 512, 513), (70_000, 3, 0, 1024, 10)])
def test_members_and_the_end_of_archive_match_tarfile_pax_output(sizes):
    members = [(name, bytes([65 + i]) * size) for i, (name, size) in enumerate(zip(NAMES, sizes, strict=True))]
    expected = io.BytesIO()
    with tarfile.open(fileobj=expected, mode="w|", format=tarfile.PAX_FORMAT) as tar:
        for name, data in members:
            info = tarfile.TarInfo(name)
            info.size, info.mtime, info.mode = len(data), 1_700_000_000, 0o644
            tar.addfile(info, io.BytesIO(data))
    got = io.BytesIO()
    out = _TarOut(got.write, 1_700_000_000)
    for name, data in members[:-1]:
        out.add(name, data)
    out.add_file(members[-1][0], len(members[-1][1]), io.BytesIO(members[-1][1]))
    out.close()
    assert got.getvalue() == expected.getvalue()
    with tarfile.open(fileobj=io.BytesIO(got.getvalue())) as tar:
        assert [(m.name, m.size) for m in tar.getmembers()] == [(n, len(d)) for n, d in members]
