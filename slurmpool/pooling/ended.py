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
import stat

from slurmpool.pooling.jobfile import checked_job_id, is_job_id
from slurmpool.safefs import own_dir, remove_in

ENDED_DIR = "ended"


def _dir(run_dir: str) -> str:
    return os.path.join(run_dir, ENDED_DIR)


def mark(run_dir: str, job_id: str) -> None:
    """Record that ``job_id`` ended with its release owed."""
    d = _dir(run_dir)
    own_dir(d, 0o700, parents=1)
    path = os.path.join(d, checked_job_id(job_id))
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
    except FileExistsError:
        return
    os.close(fd)


def jobs(run_dir: str) -> frozenset[str]:
    """The jobs whose release is owed (nothing when the directory is not a real one:
    the next :func:`mark` makes it)."""
    d = _dir(run_dir)
    try:
        if not stat.S_ISDIR(os.lstat(d).st_mode):
            return frozenset()
        return frozenset(n for n in os.listdir(d) if is_job_id(n))
    except OSError:
        return frozenset()


def forget(run_dir: str, job_id: str) -> None:
    """The release of ``job_id`` is done (nothing when there was no mark)."""
    remove_in(_dir(run_dir), checked_job_id(job_id))
