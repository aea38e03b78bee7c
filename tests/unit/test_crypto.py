"""Client-side encryption: round trips, and every kind of tampering or a wrong key is refused."""

from __future__ import annotations

import base64
import io
import os

import pytest

from statusvault.archive.crypto import CHUNK, MAGIC, PREFIX, TAG, EncryptingWriter, Key, decrypt_file, is_encrypted
from statusvault.errors import ArchiveError, ConfigError

KEY = Key(bytes(range(32)))


def encrypt(tmp_path, data: bytes, key: Key = KEY, pieces: int = 7):
    out = io.BytesIO()
    w = EncryptingWriter(out, key)
    step = max(1, len(data) // pieces)
    for i in range(0, len(data), step):
        w.write(data[i : i + step])
    w.close()
    path = tmp_path / "a.enc"
    path.write_bytes(out.getvalue())
    return path


def decrypt(path, key: Key = KEY) -> bytes:
    out = io.BytesIO()
    decrypt_file(path, out, key)
    return out.getvalue()


@pytest.mark.parametrize("size", [0, 1, CHUNK - 1, CHUNK, CHUNK + 1, 3 * CHUNK + 17])
def test_round_trip_at_chunk_boundaries(tmp_path, size):
    data = os.urandom(size)
    path = encrypt(tmp_path, data)
    assert is_encrypted(path)
    assert size < 16 or data not in path.read_bytes(), "the store sees ciphertext"
    assert decrypt(path) == data


def test_a_wrong_key_is_refused(tmp_path):
    path = encrypt(tmp_path, b"secret status")
    with pytest.raises(ArchiveError, match="wrong key"):
        decrypt(path, Key(b"\x01" * 32))


def chunks(path):
    raw = path.read_bytes()
    head, body = raw[: len(MAGIC) + PREFIX], raw[len(MAGIC) + PREFIX :]
    return head, [body[i : i + CHUNK + TAG] for i in range(0, len(body), CHUNK + TAG)]


@pytest.mark.parametrize(
    "tamper",
    [
        lambda cs: cs[:-1],  # cut short at a chunk boundary
        lambda cs: [cs[1], cs[0], *cs[2:]],  # reordered
        lambda cs: [*cs, cs[-1]],  # appended
        lambda cs: [cs[0][:5] + bytes([cs[0][5] ^ 1]) + cs[0][6:], *cs[1:]],  # one bit flipped
    ],
)
def test_tampering_is_refused(tmp_path, tamper):
    path = encrypt(tmp_path, os.urandom(3 * CHUNK + 5))
    head, cs = chunks(path)
    path.write_bytes(head + b"".join(tamper(cs)))
    with pytest.raises(ArchiveError, match="modified or cut short"):
        decrypt(path)


def test_key_files(tmp_path):
    secret = os.urandom(32)
    (tmp_path / "b64").write_text(base64.b64encode(secret).decode() + "\n")
    (tmp_path / "raw").write_bytes(secret)
    assert Key.from_file(tmp_path / "b64").id == Key.from_file(tmp_path / "raw").id == Key(secret).id
    (tmp_path / "short").write_text(base64.b64encode(b"x" * 16).decode())
    with pytest.raises(ConfigError, match="32 bytes"):
        Key.from_file(tmp_path / "short")
    (tmp_path / "junk").write_text("not base64 at all!")
    with pytest.raises(ConfigError, match="does not hold a base64 32-byte key"):
        Key.from_file(tmp_path / "junk")
    with pytest.raises(ConfigError, match="cannot read"):
        Key.from_file(tmp_path / "missing")


def test_a_decrypted_archive_a_killed_run_left_is_swept_and_a_running_ones_kept(tmp_path):
    """kill -9 skips the removal of the decrypted archive: the next run that decrypts sweeps what dead processes
    left, never what a running one (another restore) still reads."""
    import subprocess
    import sys

    from statusvault.store.opening import DECRYPTED_PREFIX, sweep_decrypted

    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    left = tmp_path / f"{DECRYPTED_PREFIX}{dead.stdout.strip()}-abc"
    running = tmp_path / f"{DECRYPTED_PREFIX}{os.getpid()}-def"
    other = tmp_path / "statusvault-other"
    for d in (left, running, other):
        d.mkdir()
        (d / "archive.tar.gz").write_bytes(b"plaintext")
    assert sweep_decrypted(tmp_path) == 1
    assert not left.exists() and running.exists() and other.exists()


def test_the_restore_state_directory_is_private(tmp_path):
    from statusvault.restore.running.state import _state_dir

    where = _state_dir(tmp_path / "state")
    assert where is not None and where.stat().st_mode & 0o777 == 0o700
