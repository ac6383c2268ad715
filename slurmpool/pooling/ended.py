"""Jobs that ended while the node's store was locked: their release is owed.

An epilog that cannot take the node lock in time exits 0 (a busy node is not
a broken one) and leaves ``<run_dir>/ended/<job id>``, an empty file in a
directory only root can enter.  The next hook's reconcile gives back that
job's records and removes the file; a prolog for the same job (a requeued
run) first gives back the old run's.  ``run_dir`` is a tmpfs on most nodes,
so the files go with a reboot, as the instances do.
"""

from __future__ import annotations

import os

from slurmpool.pooling.jobfile import checked_job_id

ENDED_DIR = "ended"


def _dir(run_dir: str) -> str:
    return os.path.join(run_dir, ENDED_DIR)


def mark(run_dir: str, job_id: str) -> None:
    """Record that ``job_id`` ended with its release owed."""
    d = _dir(run_dir)
    os.makedirs(run_dir, mode=0o755, exist_ok=True)
    os.makedirs(d, mode=0o700, exist_ok=True)
    path = os.path.join(d, checked_job_id(job_id))
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
    except FileExistsError:
        return
    os.close(fd)


def jobs(run_dir: str) -> frozenset[str]:
    """The jobs whose release is owed."""
    try:
        return frozenset(os.listdir(_dir(run_dir)))
    except OSError:
        return frozenset()


def forget(run_dir: str, job_id: str) -> None:
    """The release of ``job_id`` is done (nothing when there was no mark)."""
    try:  # noqa: SIM105 (contextlib stays off the hook path)
        os.unlink(os.path.join(_dir(run_dir), checked_job_id(job_id)))
    except FileNotFoundError:
        pass
