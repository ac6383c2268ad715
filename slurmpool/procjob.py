"""Which Slurm job a process belongs to, from what the kernel and slurmstepd say.

Never from the process's own words: its environment (``SLURM_JOB_ID``), its
name and its command line are the user's to set.  Two sources no job can forge:

- ``/proc/<pid>/cgroup``: Slurm's cgroup plugins put every task of a job under a
  ``job_<id>`` directory (cgroup v1 ``/slurm_<node>/uid_<uid>/job_<id>/...``, v2
  ``.../job_<id>/step_<step>/...``); only root moves a process between them.
- the slurmstepd it descends from, on nodes without job cgroups
  (``proctrack/linuxproc``): slurmstepd runs as root from its own binary and
  titles itself ``slurmstepd: [<job>.<step>]``.  A job's process may take that
  title, but not root's uid or the binary.

A process that left its job (reparented to init, on a node without job cgroups)
belongs to no job here.  Standard library only: the epilog uses it.
"""

from __future__ import annotations

import os
import re

_CGROUP_JOB = re.compile(r"/job_([0-9]+)(?=/|$)")
_CGROUP_UID = re.compile(r"/uid_([0-9]+)(?=/|$)")
_STEPD_TITLE = re.compile(rb"slurmstepd: \[([0-9]+)\.[^\]]*\]")
STEPD_BINARY = "slurmstepd"


def job_from_cgroup(text: str) -> tuple[str, int | None] | None:
    """``(job id, uid or None)`` from the text of ``/proc/<pid>/cgroup``, None if not a job's."""
    for line in text.splitlines():
        path = line.split(":", 2)[-1]
        m = _CGROUP_JOB.search(path)
        if m:
            u = _CGROUP_UID.search(path)
            return m.group(1), int(u.group(1)) if u else None
    return None


def _read(path: str) -> bytes | None:
    try:
        with open(path, "rb") as f:
            return f.read()
    except OSError:
        return None


def real_uid_and_parent(pid: int, proc_root: str = "/proc") -> tuple[int, int] | None:
    """(real uid, parent pid) of ``pid`` from ``/proc/<pid>/status``."""
    data = _read(os.path.join(proc_root, str(pid), "status"))
    if data is None:
        return None
    uid = ppid = None
    for line in data.splitlines():
        if line.startswith(b"Uid:"):
            uid = int(line.split()[1])
        elif line.startswith(b"PPid:"):
            ppid = int(line.split()[1])
    if uid is None or ppid is None:
        return None
    return uid, ppid


def _stepd_job(pid: int, proc_root: str) -> str | None:
    """The job of ``pid`` if it is a root slurmstepd, else None."""
    try:
        exe = os.readlink(os.path.join(proc_root, str(pid), "exe"))
    except OSError:
        return None
    if os.path.basename(exe.removesuffix(" (deleted)")) != STEPD_BINARY:
        return None
    cmdline = _read(os.path.join(proc_root, str(pid), "cmdline")) or b""
    m = _STEPD_TITLE.match(cmdline)
    return m.group(1).decode() if m else None


def job_from_stepd(pid: int, proc_root: str = "/proc", max_depth: int = 16) -> str | None:
    """The job of the root slurmstepd ``pid`` descends from, or None."""
    current = pid
    for _ in range(max_depth):
        status = real_uid_and_parent(current, proc_root)
        if status is None:
            return None
        uid, parent = status
        if current != pid and uid == 0:
            job = _stepd_job(current, proc_root)
            if job is not None:
                return job
        if parent <= 1:
            return None
        current = parent
    return None


def job_of_process(pid: int, proc_root: str = "/proc", max_depth: int = 16) -> str | None:
    """The Slurm job id ``pid`` belongs to (see the module docstring), or None."""
    text = (_read(os.path.join(proc_root, str(pid), "cgroup")) or b"").decode(errors="replace")
    found = job_from_cgroup(text)
    if found is not None:
        return found[0]
    return job_from_stepd(pid, proc_root, max_depth)
