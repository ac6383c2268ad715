"""Reconcile the state store with the GPUs: finish what crashed hooks left.

Plan first (pure), then apply.  Run inside the store's write transaction, so
no prolog commits an intent between the reads and the actions: any instance
a running prolog creates already has its committed intent.

- an ``intent`` or ``releasing`` record whose owner process is gone was
  left half-way: undo it (destroy its instance if one exists at its
  placement, restore files) and mark it released;
- an instance on a ``mig``-mode GPU that no live record owns is an orphan:
  destroy it once idle;
- everything else, in particular every ``active`` record (a running job's),
  is left alone.
"""

from __future__ import annotations

from slurmpool.gpu.backend import GpuBackendError
from slurmpool.modes import GpuMode
from slurmpool.pooling import owner
from slurmpool.pooling.mig import instance_of
from slurmpool.pooling.release import ReleaseError, destroy, undo
from slurmpool.records import record
from slurmpool.state.store import ACTIVE, RELEASED

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable, Mapping, Sequence

    from slurmpool.gpu.backend import MigInstance
    from slurmpool.pooling.node import Node
    from slurmpool.state.store import Allocation


@record(frozen=True, slots=True)
class ReconcilePlan:
    finish: tuple[Allocation, ...]  # records left half-way by a dead hook
    orphans: tuple[tuple[int, MigInstance], ...]  # (config GPU index, instance)

    @property
    def empty(self) -> bool:
        return not self.finish and not self.orphans


def plan(
    records: Sequence[Allocation],
    instances: Mapping[int, Sequence[MigInstance]],
    owner_alive: Callable[[Allocation], bool],
) -> ReconcilePlan:
    """What to do, from the live records and the instances of each ``mig`` GPU."""
    finish = tuple(r for r in records if r.state != ACTIVE and not owner_alive(r))
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
    return ReconcilePlan(finish, tuple(orphans))


def current_plan(node: Node) -> ReconcilePlan:
    store = node.store()
    records = store.live()
    instances = {
        g.index: node.backend().instances(node.nvml_index(g)) for g in node.gpus(GpuMode.MIG)
    }
    proc_root = node.proc_root
    return plan(records, instances, lambda r: owner.alive(r.owner_pid, r.owner_start, proc_root))


def apply(node: Node, todo: ReconcilePlan) -> list[str]:
    """Carry the plan out (inside the caller's transaction); return what was done."""
    store = node.store()
    done = []
    for r in todo.finish:
        try:
            result = undo(node, r)
        except (ReleaseError, GpuBackendError, OSError) as e:
            node.log.event("reconcile-stuck", level="error", job=r.job_id, alloc=r.id, error=str(e))
            continue
        store.set_owner(r.id, None, None)
        store.set_state(r.id, RELEASED, note=f"reconciled: {result.detail}")
        line = f"job {r.job_id} allocation {r.id} ({r.state}, hook gone): {result.detail}"
        node.log.event("reconcile", job=r.job_id, alloc=r.id, was=r.state, detail=result.detail)
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
            destroy(node, index, inst)
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


def reconcile(node: Node) -> list[str]:
    """Plan and apply (the caller holds the store's write transaction)."""
    todo = current_plan(node)
    return [] if todo.empty else apply(node, todo)
