"""The writer-models benchmark's answer reader: an answer is taken only once all of it came, by Content-Length or
chunked framing (the API server chunks answers above 2 KB), and what follows it stays for the next answer."""

import pytest

from statusvault.testing.benchwriters import _Link


def link_with(data: bytes) -> _Link:
    link = _Link.__new__(_Link)
    link.received = bytearray(data)
    return link


LENGTH = b'HTTP/1.1 201 Created\r\nContent-Type: application/json\r\nContent-Length: 7\r\n\r\n{"a":1}'
CHUNKED = (
    b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n"
    b'4\r\n{"a"\r\n3\r\n:1}\r\n0\r\n\r\n'
)


@pytest.mark.parametrize(("answer", "status"), [(LENGTH, 201), (CHUNKED, 200)], ids=["length", "chunked"])
def test_an_answer_is_read_whole_and_only_when_all_of_it_came(answer, status):
    for cut in range(len(answer)):  # every prefix: not yet
        assert link_with(answer[:cut]).answer() is None, cut
    link = link_with(answer + b"HTTP/1.1")  # the start of the next answer stays
    assert link.answer() == (status, b'{"a":1}')
    assert bytes(link.received) == b"HTTP/1.1"
