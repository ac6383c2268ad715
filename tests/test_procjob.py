"""Which job a process belongs to: its job cgroup, or the root slurmstepd above it;
never what the process says of itself."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from slurmpool.procjob import job_from_cgroup, job_from_stepd, job_of_process


@pytest.mark.parametrize(
    ("text", "want"),
    [
        pytest.param(
            "0::/system.slice/slurmstepd.scope/job_4242/step_batch/user/task_0\n",
            ("4242", None),
            id="cgroup-v2",
        ),
        pytest.param(
            "12:devices:/slurm/uid_1001/job_77/step_0/task_0\n1:name=x:/\n",
            ("77", 1001),
            id="cgroup-v1",
        ),
        pytest.param("0::/user.slice/user-1000.slice/session-3.scope\n", None, id="not-a-job"),
        pytest.param("0::/job_12x/\n", None, id="not-digits"),
    ],
)
def test_job_from_cgroup(text: str, want: tuple[str, int | None] | None) -> None:
    assert job_from_cgroup(text) == want


def _proc(
    root: Path,
    pid: int,
    ppid: int,
    uid: int,
    exe: str = "/usr/bin/python3",
    cmdline: bytes = b"python3\0",
    cgroup: str = "0::/user.slice\n",
) -> None:
    d = root / str(pid)
    d.mkdir()
    (d / "status").write_text(f"Name:\tx\nPPid:\t{ppid}\nUid:\t{uid}\t{uid}\t{uid}\t{uid}\n")
    (d / "cgroup").write_text(cgroup)
    (d / "cmdline").write_bytes(cmdline)
    os.symlink(exe, d / "exe")


def test_the_cgroup_names_the_job(tmp_path: Path) -> None:
    _proc(tmp_path, 50, 1, 1000, cgroup="4:devices:/slurm_n1/uid_1000/job_9/step_0/task_0\n")
    assert job_of_process(50, str(tmp_path)) == "9"


def test_a_root_slurmstepd_ancestor_names_the_job(tmp_path: Path) -> None:
    stepd = b"slurmstepd: [31.batch]\0"
    _proc(tmp_path, 10, 1, 0, exe="/usr/sbin/slurmstepd", cmdline=stepd)
    _proc(tmp_path, 11, 10, 1000, exe="/bin/bash")
    _proc(tmp_path, 12, 11, 1000)
    assert job_of_process(12, str(tmp_path)) == "31"
    assert job_from_stepd(11, str(tmp_path)) == "31"
    assert job_of_process(10, str(tmp_path)) is None  # slurmstepd itself runs no job task


@pytest.mark.parametrize(
    ("uid", "exe"),
    [
        (1000, "/usr/sbin/slurmstepd"),  # the user's own copy of the binary
        (0, "/usr/bin/passwd"),  # a setuid program titled by the user
    ],
)
def test_a_title_alone_names_no_job(tmp_path: Path, uid: int, exe: str) -> None:
    _proc(tmp_path, 20, 1, uid, exe=exe, cmdline=b"slurmstepd: [77.0]\0")
    _proc(tmp_path, 21, 20, 1000)
    assert job_of_process(21, str(tmp_path)) is None


def test_a_process_that_left_its_job_belongs_to_none(tmp_path: Path) -> None:
    _proc(tmp_path, 40, 1, 1000)  # reparented to init
    assert job_of_process(40, str(tmp_path)) is None
    assert job_of_process(41, str(tmp_path)) is None  # gone


def test_the_environment_is_never_read() -> None:
    env = {**os.environ, "SLURM_JOB_ID": "555", "SLURM_JOB_USER": "dora"}
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"], env=env)
    try:
        assert job_of_process(child.pid) == job_of_process(os.getpid())
        assert job_of_process(child.pid) != "555"
    finally:
        child.kill()
        child.wait()


def test_a_jobs_release_stops_its_own_and_jobless_processes_only(tmp_path: Path) -> None:
    from slurmpool.pooling.procs import split_by_job

    job = "4:devices:/slurm_n1/uid_1000/job_{}/step_0/task_0\n"
    _proc(tmp_path, 60, 1, 1000, cgroup=job.format(8))
    _proc(tmp_path, 61, 1, 1000, cgroup=job.format(9))  # the same user's other job
    _proc(tmp_path, 62, 1, 1000)  # left its job: no job
    stop, others = split_by_job([60, 61, 62], "8", str(tmp_path))
    assert (stop, others) == ([60, 62], {61: "9"})
