"""The pools a replay compares: how each pooling policy places one task, and gives it back.

* ``whole``: every task takes whole GPUs (a fraction takes one): the lowest-index
  empty GPUs of the first node that has enough.
* ``mig``: slurmpool as it runs.  Slurm counts ``vgpu`` units per node and starts
  the task on the first node with enough free units (nodes of equal weight, in
  order); the prolog then carves with the production rounding
  (:func:`slurmpool.pooling.request.mig_profiles` over
  :func:`slurmpool.configgen.plan.profile_table`) and placement
  (:func:`slurmpool.pooling.mig.plan_instances`).  When the node's free slices
  are too fragmented for the instances, the task is requeued, as the prolog
  does, and waits for the next scan.
* ``fluid``: the bound no real GPU reaches: a GPU is a pool of compute slices
  with no geometry.  A task on one GPU goes to the GPU with the fewest free
  slices that suffice (ties: lowest index); a multi-GPU task to the node with
  the fewest empty GPUs that suffice, on its lowest-index empty GPUs.

Each pool answers :meth:`Pool.try_start` with a :class:`Hold` (the task runs),
``None`` (it does not fit now) or :data:`REQUEUED` (``mig`` only: Slurm
started it and the prolog sent it back).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Final, Literal, Protocol

from slurmpool.configgen.plan import profile_table
from slurmpool.placement import GpuOccupancy, PlacedInstance
from slurmpool.pooling.mig import plan_instances
from slurmpool.pooling.request import mig_profiles
from slurmpool.simulate.trace import Task

if TYPE_CHECKING:
    from slurmpool.catalogue import GpuModel

POLICIES = ("whole", "mig", "fluid")
REQUEUED: Final = "requeued"


class PoolError(ValueError):
    """A pool that cannot be modelled, or a task it can never run."""


@dataclass(slots=True)
class Hold:
    """What a running task holds, for :meth:`Pool.release`."""

    node: int
    gpus: tuple[int, ...]  # GPU indices within the node
    slices: int  # compute slices allocated (what the task keeps from others)
    units: int = 0  # mig: the vgpu units Slurm counts
    instances: tuple[tuple[int, PlacedInstance], ...] = ()  # mig: (gpu, instance)


class Pool(Protocol):
    name: str
    slices_per_gpu: int

    @property
    def total_slices(self) -> int: ...

    def demand(self, task: Task) -> int:
        """The compute slices ``task`` asks for."""
        ...

    def check(self, task: Task) -> None:
        """:class:`PoolError` when ``task`` could never run here."""
        ...

    def try_start(self, task: Task) -> Hold | Literal["requeued"] | None: ...

    def release(self, hold: Hold) -> None: ...


@dataclass
class _Shape:
    nodes: int
    gpus_per_node: int
    slices_per_gpu: int

    def __post_init__(self) -> None:
        if self.nodes < 1 or self.gpus_per_node < 1:
            raise PoolError(
                f"a pool of {self.nodes} nodes of {self.gpus_per_node} GPUs: "
                "expected at least one node with at least one GPU"
            )

    @property
    def total_slices(self) -> int:
        return self.nodes * self.gpus_per_node * self.slices_per_gpu

    def demand(self, task: Task) -> int:
        if task.fraction:
            return task.slices(self.slices_per_gpu)
        return task.gpus * self.slices_per_gpu

    def check(self, task: Task) -> None:
        if task.gpus > self.gpus_per_node:
            raise PoolError(
                f"task {task.name} asks for {task.gpus} GPUs and a node has "
                f"{self.gpus_per_node}: it could never run (pass --gpus-per-node {task.gpus} "
                "or more)"
            )


def _lowest(mask: int, n: int) -> tuple[int, ...]:
    """The ``n`` lowest set bits of ``mask``, as indices."""
    out: list[int] = []
    while len(out) < n:
        low = mask & -mask
        out.append(low.bit_length() - 1)
        mask ^= low
    return tuple(out)


@dataclass
class WholePool(_Shape):
    name: str = "whole"
    empty: list[int] = field(init=False)  # per node: a bitmask of its empty GPUs

    def __post_init__(self) -> None:
        super().__post_init__()
        self.empty = [(1 << self.gpus_per_node) - 1] * self.nodes

    def try_start(self, task: Task) -> Hold | None:
        for node, mask in enumerate(self.empty):
            if mask.bit_count() >= task.gpus:
                gpus = _lowest(mask, task.gpus)
                for g in gpus:
                    self.empty[node] &= ~(1 << g)
                return Hold(node, gpus, task.gpus * self.slices_per_gpu)
        return None

    def release(self, hold: Hold) -> None:
        for g in hold.gpus:
            self.empty[hold.node] |= 1 << g


@dataclass
class FluidPool(_Shape):
    name: str = "fluid"
    free: list[list[int]] = field(init=False)  # per node, per GPU: free compute slices

    def __post_init__(self) -> None:
        super().__post_init__()
        self.free = [[self.slices_per_gpu] * self.gpus_per_node for _ in range(self.nodes)]

    def try_start(self, task: Task) -> Hold | None:
        if task.gpus == 1:
            need = self.demand(task)
            best: tuple[int, int, int] | None = None  # (free, node, gpu)
            for node, gpus in enumerate(self.free):
                for g, free in enumerate(gpus):
                    if need <= free and (best is None or free < best[0]):
                        best = (free, node, g)
                        if free == need:
                            break
                if best is not None and best[0] == need:
                    break
            if best is None:
                return None
            _, node, g = best
            self.free[node][g] -= need
            return Hold(node, (g,), need)
        full = self.slices_per_gpu
        choice: tuple[int, int] | None = None  # (empty GPUs, node)
        for node, gpus in enumerate(self.free):
            empty = sum(1 for free in gpus if free == full)
            if empty >= task.gpus and (choice is None or empty < choice[0]):
                choice = (empty, node)
        if choice is None:
            return None
        node = choice[1]
        taken = tuple(g for g, free in enumerate(self.free[node]) if free == full)[: task.gpus]
        for g in taken:
            self.free[node][g] = 0
        return Hold(node, taken, task.gpus * full)

    def release(self, hold: Hold) -> None:
        per_gpu = hold.slices // len(hold.gpus)
        for g in hold.gpus:
            self.free[hold.node][g] += per_gpu


@dataclass
class MigPool(_Shape):
    model: GpuModel | None = None
    name: str = "mig"
    units: list[int] = field(init=False)  # per node: free vgpu units, as Slurm counts
    gpus: list[list[GpuOccupancy]] = field(init=False)  # per node: each GPU's instances

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.model is None or self.model.mig is None:
            raise PoolError("the mig policy needs a GPU model with MIG")
        self._profiles = profile_table(self.model)
        self._rounded = {int(n): self.model.gi_profile(p).slices for n, p in self._profiles.items()}
        self.units = [self.gpus_per_node * self.slices_per_gpu] * self.nodes
        self.gpus = [
            [GpuOccupancy(g, self.model) for g in range(self.gpus_per_node)]
            for _ in range(self.nodes)
        ]

    def _profiles_for(self, units: int) -> tuple[str, ...]:
        return mig_profiles(units, self.slices_per_gpu, lambda n: self._profiles.get(str(n)))

    def try_start(self, task: Task) -> Hold | Literal["requeued"] | None:
        # job_submit.lua rounds vgpu:N up to a size one GPU hands out (vgpu:5 -> vgpu:7).
        units = self.demand(task)
        if units < self.slices_per_gpu:
            units = self._rounded[units]
        node = next((n for n, free in enumerate(self.units) if free >= units), None)
        if node is None:
            return None
        profiles = self._profiles_for(units)
        choices = plan_instances(self.gpus[node], profiles)
        if choices is None:
            return REQUEUED  # Slurm's count fitted; the node's slices are fragmented
        assert self.model is not None
        placed = []
        for profile, choice in zip(profiles, choices, strict=True):
            inst = PlacedInstance(profile, choice.placement)
            gpu = self.gpus[node][choice.gpu_index]
            self.gpus[node][choice.gpu_index] = GpuOccupancy(
                gpu.index, gpu.model, (*gpu.instances, inst)
            )
            placed.append((choice.gpu_index, inst))
        self.units[node] -= units
        slices = sum(self.model.gi_profile(p).slices for p in profiles)
        gpus = tuple(dict.fromkeys(g for g, _ in placed))
        return Hold(node, gpus, slices, units, tuple(placed))

    def release(self, hold: Hold) -> None:
        self.units[hold.node] += hold.units
        for g, inst in hold.instances:
            gpu = self.gpus[hold.node][g]
            left = list(gpu.instances)
            left.remove(inst)
            self.gpus[hold.node][g] = GpuOccupancy(gpu.index, gpu.model, tuple(left))


def make_pool(policy: str, nodes: int, gpus_per_node: int, model: GpuModel) -> Pool:
    """The pool ``policy`` makes of ``nodes`` nodes of ``gpus_per_node`` GPUs of ``model``."""
    if model.mig is None:
        raise PoolError(
            f"{model.name} has no MIG, so its GPUs have no compute slices to pool; "
            "pick a model with MIG (`slurmpool models`)"
        )
    slices = model.mig.compute_slices
    if policy == "whole":
        return WholePool(nodes, gpus_per_node, slices)
    if policy == "fluid":
        return FluidPool(nodes, gpus_per_node, slices)
    if policy == "mig":
        return MigPool(nodes, gpus_per_node, slices, model)
    raise PoolError(f"no policy {policy!r}; expected one of {', '.join(POLICIES)}")
