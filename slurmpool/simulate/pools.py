"""The pools a replay compares: how each pooling policy places one task, and gives it back.

* ``whole``: every task takes whole GPUs (a fraction takes one): the lowest-index
  empty GPUs of the first node that has enough.
* ``mig``: slurmpool as it runs.  Slurm counts ``vgpu`` units per node and starts
  the task on the first node with enough free units (nodes of equal weight, in
  order), its request rounded up as job_submit.lua does (vgpu:5 -> vgpu:7); the
  prolog then carves with the production rounding
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

import copy
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Final, Literal, Protocol

from slurmpool.configgen.plan import profile_table
from slurmpool.placement import GpuOccupancy, PlacedInstance
from slurmpool.pooling.mig import plan_instances
from slurmpool.pooling.request import mig_profiles
from slurmpool.simulate.trace import Task

if TYPE_CHECKING:
    from slurmpool.catalogue import GpuModel

REQUEUED: Final = "requeued"


class PoolError(ValueError):
    """A pool that cannot be modelled, or a task it can never run."""


@dataclass(frozen=True, slots=True)
class NodeShape:
    """One node of a modelled pool: how many GPUs, of which model (with MIG)."""

    gpus: int
    model: GpuModel

    @property
    def slices(self) -> int:
        """Compute slices of one of its GPUs."""
        assert self.model.mig is not None
        return self.model.mig.compute_slices

    def demand(self, task: Task) -> int:
        """The compute slices ``task`` asks for on this node."""
        return task.slices(self.slices) if task.fraction else task.gpus * self.slices


def uniform(nodes: int, gpus_per_node: int, model: GpuModel) -> list[NodeShape]:
    """``nodes`` alike nodes."""
    return [NodeShape(gpus_per_node, model)] * nodes


@dataclass(slots=True)
class Hold:
    """What a running task holds, for :meth:`Pool.release`."""

    node: int
    gpus: tuple[int, ...]  # GPU indices within the node
    asked: int  # compute slices the task asked for there
    slices: int  # compute slices it holds (what it keeps from others)
    units: int = 0  # mig: the vgpu units Slurm counts
    instances: tuple[tuple[int, PlacedInstance], ...] = ()  # mig: (gpu, instance)


class Pool(Protocol):
    name: str

    @property
    def total_slices(self) -> int: ...

    def check(self, task: Task) -> None:
        """:class:`PoolError` when ``task`` could never run here."""
        ...

    def try_start(self, task: Task) -> Hold | Literal["requeued"] | None: ...

    def release(self, hold: Hold) -> None: ...

    def occupy(self, hold: Hold) -> None:
        """Take what ``hold`` holds (free here), as :meth:`try_start` does when it places."""
        ...

    def clone(self) -> Pool:
        """A copy to try things on (a backfill reservation) without touching this one."""
        ...


class _Nodes:
    """What every pool knows of its nodes."""

    def __init__(self, shapes: Sequence[NodeShape]) -> None:
        if not shapes:
            raise PoolError("a pool of no nodes: expected at least one node")
        for shape in shapes:
            if shape.gpus < 1:
                raise PoolError(f"a node of {shape.gpus} GPUs: expected at least one GPU")
            if shape.model.mig is None:
                raise PoolError(
                    f"{shape.model.name} has no MIG, so its GPUs have no compute slices "
                    "to pool; pick a model with MIG (`slurmpool models`)"
                )
        self.shapes = list(shapes)

    @property
    def total_slices(self) -> int:
        return sum(s.gpus * s.slices for s in self.shapes)

    def check(self, task: Task) -> None:
        most = max(s.gpus for s in self.shapes)
        if task.gpus > most:
            raise PoolError(
                f"task {task.name} asks for {task.gpus} GPUs and the largest node has "
                f"{most}: it could never run"
            )


def _lowest(mask: int, n: int) -> tuple[int, ...]:
    """The ``n`` lowest set bits of ``mask``, as indices."""
    out: list[int] = []
    while len(out) < n:
        low = mask & -mask
        out.append(low.bit_length() - 1)
        mask ^= low
    return tuple(out)


class WholePool(_Nodes):
    name = "whole"

    def __init__(self, shapes: Sequence[NodeShape]) -> None:
        super().__init__(shapes)
        self.empty = [(1 << s.gpus) - 1 for s in self.shapes]  # per node: empty GPUs

    def try_start(self, task: Task) -> Hold | None:
        for node, mask in enumerate(self.empty):
            if mask.bit_count() >= task.gpus:
                shape = self.shapes[node]
                hold = Hold(
                    node, _lowest(mask, task.gpus), shape.demand(task), task.gpus * shape.slices
                )
                self.occupy(hold)
                return hold
        return None

    def occupy(self, hold: Hold) -> None:
        for g in hold.gpus:
            self.empty[hold.node] &= ~(1 << g)

    def release(self, hold: Hold) -> None:
        for g in hold.gpus:
            self.empty[hold.node] |= 1 << g

    def clone(self) -> WholePool:
        other = copy.copy(self)
        other.empty = list(self.empty)
        return other


class FluidPool(_Nodes):
    name = "fluid"

    def __init__(self, shapes: Sequence[NodeShape]) -> None:
        super().__init__(shapes)
        self.free = [[s.slices] * s.gpus for s in self.shapes]  # per node, per GPU

    def try_start(self, task: Task) -> Hold | None:
        if task.gpus == 1:
            best: tuple[int, int, int] | None = None  # (free, node, gpu)
            for node, gpus in enumerate(self.free):
                need = self.shapes[node].demand(task)
                for g, free in enumerate(gpus):
                    if need <= free and (best is None or free < best[0]):
                        best = (free, node, g)
            if best is None:
                return None
            _, node, g = best
            need = self.shapes[node].demand(task)
            hold = Hold(node, (g,), need, need)
            self.occupy(hold)
            return hold
        choice: tuple[int, int] | None = None  # (empty GPUs, node)
        for node, gpus in enumerate(self.free):
            full = self.shapes[node].slices
            empty = sum(1 for free in gpus if free == full)
            if empty >= task.gpus and (choice is None or empty < choice[0]):
                choice = (empty, node)
        if choice is None:
            return None
        node = choice[1]
        full = self.shapes[node].slices
        taken = tuple(g for g, free in enumerate(self.free[node]) if free == full)[: task.gpus]
        hold = Hold(node, taken, task.gpus * full, task.gpus * full)
        self.occupy(hold)
        return hold

    def occupy(self, hold: Hold) -> None:
        per_gpu = hold.slices // len(hold.gpus)
        for g in hold.gpus:
            self.free[hold.node][g] -= per_gpu

    def release(self, hold: Hold) -> None:
        per_gpu = hold.slices // len(hold.gpus)
        for g in hold.gpus:
            self.free[hold.node][g] += per_gpu

    def clone(self) -> FluidPool:
        other = copy.copy(self)
        other.free = [list(gpus) for gpus in self.free]
        return other


class MigPool(_Nodes):
    name = "mig"

    def __init__(self, shapes: Sequence[NodeShape]) -> None:
        super().__init__(shapes)
        self.units = [s.gpus * s.slices for s in self.shapes]  # free vgpu units, per node
        self.gpus = [[GpuOccupancy(g, s.model) for g in range(s.gpus)] for s in self.shapes]
        self._tables = {s.model.name: profile_table(s.model) for s in self.shapes}
        self._requests: dict[tuple[str, int, int], tuple[int, tuple[str, ...]]] = {}

    def _request(self, shape: NodeShape, task: Task) -> tuple[int, tuple[str, ...]]:
        """(vgpu units Slurm counts, the instances the prolog carves) for ``task``: the
        request rounded up as job_submit.lua does (vgpu:5 -> vgpu:7)."""
        key = (shape.model.name, task.gpus, task.milli)
        known = self._requests.get(key)
        if known is not None:
            return known
        table = self._tables[shape.model.name]
        units = shape.demand(task)
        if units < shape.slices:
            units = shape.model.gi_profile(table[str(units)]).slices
        request = units, mig_profiles(units, shape.slices, lambda n: table.get(str(n)))
        self._requests[key] = request
        return request

    def try_start(self, task: Task) -> Hold | Literal["requeued"] | None:
        for node, shape in enumerate(self.shapes):
            units, profiles = self._request(shape, task)
            if self.units[node] >= units:
                break
        else:
            return None
        choices = plan_instances(self.gpus[node], profiles)
        if choices is None:
            return REQUEUED  # Slurm's count fitted; the node's slices are fragmented
        placed = tuple(
            (choice.gpu_index, PlacedInstance(profile, choice.placement))
            for profile, choice in zip(profiles, choices, strict=True)
        )
        slices = sum(shape.model.gi_profile(p).slices for p in profiles)
        gpus = tuple(dict.fromkeys(g for g, _ in placed))
        hold = Hold(node, gpus, shape.demand(task), slices, units, placed)
        self.occupy(hold)
        return hold

    def occupy(self, hold: Hold) -> None:
        self.units[hold.node] -= hold.units
        for g, inst in hold.instances:
            gpu = self.gpus[hold.node][g]
            self.gpus[hold.node][g] = GpuOccupancy(gpu.index, gpu.model, (*gpu.instances, inst))

    def release(self, hold: Hold) -> None:
        self.units[hold.node] += hold.units
        for g, inst in hold.instances:
            gpu = self.gpus[hold.node][g]
            left = list(gpu.instances)
            left.remove(inst)
            self.gpus[hold.node][g] = GpuOccupancy(gpu.index, gpu.model, tuple(left))

    def clone(self) -> MigPool:
        other = copy.copy(self)  # shares the rounding tables and caches
        other.units = list(self.units)
        other.gpus = [list(gpus) for gpus in self.gpus]
        return other


POOLS: dict[str, type[WholePool] | type[FluidPool] | type[MigPool]] = {
    "whole": WholePool,
    "mig": MigPool,
    "fluid": FluidPool,
}
POLICIES = tuple(POOLS)


def make_pool(policy: str, shapes: Sequence[NodeShape]) -> Pool:
    """The pool ``policy`` makes of nodes of ``shapes``."""
    pool = POOLS.get(policy)
    if pool is None:
        raise PoolError(f"no policy {policy!r}; expected one of {', '.join(POLICIES)}")
    return pool(shapes)
