"""``sandbox down`` with a job running: the job is cancelled and nothing of the sandbox
is left running (slurmstepd outlives slurmd, so down must find it)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from polling import poll

from slurmpool.sandbox import procs
from slurmpool.sandbox.cluster import ACCOUNT, Sandbox

pytestmark = pytest.mark.own_sandbox


def _mount_ns(pid: int) -> str | None:
    try:
        return os.readlink(f"/proc/{pid}/ns/mnt")
    except OSError:
        return None


def _alive(pid: int, start_time: int | None) -> bool:
    return _mount_ns(pid) is not None and procs.process_start_time(pid) == start_time


def _mentions(pid: int, directory: str) -> bool:
    """The process runs from, in or with an argument under ``directory``."""
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            if directory.encode() in f.read():
                return True
        return any(
            os.readlink(f"/proc/{pid}/{link}").startswith(directory) for link in ("cwd", "exe")
        )
    except OSError:
        return False


def test_down_with_a_running_job_leaves_no_process(own_sandbox: Sandbox) -> None:
    sandbox = own_sandbox
    st = sandbox.state()
    assert st is not None
    work = sandbox.layout.root / "work"
    work.mkdir()
    os.chmod(work, 0o1777)
    script = work / "job.sh"
    # A child that ignores SIGTERM, as the stuck slurmstepd of the report did.
    script.write_text(
        "#!/bin/sh\n(trap '' TERM; exec sleep 600) &\necho $! > pids.tmp\n"
        "mv pids.tmp child.pid\nwait\n"
    )
    os.chmod(script, 0o755)
    out = (
        sandbox.slurm()
        .run(
            "sbatch",
            "--parsable",
            f"--account={ACCOUNT}",
            "--gres=vgpu:1",
            f"--chdir={work}",
            "-o",
            "/dev/null",
            str(script),
            as_user="sp-alice",
            timeout=20,
        )
        .stdout
    )
    job = out.strip().split(";")[0]
    child_pid = int(poll(f"job {job}'s child to start", lambda: _read(work / "child.pid"), 60))

    # Everything that runs in a node's mount namespace (slurmd, slurmstepd, the job),
    # found independently of the code under test.
    slurmds = [d for d in st.daemons if d.name.startswith("slurmd-")]
    namespaces = {_mount_ns(d.pid) for d in slurmds}
    assert None not in namespaces
    in_nodes = [
        (int(p), procs.process_start_time(int(p)))
        for p in os.listdir("/proc")
        if p.isdigit() and _mount_ns(int(p)) in namespaces
    ]
    assert child_pid in [pid for pid, _ in in_nodes]
    assert len(in_nodes) > len(slurmds) + 1  # slurmstepd too

    report = sandbox.down()

    assert any(line.startswith(f"cancelled jobs {job}") for line in report), report
    left = [pid for pid, start in in_nodes if _alive(pid, start)]
    assert left == [], f"still running after down: {left}\n" + "\n".join(report)
    directory = str(sandbox.layout.root)
    mentioning = [
        int(p) for p in os.listdir("/proc") if p.isdigit() and _mentions(int(p), directory)
    ]
    assert mentioning == [], f"processes still using {directory}: {mentioning}"
    assert not sandbox.layout.root.exists()


def _read(path: Path) -> str | None:
    try:
        return path.read_text().strip() or None
    except OSError:
        return None
