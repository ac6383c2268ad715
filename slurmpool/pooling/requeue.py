"""No room now: send the job back to the queue, say why, never drain the node.

Slurm counts vgpu units, not MIG slices, so it can start a job on a node
whose free slices are fragmented.  The prolog then runs ``scontrol requeue``
and exits 0: the job returns to PENDING, the node stays idle, and the job
runs later (measured: SLURM_FACTS.md).  The reason goes to the hook log, the
node's requeue count and slurmpool's note in the job's AdminComment
(:mod:`slurmpool.slurm.admin_comment`: the site's text and the GPU summary
stay as they are).
"""

from __future__ import annotations

from slurmpool.pooling.text import clean
from slurmpool.slurm.admin_comment import AdminComment
from slurmpool.slurm.runner import SlurmCommandError
from slurmpool.state.db import StoreBusy

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable

    from slurmpool.pooling.node import EventLog, Job
    from slurmpool.pooling.slurmjob import SlurmJobs
    from slurmpool.state.store import NodeStore


def requeue_job(
    job: Job,
    reason: str,
    slurm: SlurmJobs,
    store: Callable[[], NodeStore],
    log: EventLog,
    existing_comment: str | None,
    hold: bool = False,
) -> bool:
    """Requeue ``job`` (held when ``hold``); True if Slurm took the requeue.

    The AdminComment update comes first, while the job still runs; its failure
    is logged and never stops the requeue.  ``existing_comment`` None means it
    could not be read: then it is left alone rather than overwritten.  The
    node's requeue count is kept in ``store()`` when its lock is free in time.
    """
    why = clean(reason)
    count: int | None = None
    try:
        s = store()
        with s.transaction():
            s.record_requeue(job.job_id, why)
            count = s.requeue_count(job.job_id)
    except StoreBusy as e:
        log.event("requeue-uncounted", level="warning", job=job.job_id, error=clean(str(e)))
    times = f" {count}x" if count is not None else ""
    note = f"requeued{times}{' and held' if hold else ''}: {why}"
    if existing_comment is None:
        log.event("admin-comment-unknown", level="warning", job=job.job_id, note=note)
    else:
        try:
            text = AdminComment.parse(existing_comment).with_note(note).text()
            slurm.set_admin_comment(job.job_id, text)
        except SlurmCommandError as e:
            log.event("admin-comment-failed", level="warning", job=job.job_id, error=clean(str(e)))
    try:
        slurm.requeue(job.job_id, hold=hold)
    except SlurmCommandError as e:
        log.event("requeue-failed", level="error", job=job.job_id, error=clean(str(e)))
        return False
    log.event(
        "requeue-hold" if hold else "requeue",
        job=job.job_id,
        reason=why,
        requeues=count if count is not None else "-",
    )
    return True
