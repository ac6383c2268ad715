"""MIG mode decisions (pure): what each GPU holds, where new instances go,
and which existing instance a record owns.

A GPU's occupancy is the union of the placements of its live records
(an intent's instance may not exist yet) and of the instances NVML reports
(an instance nobody recorded still blocks its slices).
"""

from __future__ import annotations

from slurmpool.catalogue import CatalogueError
from slurmpool.modes import GpuMode
from slurmpool.placement import GpuOccupancy, PlacedInstance, Placement, choose_gpu
from slurmpool.records import record

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Mapping, Sequence

    from slurmpool.catalogue import GpuModel
    from slurmpool.gpu.backend import MigInstance
    from slurmpool.placement import NodeChoice
    from slurmpool.state.store import Allocation


@record(frozen=True, slots=True)
class MigGpu:
    """One ``mig``-mode GPU of the node: config index, catalogue model, GPU UUID."""

    index: int
    model: GpuModel
    uuid: str


def occupancy(
    gpus: Sequence[MigGpu],
    records: Sequence[Allocation],
    instances: Mapping[int, Sequence[MigInstance]],
) -> list[GpuOccupancy]:
    """What blocks each GPU's slices: live records plus instances that exist."""
    out = []
    for gpu in gpus:
        placed: dict[tuple[int, int], PlacedInstance] = {}
        for r in records:
            pl = r.placement
            if r.mode is GpuMode.MIG and r.gpu_index == gpu.index and pl is not None:
                placed[pl] = PlacedInstance(r.profile or "?", Placement(*pl))
        for inst in instances.get(gpu.index, ()):
            key = (inst.placement.start, inst.placement.size)
            placed.setdefault(key, PlacedInstance(inst.profile, inst.placement))
        out.append(GpuOccupancy(gpu.index, gpu.model, tuple(placed.values())))
    return out


def plan_instances(
    gpus: Sequence[GpuOccupancy], profiles: Sequence[str]
) -> list[NodeChoice] | None:
    """Where each of ``profiles`` goes (largest first, one at a time), or None if not all fit."""
    current = list(gpus)
    order = sorted(range(len(profiles)), key=lambda i: -_slices(current, profiles[i]))
    chosen: dict[int, NodeChoice] = {}
    for i in order:
        choice = choose_gpu(current, profiles[i])
        if choice is None:
            return None
        chosen[i] = choice
        current = [
            GpuOccupancy(
                g.index,
                g.model,
                (*g.instances, PlacedInstance(profiles[i], choice.placement)),
            )
            if g.index == choice.gpu_index
            else g
            for g in current
        ]
    return [chosen[i] for i in range(len(profiles))]


def _slices(gpus: Sequence[GpuOccupancy], profile: str) -> int:
    for g in gpus:
        try:
            return g.model.gi_profile(profile).slices
        except CatalogueError:
            continue
    return 0


def instance_of(record: Allocation, instances: Sequence[MigInstance]) -> MigInstance | None:
    """The instance (among ``instances``, those of the record's GPU) a record owns:
    by MIG UUID once known, else by placement.

    GI ids are reused after a destroy, so a GI id alone never identifies an
    instance; a recorded UUID must match, and a record without one (an intent)
    owns only an instance at exactly its placement.
    """
    pl = record.placement
    for inst in instances:
        if record.mig_uuid is not None:
            if inst.uuid == record.mig_uuid:
                return inst
            continue
        if pl is not None and (inst.placement.start, inst.placement.size) == pl:
            return inst
    return None
