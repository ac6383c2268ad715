"""Reconcile the state store with the GPUs: finish what crashed hooks left.

Decide under the node lock, act outside it, record under it: :func:`claim`
plans (pure :func:`plan`) and takes the records it will finish, inside the
caller's write transaction, so no prolog commits an intent between the reads
and the decision; :func:`settle` then does the hardware work with no lock
held, and records each outcome in a short transaction of its own.  A hook
waiting on a busy instance therefore never holds up another hook.

- after a boot (the kernel's boot id differs from the one the store was
  last used in) no record describes the hardware: every live one is marked
  released, and what NVML lists is all there is (its instances are orphans);
- an ``intent`` or ``releasing`` record whose owner process is gone was
  left half-way: undo it (destroy its instance if one exists at its
  placement, restore files) and mark it released;
- an ``active`` record of a job whose epilog could not reach the store
  (:mod:`slurmpool.pooling.ended`) is given back the same way;
- an ``active`` ``mig`` record whose instance NVML no longer lists (a driver
  reload, an admin's ``nvidia-smi mig -dci/-dgi``) is released and logged:
  it holds nothing, and its slices are free;
- an instance on a ``mig``-mode GPU that no live record owns is an orphan:
  destroy it once idle (one attempt, no waiting);
- a record that could not be undone is tried again only after
  :data:`RETRY_AFTER_S`, so a stuck instance does not slow every job start;
- everything else, in particular every other ``active`` record (a running
  job's), is left alone.
"""

from __future__ import annotations

import time

from slurmpool.gpu.backend import GpuBackendError
from slurmpool.modes import GpuMode
from slurmpool.pooling import ended, owner
from slurmpool.pooling.mig import instance_of
from slurmpool.pooling.release import HeldByOtherJobs, ReleaseError, destroy, undo
from slurmpool.records import record
from slurmpool.state.store import ACTIVE, RELEASED

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable, Collection, Mapping, Sequence

    from slurmpool.gpu.backend import MigInstance
    from slurmpool.pooling.node import Node
    from slurmpool.state.store import Allocation, NodeStore

# How long a job start waits on a busy instance another hook left behind.
PATIENCE_S = 2.0
# How long a record that could not be undone is left before the next try.
RETRY_AFTER_S = 60.0
# The details key holding that time (wall clock, seconds since the epoch).
RETRY_AFTER_KEY = "retry_after"
# The details key naming the jobs whose processes held the slice: the epilog of
# each lifts the wait, so the slice goes as soon as they do.
WAITS_FOR_KEY = "waits_for"


# Why a record is finished.
HOOK_GONE = "hook gone"
JOB_ENDED = "job ended"
INSTANCE_GONE = "instance gone"
# The store's node_meta key for the boot its records were made in.
BOOT_KEY = "boot_id"


@record(frozen=True, slots=True)
class Finish:
    alloc: Allocation
    why: str  # HOOK_GONE, JOB_ENDED or INSTANCE_GONE


@record(frozen=True, slots=True)
class ReconcilePlan:
    finish: tuple[Finish, ...]  # records to give back
    orphans: tuple[tuple[int, MigInstance], ...]  # (config GPU index, instance)

    @property
    def empty(self) -> bool:
        return not self.finish and not self.orphans


def plan(
    records: Sequence[Allocation],
    instances: Mapping[int, Sequence[MigInstance]],
    owner_alive: Callable[[Allocation], bool],
    now: float,
    ended_jobs: Collection[str] = (),
) -> ReconcilePlan:
    """What to do, from the live records, the instances of each ``mig`` GPU, the time
    and the jobs whose epilog left their release to a later hook."""
    finish = []
    for r in records:
        if owner_alive(r) or float(r.details.get(RETRY_AFTER_KEY, 0)) > now:
            continue
        if r.state != ACTIVE:
            finish.append(Finish(r, HOOK_GONE))
        elif r.job_id in ended_jobs:
            finish.append(Finish(r, JOB_ENDED))
        elif (
            r.mode is GpuMode.MIG
            and r.gpu_index in instances
            and instance_of(r, instances[r.gpu_index]) is None
        ):
            finish.append(Finish(r, INSTANCE_GONE))
    orphans = []
    for gpu_index, insts in sorted(instances.items()):
        mine = [r for r in records if r.mode is GpuMode.MIG and r.gpu_index == gpu_index]
        owned = {id(i) for r in mine if (i := instance_of(r, insts)) is not None}
        # A half-created instance (no CI, no UUID) at an active record's placement is
        # that record's, not an orphan.
        placed = {r.placement for r in mine}
        for inst in insts:
            if id(inst) in owned:
                continue
            if inst.uuid is None and (inst.placement.start, inst.placement.size) in placed:
                continue
            orphans.append((gpu_index, inst))
    return ReconcilePlan(tuple(finish), tuple(orphans))


def claim(node: Node) -> ReconcilePlan:
    """Plan, and make this hook the owner of each record to finish, so that no other
    hook takes it meanwhile.  The caller holds the store's write transaction."""
    store = node.store()
    proc_root = node.proc_root
    forget_an_earlier_boot(node)
    records = store.live()
    instances = {
        g.index: node.backend().instances(node.nvml_index(g)) for g in node.gpus(GpuMode.MIG)
    }
    owed = ended.jobs(node.run_dir)
    for job in owed - {r.job_id for r in records}:
        ended.forget(node.run_dir, job)  # given back meanwhile (or before a boot)
    todo = plan(
        records,
        instances,
        lambda r: owner.alive(r.owner_pid, r.owner_start, proc_root),
        time.time(),
        owed,
    )
    me = owner.current(proc_root)
    for f in todo.finish:
        store.set_owner(f.alloc.id, me.pid, me.start)
    return todo


