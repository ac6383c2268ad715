"""Stopping stray processes on a GPU or MIG instance (SIGTERM, then SIGKILL), and
telling a job's own strays from another job's processes."""

from __future__ import annotations

import os
import signal
import time

from slurmpool.pooling.owner import start_time

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable, Sequence


def stop_processes(
    pids: Sequence[int],
    grace_s: float,
    proc_root: str = "/proc",
    sleep: Callable[[float], None] = time.sleep,
) -> list[int]:
    """Signal ``pids`` to stop; return those still alive after SIGKILL and a short wait.

    Never signals PID 1 or the calling process.
    """
    targets = [p for p in dict.fromkeys(pids) if p > 1 and p != os.getpid()]
    for sig, wait_s in ((signal.SIGTERM, grace_s), (signal.SIGKILL, 2.0)):
        targets = [p for p in targets if start_time(p, proc_root) is not None]
        for pid in targets:
            try:
                os.kill(pid, sig)
            except ProcessLookupError:
                pass
            except PermissionError:
                continue
        deadline = time.monotonic() + wait_s
        while targets and time.monotonic() < deadline:
            sleep(0.05)
            targets = [p for p in targets if start_time(p, proc_root) is not None]
        if not targets:
            return []
    return targets


def split_by_job(
    pids: Sequence[int], job_id: str, proc_root: str = "/proc"
) -> tuple[list[int], dict[int, str]]:
    """``pids`` as (those to stop: ``job_id``'s own and those of no job, {pid: job} of
    other jobs' processes, never to be touched for this job).

    The job comes from the kernel and slurmstepd (:mod:`slurmpool.procjob`), never
    from the slice a process holds or what it says of itself.
    """
    from slurmpool.procjob import job_of_process

    stop: list[int] = []
    others: dict[int, str] = {}
    for pid in pids:
        owner = job_of_process(pid, proc_root)
        if owner is None or owner == job_id:
            stop.append(pid)
        else:
            others[pid] = owner
    return stop, others
