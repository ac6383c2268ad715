"""A daemon that fails to start: up says which, shows its log, and leaves nothing running."""

from __future__ import annotations

import os
import sys
import tempfile
from pathlib import Path

import pytest

from slurmpool.sandbox import procs
from slurmpool.sandbox.cluster import Sandbox, SandboxError, SandboxOptions
from slurmpool.slurm.runner import DEFAULT_SEARCH_PATH, Runner

from .conftest import Cluster


def test_failed_daemon_shows_its_log_and_stops_the_rest(cluster: Cluster, tmp_path: Path) -> None:
    # A search path where slurmctld is a stand-in that fails the way a bad config does.
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    fake = bin_dir / "slurmctld"
    fake.write_text("#!/bin/sh\necho 'slurmctld: fatal: stand-in refuses to start' >&2\nexit 1\n")
    fake.chmod(0o755)
    runner = Runner(
        env={"PATH": "/usr/sbin:/usr/bin:/sbin:/bin"},
        search_path=[str(bin_dir), *DEFAULT_SEARCH_PATH],
    )
    directory = Path(tempfile.mkdtemp(prefix="slurmpool-fail-", dir="/tmp"))
    os.rmdir(directory)
    sandbox = Sandbox(directory, runner)
    try:
        with pytest.raises(SandboxError) as info:
            sandbox.up(SandboxOptions(directory=directory, python=sys.executable, timeout_s=30))
        message = str(info.value)
        assert "slurmctld failed to start" in message
        assert "stand-in refuses to start" in message
        assert "last lines of" in message
        state = sandbox.state()
        assert state is not None and state.phase == "failed"
        assert [d.name for d in state.daemons] == ["munged", "mariadbd", "slurmdbd", "slurmctld"]
        assert not any(procs.is_running(d) for d in state.daemons)
    finally:
        sandbox.down()
    assert not directory.exists()
