"""The epilog's whole sequence: summarise, give back, reconcile.  Idempotent.

First, with accounting on, the job's GPU summary goes to the outbox (best
effort, while the records and samples still describe what the job held).
Then per allocation: mark it ``releasing`` (owned by this hook), stop stray
processes, destroy CI then GI (retrying while in use, within a bound),
restore the capability files (or vfio binding) and mark it ``released``.
A second run finds nothing live for the job and changes nothing.
"""

from __future__ import annotations

from slurmpool.gpu.backend import BackendUnavailable, GpuBackendError
from slurmpool.pooling import ended, jobfile, owner
from slurmpool.pooling.node import Broken
from slurmpool.pooling.reconcile import defer, reconcile, stop_waiting_for
from slurmpool.pooling.release import ReleaseError, undo
from slurmpool.pooling.text import clean
from slurmpool.state.db import StateStoreError, StoreBusy
from slurmpool.state.store import ACTIVE, RELEASED, RELEASING

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable

    from slurmpool.pooling.node import Job, Node
    from slurmpool.pooling.slurmjob import SlurmJobs
    from slurmpool.state.store import Allocation

    SlurmFactory = Callable[[], SlurmJobs]


def run_epilog(node: Node, job: Job, slurm: SlurmFactory | None = None) -> int:
    """The epilog; returns its exit status (1 only for a broken node).  With ``slurm``,
    a node that freed slices takes itself out of the ExcNodeList of the jobs it
    requeued (:mod:`slurmpool.pooling.exclude`)."""
    try:
        _summarise(node, job)
        freed = _release(node, job)
        _remove_fence(node, job)
        if freed and slurm is not None:
            _publish(node, slurm)
            _readmit(node, slurm)
        return 0
    except StoreBusy as e:
        # Busy, not broken: the next hook's reconcile gives the job's GPUs back.
        ended.mark(node.run_dir, job.job_id)
        node.log.event("release-deferred", level="warning", job=job.job_id, error=clean(str(e)))
        return 0
    except (Broken, BackendUnavailable, StateStoreError) as e:
        node.log.event("broken-node", level="error", job=job.job_id, error=clean(str(e), 500))
        return 1
    finally:
        node.close()


def _summarise(node: Node, job: Job) -> None:
    """Put the job's GPU summary in the accounting outbox, before anything is released.

    Best effort: a failure is logged and never fails the epilog (the release
    after it reports a broken store itself).
    """
    if not node.config.accounting or not node.has_store():
        return
    try:
        from slurmpool.accounting.enqueue import enqueue_run

        part = enqueue_run(
            node.store(),
            node=node.name,
            job_id=job.job_id,
            cluster=job.cluster or node.config.cluster,
            user=job.user,
            run=job.run,
        )
    except Exception as e:
        node.log.event(
            "gpu-summary-failed", level="error", job=job.job_id, error=f"{type(e).__name__}: {e}"
        )
        return
    if part is not None:
        node.log.event(
            "gpu-summary-queued", job=job.job_id, run=job.run, devices=len(part["devices"])
        )


def _release(node: Node, job: Job) -> int:
    """Give back the job's allocations; how many were given back."""
    log = node.log
    removed = jobfile.remove(node.run_dir, job.job_id)
    if not node.has_store():
        return 0  # no GPU was ever allocated on this node
    store = node.store()
    me = owner.current(node.proc_root)
    with store.transaction():
        mine = store.for_job(job.job_id)
        for a in mine:
            store.set_state(a.id, RELEASING)
            store.set_owner(a.id, me.pid, me.start)
    if not mine:
        log.event("nothing-to-release", job=job.job_id, export_file_removed=removed)
    stuck: set[int] = set()
    for a in mine:
        try:
            result = undo(node, a)
        except (ReleaseError, GpuBackendError, OSError) as e:
            # Left in `releasing` with no owner: a later hook run's reconcile retries.
            with store.transaction():
                defer(store, a, e)
            log.event("release-stuck", level="error", job=job.job_id, alloc=a.id, error=str(e))
            stuck.add(a.id)
            continue
        with store.transaction():
            store.set_owner(a.id, None, None)
            store.set_state(a.id, RELEASED, note=result.detail)
        log.event("released", job=job.job_id, alloc=a.id, mode=a.mode, detail=result.detail)
    _after_mps(node, job, [a for a in mine if a.id not in stuck])
    if not stuck:
        ended.forget(node.run_dir, job.job_id)
    with store.transaction():
        freed = stop_waiting_for(store, job.job_id)
    if freed:
        # Slices this job's processes held though they were another job's: now free.
        log.event("no-longer-held", job=job.job_id, allocs=",".join(map(str, freed)))
    # Reconcile when a crashed hook left records half-way or an epilog left a release
    # owed (orphan instances are found by the next prolog, which lists the GPUs anyway).
    leftovers = [a for a in store.live() if a.state != ACTIVE and a.id not in stuck]
    if any(not _owned_by_live(node, a) for a in leftovers) or ended.jobs(node.run_dir):
        for line in reconcile(node):
            log.event("reconciled", job=job.job_id, detail=line)
    return len(mine) - len(stuck)


def _publish(node: Node, slurm: SlurmFactory) -> None:
    """Tell slurmctld what the node can carve now that the job's instances are gone."""
    from slurmpool.pooling import publish

    if publish.fit_pooled(node):
        publish.publish_now(node, slurm)


def _readmit(node: Node, slurm: SlurmFactory) -> None:
    store = node.store()
    if not store.exclusions():
        return
    from slurmpool.pooling.exclude import readmit

    readmit(node.name, slurm(), store, node.log)


def _after_mps(node: Node, job: Job, released: list[Allocation]) -> None:
    """Lower the user's MPS server to the shares left, or stop a GPU's daemon with no
    share left.  Best effort: the next prolog on the GPU sets the limits again."""
    if not any(a.details.get("mps") for a in released):
        return
    from slurmpool.pooling import mps

    try:
        for line in mps.after_release(node, released):
            node.log.event("mps", job=job.job_id, detail=line)
    except (mps.MpsError, OSError) as e:
        node.log.event("mps-failed", level="warning", job=job.job_id, error=clean(str(e)))


def _remove_fence(node: Node, job: Job) -> None:
    """Remove the devices cgroup the prolog made for the job, if slurmstepd never
    used it (a requeued job) and so left it behind."""
    from slurmpool.pooling import fence

    try:
        cgroup = fence.cgroup_of(node, job)
        if cgroup is not None and fence.remove(cgroup):
            node.log.event("fence-removed", job=job.job_id)
    except fence.FenceError as e:
        node.log.event("fence-left", level="warning", job=job.job_id, error=clean(str(e)))


def _owned_by_live(node: Node, a: Allocation) -> bool:
    return owner.alive(a.owner_pid, a.owner_start, node.proc_root)
