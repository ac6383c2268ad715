"""Undoing one allocation on the hardware (no state-store writes: callers record).

Shared by the epilog (its job's records) and reconcile (records a crashed
hook left half-way).  Every step is resumable: an instance already gone, a
capability file already root's, a device already back on its driver are
all fine.
"""

from __future__ import annotations

import time

from slurmpool.gpu.backend import InUseError
from slurmpool.modes import GpuMode
from slurmpool.pooling import caps, vfio
from slurmpool.pooling.deadline import EXIT_RESERVE_S
from slurmpool.pooling.mig import instance_of
from slurmpool.pooling.procs import split_by_job, stop_processes
from slurmpool.records import record

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable

    from slurmpool.configgen.nodeconfig import NodeGpu
    from slurmpool.gpu.backend import MigInstance
    from slurmpool.pooling.node import Node
    from slurmpool.state.store import Allocation


class ReleaseError(RuntimeError):
    """An allocation could not be undone within the hook's time bound."""


class HeldByOtherJobs(ReleaseError):
    """Another job's processes hold the slice: it can go only after them."""

    def __init__(self, message: str, jobs: tuple[str, ...]) -> None:
        super().__init__(message)
        self.jobs = jobs


@record(frozen=True, slots=True)
class Undone:
    record_id: int
    detail: str


def _gpu_cfg(node: Node, record: Allocation) -> NodeGpu:
    for g in node.cls.gpus:
        if g.index == record.gpu_index:
            return g
    raise ReleaseError(f"allocation {record.id}: GPU {record.gpu_index} is not in the node config")


def spare_other_jobs(
    node: Node, pids: list[int], job_id: str | None, where: str, wait: bool = True
) -> list[int]:
    """Of ``pids`` on ``job_id``'s slice, those to stop; other jobs' processes are
    spared and logged (they reached a slice not theirs).  With ``wait`` (an instance
    cannot go while they hold it), a ReleaseError says the slice waits for them."""
    if job_id is None or not pids:
        return pids
    stop, others = split_by_job(pids, job_id, node.proc_root)
    if others:
        node.log.event(
            "foreign-process",
            level="warning",
            job=job_id,
            on=where,
            pids=",".join(map(str, others)),
            jobs=",".join(sorted(set(others.values()))),
        )
        if wait and not stop:
            jobs = tuple(sorted(set(others.values())))
            raise HeldByOtherJobs(
                f"{where}: in use by job(s) {', '.join(jobs)}, not job {job_id}: "
                "left for after them",
                jobs,
            )
    return stop


def destroy(
    node: Node,
    nvml_index: int,
    inst: MigInstance,
    patience_s: float | None = None,
    job_id: str | None = None,
) -> int:
    """Stop what runs on ``inst``, destroy its CI and GI; retry while in use, for at most
    ``patience_s`` (default the policy's ``destroy_retry_s``) within the deadline.
    With ``job_id``, only that job's processes (and those of no job) are stopped: an
    instance another job's process holds is left for after it.

    Returns how many stray processes were stopped.  Never call it holding the node lock.
    """
    backend = node.backend()
    policy = node.config.pooling
    wanted = policy.destroy_retry_s if patience_s is None else patience_s
    limit = node.deadline.within(wanted, EXIT_RESERVE_S)
    deadline = time.monotonic() + limit
    stopped = 0
    where = f"GPU {nvml_index} instance {inst.gi_id}"
    while True:
        pids = [p.pid for p in backend.processes(nvml_index, inst.gi_id)]
        pids = spare_other_jobs(node, pids, job_id, where)
        if pids:
            grace = min(kill_grace(node), max(0.0, deadline - time.monotonic()))
            left = stop_processes(pids, grace, node.proc_root)
            stopped += len(pids) - len(left)
        try:
            backend.destroy_instance(nvml_index, inst.gi_id)
            return stopped
        except InUseError as e:
            if time.monotonic() >= deadline:
                raise ReleaseError(
                    f"GPU instance {inst.gi_id} on GPU {nvml_index} still in use after "
                    f"{limit:.0f} s: {e}"
                ) from None
            time.sleep(0.2)


def kill_grace(node: Node) -> float:
    """SIGTERM-to-SIGKILL grace for stray processes now: the policy's, within the budget."""
    return node.deadline.within(node.config.pooling.kill_grace_s, EXIT_RESERVE_S)


def undo(node: Node, record: Allocation, patience_s: float | None = None) -> Undone:
    """Take back what ``record`` handed out, waiting on a busy instance at most
    ``patience_s`` (see :func:`destroy`); raises ReleaseError if it cannot."""
    return _UNDO[record.mode](node, record, patience_s)


def _undo_mig(node: Node, record: Allocation, patience_s: float | None) -> Undone:
    index = node.nvml_index(_gpu_cfg(node, record))
    instances = node.backend().instances(index)
    inst = instance_of(record, instances)
    minors = set(record.cap_minors)
    if inst is not None:
        minors.update(m for m in (inst.gi_minor, inst.ci_minor) if m is not None)
    else:
        # Gone without us (a driver reload, an admin): its minors may name a newer
        # instance by now, whose files are that instance's job's.
        minors -= {m for i in instances for m in (i.gi_minor, i.ci_minor) if m is not None}
    # Root-only first, so nothing new opens the instance while it goes away.
    caps.restore(node.devices_root, sorted(minors))
    if inst is None:
        return Undone(record.id, "instance already gone")
    stopped = destroy(node, index, inst, patience_s, job_id=record.job_id)
    what = f"destroyed {inst.profile} gi{inst.gi_id} at {inst.placement} on GPU {index}"
    return Undone(record.id, what + (f", stopped {stopped} stray process(es)" if stopped else ""))


def _undo_passthrough(node: Node, record: Allocation, _patience_s: float | None) -> Undone:
    gpu = _gpu_cfg(node, record)
    notes = []
    binding = record.details.get("vfio")
    if binding:
        b = vfio.VfioBinding.from_dict(binding)
        if b.group is not None:
            vfio.restore_group(node.config.path("vfio_dev_dir"), b.group)
        driver = vfio.unbind(vfio.Sysfs(node.config.path("sysfs_root")), b)
        notes.append(f"{b.address} back on {driver or 'no driver'}")
    else:
        index = node.nvml_index(gpu)
        pids = [p.pid for p in node.backend().processes(index)]
        pids = spare_other_jobs(node, pids, record.job_id, f"GPU {index}", wait=False)
        if pids:
            left = stop_processes(pids, kill_grace(node), node.proc_root)
            if left:
                raise ReleaseError(f"GPU {index}: processes {left} survived SIGKILL")
            notes.append(f"stopped {len(pids)} stray process(es)")
    return Undone(record.id, ", ".join(notes) or f"GPU {record.gpu_index} returned")


def _undo_shared(node: Node, record: Allocation, _patience_s: float | None) -> Undone:
    return Undone(record.id, f"{record.shares} share(s) of GPU {record.gpu_index} returned")


# What giving an allocation back means, per mode.
_UNDO: dict[GpuMode, Callable[[Node, Allocation, float | None], Undone]] = {
    GpuMode.MIG: _undo_mig,
    GpuMode.PASSTHROUGH: _undo_passthrough,
    GpuMode.SHARED: _undo_shared,
}
