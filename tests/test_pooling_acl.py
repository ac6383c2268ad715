"""The ACL that lets only a shared GPU's share holders through its MPS pipe directory."""

from __future__ import annotations

import os
import shutil
import socket
import stat
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path

import needs
import pytest

from slurmpool.pooling.acl import TRAVERSE, decode_users, encode, let_traverse, traversers

NOBODY = 65534


def test_encoding_round_trips_and_sorts_the_users() -> None:
    data = encode(0o7, {1001: TRAVERSE, 1000: TRAVERSE})
    assert decode_users(data) == {1000: TRAVERSE, 1001: TRAVERSE}
    assert data[:4] == b"\x02\x00\x00\x00"  # version 2, little-endian
    # user_obj, user 1000, user 1001, group_obj, mask, other: the kernel's order
    tags = [int.from_bytes(data[o : o + 2], "little") for o in range(4, len(data), 8)]
    assert tags == [0x01, 0x02, 0x02, 0x04, 0x10, 0x20]
    with pytest.raises(ValueError, match="ACL version 3"):
        decode_users(b"\x03\x00\x00\x00")


@pytest.fixture
def pipe() -> Iterator[Path]:
    needs.root("the ACL is tried as another user")
    top = Path(tempfile.mkdtemp(prefix="slurmpool-acl-"))
    try:
        top.chmod(0o755)
        d = top / "gpu0"
        d.mkdir(mode=0o700)
        yield d
    finally:
        shutil.rmtree(top)


def _connect_as_nobody(sock: Path) -> str:
    code = (
        "import socket, sys\n"
        "s = socket.socket(socket.AF_UNIX)\n"
        "try:\n    s.connect(sys.argv[1]); print('connected')\n"
        "except OSError as e:\n    print(type(e).__name__)\n"
    )
    py, _ = needs.python_for_jobs()
    argv = [needs.program("runuser"), "-u", "nobody", "--", py, "-c", code, str(sock)]
    return subprocess.run(argv, capture_output=True, text=True, timeout=60, cwd="/").stdout.strip()


def test_only_the_listed_users_reach_a_socket_in_the_directory(pipe: Path) -> None:
    server = socket.socket(socket.AF_UNIX)
    server.bind(str(pipe / "control"))
    os.chmod(pipe / "control", 0o666)  # as the MPS daemon leaves its socket
    server.listen(4)
    try:
        let_traverse(str(pipe), {1000})
        assert traversers(str(pipe)) == {1000}
        assert stat.S_IMODE(pipe.stat().st_mode) == 0o710  # the group bits show the mask
        assert _connect_as_nobody(pipe / "control") == "PermissionError"
        let_traverse(str(pipe), {1000, NOBODY, 0})  # root needs no entry
        assert traversers(str(pipe)) == {1000, NOBODY}
        assert _connect_as_nobody(pipe / "control") == "connected"
        let_traverse(str(pipe), set())
        assert stat.S_IMODE(pipe.stat().st_mode) == 0o700
        assert _connect_as_nobody(pipe / "control") == "PermissionError"
    finally:
        server.close()


def test_a_link_in_place_of_the_directory_is_refused(pipe: Path) -> None:
    link = pipe.parent / "link"
    link.symlink_to(pipe)
    with pytest.raises(OSError):
        let_traverse(str(link), {NOBODY})
    assert traversers(str(pipe)) == set()