def forget_an_earlier_boot(node: Node) -> None:
    """After a boot, mark every live record released: the instances, processes, file
    modes and bindings they describe went with the boot (inside the caller's
    transaction)."""
    store = node.store()
    boot = owner.boot_id(node.proc_root)
    known = store.meta(BOOT_KEY)
    if boot is None or boot == known:
        return
    store.set_meta(BOOT_KEY, boot)
    if known is None:
        return  # a new store, or one from before the boot was recorded
    live = store.live()
    for r in live:
        store.set_owner(r.id, None, None)
        store.set_state(r.id, RELEASED, note=f"node rebooted (boot {known} -> {boot})")
    node.log.event("node-rebooted", level="warning", released=len(live), boot=boot)


def defer(store: NodeStore, r: Allocation, error: Exception | None = None) -> None:
    """``r`` could not be undone now (``error`` says why): leave it ownerless, for a
    try after :data:`RETRY_AFTER_S`, or as soon as the jobs holding it have ended
    (inside the caller's transaction)."""
    store.set_owner(r.id, None, None)
    details = {**r.details, RETRY_AFTER_KEY: time.time() + RETRY_AFTER_S}
    if isinstance(error, HeldByOtherJobs):
        details[WAITS_FOR_KEY] = list(error.jobs)
    store.set_details(r.id, details)


def stop_waiting_for(store: NodeStore, job_id: str) -> list[int]:
    """Job ``job_id`` ended: records deferred because its processes held them may be
    tried now (inside the caller's transaction); returns their ids."""
    freed = []
    for r in store.live():
        if job_id in r.details.get(WAITS_FOR_KEY, ()):
            details = {
                k: v for k, v in r.details.items() if k not in (RETRY_AFTER_KEY, WAITS_FOR_KEY)
            }
            store.set_details(r.id, details)
            freed.append(r.id)
    return freed


def settle(node: Node, todo: ReconcilePlan, patience_s: float = PATIENCE_S) -> list[str]:
    """Carry a claimed plan out, with no lock held; return what was done.

    ``patience_s`` bounds the wait for each busy instance (within the deadline).
    """
    store = node.store()
    done = []
    for f in todo.finish:
        r = f.alloc
        try:
            result = undo(node, r, patience_s)
        except (ReleaseError, GpuBackendError, OSError) as e:
            with store.transaction():
                defer(store, r, e)
            node.log.event(
                "reconcile-stuck",
                level="error",
                job=r.job_id,
                alloc=r.id,
                error=str(e),
                retry_in_s=int(RETRY_AFTER_S),
            )
            continue
        with store.transaction():
            store.set_owner(r.id, None, None)
            store.set_state(r.id, RELEASED, note=f"reconciled: {result.detail}")
            rest = store.for_job(r.job_id)
        if not rest:
            ended.forget(node.run_dir, r.job_id)
        line = f"job {r.job_id} allocation {r.id} ({r.state}, {f.why}): {result.detail}"
        node.log.event(
            "reconcile",
            level="warning" if f.why == INSTANCE_GONE else "info",
            job=r.job_id,
            alloc=r.id,
            was=r.state,
            why=f.why,
            detail=result.detail,
        )
        done.append(line)
    by_index = {g.index: g for g in node.gpus(GpuMode.MIG)}
    for gpu_index, inst in todo.orphans:
        index = node.nvml_index(by_index[gpu_index])
        try:
            if node.backend().processes(index, inst.gi_id):
                node.log.event(
                    "orphan-busy",
                    level="warning",
                    gpu=gpu_index,
                    gi=inst.gi_id,
                    profile=inst.profile,
                )
                continue
            destroy(node, index, inst, patience_s=0.0)
        except (ReleaseError, GpuBackendError) as e:
            node.log.event(
                "orphan-stuck", level="error", gpu=gpu_index, gi=inst.gi_id, error=str(e)
            )
            continue
        node.log.event(
            "orphan-destroyed",
            gpu=gpu_index,
            gi=inst.gi_id,
            profile=inst.profile,
            placement=str(inst.placement),
        )
        done.append(f"orphan {inst.profile} gi{inst.gi_id} at {inst.placement} on GPU {gpu_index}")
    return done


def reconcile(node: Node, patience_s: float = PATIENCE_S) -> list[str]:
    """Claim under the node lock, then settle outside it (the caller holds no transaction);
    then stand down the MPS daemons of GPUs no share holds any longer."""
    with node.store().transaction():
        todo = claim(node)
    done = [] if todo.empty else settle(node, todo, patience_s)
    return done + stand_down_mps(node)


def stand_down_mps(node: Node) -> list[str]:
    """Stop the MPS daemons of GPUs no share holds any longer and give back their
    compute modes (what a crashed epilog left)."""
    if not any(g.mps for g in node.gpus(GpuMode.SHARED)):
        return []
    from slurmpool.pooling import mps

    try:
        return mps.tidy(node)
    except (mps.MpsError, GpuBackendError, OSError) as e:
        return [f"MPS daemons not stood down: {e}"]
