"""Shared fixtures for the unit tests."""

from __future__ import annotations

import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from slurmpool.catalogue import Catalogue, default_catalogue


@pytest.fixture
def shared_dir() -> Iterator[Path]:
    """A root-owned 0755 directory every user can search (pytest's tmp_path is private
    to root, which would hide an interpreter there from job users)."""
    import shutil
    import tempfile

    top = Path(tempfile.mkdtemp(prefix="slurmpool-shared-"))
    top.chmod(0o755)
    try:
        yield top
    finally:
        shutil.rmtree(top)


@pytest.fixture(scope="session")
def catalogue() -> Catalogue:
    return default_catalogue()


@pytest.fixture(scope="session")
def munge_socket(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """The socket of a munged of the tests' own: ``slurmd -G`` authenticates with munge
    from Slurm 24.11 on and fails without a munged (22.05 did not need one).  Name it
    in slurm.conf as ``AuthInfo=socket=PATH``."""
    import needs

    from slurmpool.sandbox import procs
    from slurmpool.sandbox.cluster import wait_for

    munged = needs.program("munged", "/usr/sbin/munged")
    mungekey = needs.program("mungekey", "/usr/sbin/mungekey")
    needs.root("munged for slurmd -G")
    d = tmp_path_factory.mktemp("munge")
    os.chmod(d, 0o755)  # the socket is for every user, as /run/munge is
    key, sock = d / "munge.key", d / "munge.socket"
    subprocess.run([mungekey, "--create", f"--keyfile={key}"], check=True, timeout=20)
    daemon = procs.spawn(
        "munged",
        [
            munged,
            "--foreground",
            "--force",
            f"--socket={sock}",
            f"--key-file={key}",
            f"--pid-file={d / 'munged.pid'}",
            f"--log-file={d / 'munged.log'}",
            f"--seed-file={d / 'munged.seed'}",
        ],
        d / "munged.out",
        {"PATH": "/usr/sbin:/usr/bin:/sbin:/bin"},
    )
    try:
        wait_for("munged", sock.exists, 10, lambda: procs.is_running(daemon))
        yield sock
    finally:
        procs.stop([daemon], grace_s=5)
