"""The pools a replay compares: how each pooling policy places one task, and gives it back.

* ``whole``: every task takes whole GPUs (a fraction takes one): the lowest-index
  empty GPUs of the first node that has enough.
* ``mig``: slurmpool as it runs.  Slurm counts per node its ``vgpu`` units and,
  as each MIG-pooled node publishes them (:mod:`slurmpool.fit`, the counts of
  :func:`slurmpool.fit.node_counts`), the instances of each size it could carve
  and its ``next``.  A task's request is rounded up as job_submit.lua does
  (vgpu:5 -> vgpu:7) and asks for its units, the instances they round to
  (:func:`slurmpool.fit.fit_request`: vgpu:4 -> one ``s4``) and one ``next``;
  Slurm starts it on the first node (nodes of equal weight, in order) whose
  counts hold all three.  The prolog then carves with the production rounding
  (:func:`slurmpool.pooling.request.mig_profiles` over
  :func:`slurmpool.configgen.plan.profile_table`) and placement
  (:func:`slurmpool.pooling.mig.plan_instances`), and the node publishes its
  counts again; Slurm sees them only then (:meth:`Pool.publish`, after the
  pass that started the task), so a pass starts at most one task on a node.
* ``mig-blind``: ``mig`` without the published counts: Slurm counts vgpu units
  alone.  When the node's free slices are too fragmented for the instances,
  the task is requeued, as the prolog does, and kept off that node until a
  task on it ends (the prolog adds the node to the job's ExcNodeList, the
  node's epilog takes it out again: :mod:`slurmpool.pooling.exclude`); Slurm's
  next try takes the first other node whose count fits.  (``mig`` keeps the
  same requeue, which its counts leave nothing to do.)
* ``fluid``: the bound no real GPU reaches: a GPU is a pool of compute slices
  with no geometry.  A task on one GPU goes to the GPU with the fewest free
  slices that suffice (ties: lowest index); a multi-GPU task to the node with
  the fewest empty GPUs that suffice, on its lowest-index empty GPUs.

* ``mig-static:<layout>``: every GPU carved once into a fixed layout
  (``3g+2g+2g``; ``7g/7g/3g+2g+2g`` gives the first two GPUs of each node one
  7g instance each and the rest the last layout), its instances Slurm's typed
  ``gpu`` GRES.  A task asks for the smallest instance of the layout that holds
  it (a multi-GPU task: that many full-GPU instances on one node) and Slurm
  gives it the lowest-index free one of the first node that has one.  A task
  no instance holds is refused: the layout cannot run it.
* ``shared:<shares>``: every GPU time-sliced into ``shares`` shares, scheduled
  as Slurm's ``shard`` GRES: a fraction ``m`` asks for ``ceil(shares * m /
  1000)`` shares, all from one GPU (the lowest-index GPU with enough of the
  first node with one); a task of whole GPUs takes GPUs none of whose shares
  are taken.

Each pool answers :meth:`Pool.try_start` with a :class:`Hold` (the task runs),
``None`` (it does not fit now, on any node), :data:`REQUEUED` (``mig`` and
``mig-blind``: Slurm started it and the prolog sent it back) or :data:`KEPT_OFF`
(the same two: the nodes it would fit are those it is kept off).

A backfill scheduler plans as Slurm does, on counts: each pool says what it
counts free on each node (:meth:`Pool.counts`: empty GPUs under ``whole``,
vgpu units under ``mig-blind`` as Slurm's gres count does, those and the
published counts under ``mig``, instances of each size under ``mig-static``,
each GPU's slices under ``fluid`` and its shares under ``shared``, as Slurm
counts shards), what a task needs of them (:meth:`Pool.needs`: one count or
more, all at once, or any k GPUs of a node) and what a hold takes
(:meth:`Pool.counted`).  Under ``mig`` a running task gives back, at its limit,
what Slurm gave it; Slurm does not know that the slices it frees may make room
for an instance of another size, nor plans on counts a node has not published.
A start is then given ``room``, the counts the plan leaves over the task's time
limit, and places only on a node whose room holds its need; where on the node
(which GPU, which slices) is the pool's own rule, as the prolog's is.
"""

from __future__ import annotations

import bisect
import itertools
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Final, Literal, Protocol

from slurmpool.catalogue import CatalogueError
from slurmpool.configgen.plan import profile_table
from slurmpool.fit import NEXT_TYPE, carvable, fit_request, fit_sizes, fit_type, node_counts
from slurmpool.placement import GpuOccupancy, PlacedInstance, engine_for
from slurmpool.pooling.mig import plan_instances
from slurmpool.pooling.request import mig_profiles
from slurmpool.simulate.backfill import AnyOf, Need
from slurmpool.simulate.trace import Task

if TYPE_CHECKING:
    from slurmpool.catalogue import GpuModel

REQUEUED: Final = "requeued"
KEPT_OFF: Final = "kept off"


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
    slices: float  # compute slices it holds (what it keeps from others): a share's part
    # What the pool itself counts: mig, the vgpu units of the node; fluid, the slices
    # of each GPU; shared, the shares of each GPU.
    units: int = 0
    instances: tuple[tuple[int, PlacedInstance], ...] = ()  # mig: (gpu, instance)
    slots: tuple[int, ...] = ()  # mig-static: the node's fixed instances it holds


class Pool(Protocol):
    name: str
    shapes: list[NodeShape]

    @property
    def total_slices(self) -> int: ...

    def check(self, task: Task) -> None:
        """:class:`PoolError` when ``task`` could never run on nodes of this size."""
        ...

    def runs(self, task: Task) -> bool:
        """Whether the policy can run ``task`` at all (``mig-static``: whether its layout
        has an instance that holds it); a task it cannot run is refused, not queued."""
        ...

    def try_start(
        self, task: Task, room: Sequence[int] | None = None
    ) -> Hold | Literal["requeued", "kept off"] | None:
        """Place ``task`` and take what it holds; with ``room`` (per counter, as
        :meth:`counts`), only where its need fits in what that leaves."""
        ...

    def release(self, hold: Hold) -> None: ...

    def occupy(self, hold: Hold) -> None:
        """Take what ``hold`` holds (free here), as :meth:`try_start` does when it places."""
        ...

    def counts(self) -> list[int]:
        """What Slurm counts free now, per counter (a node, or a node's instances of one
        size)."""
        ...

    def needs(self, task: Task) -> Sequence[Need | AnyOf]:
        """What ``task`` needs of the counts in each place it could go (a node, or a GPU),
        in the pool's order."""
        ...

    def counted(self, hold: Hold) -> Need:
        """What of the counts ``hold`` takes."""
        ...

    def publish(self) -> bool:
        """The prologs of the tasks started since the last call tell Slurm what their nodes
        count now (``mig``); True if any did, so that Slurm schedules again."""
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

    def runs(self, task: Task) -> bool:
        return True

    def publish(self) -> bool:
        return False

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

    def try_start(self, task: Task, room: Sequence[int] | None = None) -> Hold | None:
        for node, mask in enumerate(self.empty):
            if room is not None and room[node] < task.gpus:
                continue
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

    def counts(self) -> list[int]:
        return [mask.bit_count() for mask in self.empty]

    def needs(self, task: Task) -> list[Need]:
        return [((n, task.gpus),) for n, s in enumerate(self.shapes) if s.gpus >= task.gpus]

    def counted(self, hold: Hold) -> Need:
        return ((hold.node, len(hold.gpus)),)


class _Counted(_Nodes):
    """A pool that counts what is free on each GPU (fluid: slices; shared: shares); a
    hold takes ``units`` of each of its GPUs.  Its counters are its GPUs, as Slurm
    counts a GRES whose units belong to one GPU each (shards): a task of one GPU needs
    its part of one GPU's count, a task of k GPUs the whole count of k GPUs of a node."""

    def __init__(self, shapes: Sequence[NodeShape], each: Callable[[NodeShape], int]) -> None:
        """``each``: what one GPU of a node of that shape has."""
        super().__init__(shapes)
        self.full = [each(s) for s in self.shapes]  # per node: what one GPU has
        self.free = [[each(s)] * s.gpus for s in self.shapes]  # per node, per GPU
        # Per node, the counter of its first GPU.
        self.first = list(itertools.accumulate((s.gpus for s in self.shapes), initial=0))

    def occupy(self, hold: Hold) -> None:
        for g in hold.gpus:
            self.free[hold.node][g] -= hold.units

    def release(self, hold: Hold) -> None:
        for g in hold.gpus:
            self.free[hold.node][g] += hold.units

    def counts(self) -> list[int]:
        return [free for gpus in self.free for free in gpus]

    def needs(self, task: Task) -> list[Need | AnyOf]:
        needs: list[Need | AnyOf] = []
        for node, shape in enumerate(self.shapes):
            if shape.gpus < task.gpus:
                continue
            each, first = self._each(node, task), self.first[node]
            if task.gpus == 1:
                needs.extend(((first + g, each),) for g in range(shape.gpus))
            else:
                needs.append(AnyOf(task.gpus, tuple((first + g, each) for g in range(shape.gpus))))
        return needs

    def counted(self, hold: Hold) -> Need:
        first = self.first[hold.node]
        return tuple((first + g, hold.units) for g in hold.gpus)

    def _each(self, node: int, task: Task) -> int:
        """What ``task`` takes of each of its GPUs' counts on ``node``."""
        raise NotImplementedError

    def _usable(self, task: Task, room: Sequence[int] | None) -> list[list[int]]:
        """Per node, the GPUs that have ``task``'s part free, within ``room`` (per GPU, as
        :meth:`counts`) where a plan gives it."""
        usable: list[list[int]] = []
        for node, gpus in enumerate(self.free):
            each, first = self._each(node, task), self.first[node]
            usable.append(
                [
                    g
                    for g, free in enumerate(gpus)
                    if free >= each and (room is None or room[first + g] >= each)
                ]
            )
        return usable


class FluidPool(_Counted):
    name = "fluid"

    def __init__(self, shapes: Sequence[NodeShape]) -> None:
        super().__init__(shapes, lambda shape: shape.slices)

    def _each(self, node: int, task: Task) -> int:
        shape = self.shapes[node]
        return shape.demand(task) if task.gpus == 1 else shape.slices

    def try_start(self, task: Task, room: Sequence[int] | None = None) -> Hold | None:
        usable = self._usable(task, room)
        if task.gpus == 1:
            best: tuple[int, int, int] | None = None  # (free, node, gpu)
            for node, gpus in enumerate(usable):
                for g in gpus:
                    free = self.free[node][g]
                    if best is None or free < best[0]:
                        best = (free, node, g)
            if best is None:
                return None
            _, node, g = best
            need = self.shapes[node].demand(task)
            hold = Hold(node, (g,), need, need, units=need)
            self.occupy(hold)
            return hold
        choice: tuple[int, int] | None = None  # (empty GPUs, node)
        for node, gpus in enumerate(usable):
            if len(gpus) >= task.gpus and (choice is None or len(gpus) < choice[0]):
                choice = (len(gpus), node)
        if choice is None:
            return None
        node = choice[1]
        full = self.shapes[node].slices
        chosen = tuple(usable[node][: task.gpus])
        hold = Hold(node, chosen, task.gpus * full, task.gpus * full, units=full)
        self.occupy(hold)
        return hold


class MigBlindPool(_Nodes):
    """``mig-blind``: Slurm counts vgpu units only (slurmpool before its nodes published
    what they can carve, :mod:`slurmpool.fit`), and the prolog requeues a task it cannot
    carve."""

    name = "mig-blind"

    def __init__(self, shapes: Sequence[NodeShape]) -> None:
        super().__init__(shapes)
        self.units = [s.gpus * s.slices for s in self.shapes]  # free vgpu units, per node
        self.gpus = [[GpuOccupancy(g, s.model) for g in range(s.gpus)] for s in self.shapes]
        self._tables = {s.model.name: profile_table(s.model) for s in self.shapes}
        # (GPUs, thousandths) -> per node: (vgpu units Slurm counts, instances carved).
        self._requests: dict[tuple[int, int], list[tuple[int, tuple[str, ...]]]] = {}
        # Per node: instance lists its slices were too fragmented for, as they are now.
        self._misfits: list[set[tuple[str, ...]]] = [set() for _ in self.shapes]
        # The nodes a requeued task is kept off (by id(task)), and the reverse.
        self.kept_off: dict[int, set[int]] = {}
        self.keeping_off: list[set[int]] = [set() for _ in self.shapes]

    def _slices_of(self, shape: NodeShape) -> Callable[[int], int | None]:
        """The compute slices of the profile a ``vgpu:n`` request gets on one GPU of
        ``shape`` (the production rounding), None where none does."""
        table = self._tables[shape.model.name]

        def slices_of(n: int) -> int | None:
            name = table.get(str(n))
            return None if name is None else shape.model.gi_profile(name).slices

        return slices_of

    def _request(self, shape: NodeShape, task: Task) -> tuple[int, tuple[str, ...]]:
        """(vgpu units Slurm counts, the instances the prolog carves) for ``task`` on a node
        of ``shape``: the request rounded up as job_submit.lua does (vgpu:5 -> vgpu:7)."""
        table = self._tables[shape.model.name]
        units = shape.demand(task)
        if units < shape.slices:
            units = shape.model.gi_profile(table[str(units)]).slices
        return units, mig_profiles(units, shape.slices, lambda n: table.get(str(n)))

    def _requests_for(self, task: Task) -> list[tuple[int, tuple[str, ...]]]:
        key = (task.gpus, task.milli)
        requests = self._requests.get(key)
        if requests is None:
            requests = self._requests[key] = [self._request(s, task) for s in self.shapes]
        return requests

    def _fits(self, node: int, units: int, room: Sequence[int] | None) -> bool:
        """Whether Slurm's counts (``room`` where a plan gives them) hold a task of
        ``units`` on ``node``."""
        return (self.units if room is None else room)[node] >= units

    def try_start(
        self, task: Task, room: Sequence[int] | None = None
    ) -> Hold | Literal["requeued", "kept off"] | None:
        requests = self._requests_for(task)
        off = self.kept_off.get(id(task), ())
        fits = False
        for node, request in enumerate(requests):
            if self._fits(node, request[0], room):
                fits = True
                if node not in off:
                    break
        else:
            return KEPT_OFF if fits else None
        units, profiles = request
        shape = self.shapes[node]
        misfit = profiles in self._misfits[node]
        choices = None if misfit else plan_instances(self.gpus[node], profiles)
        if choices is None:  # Slurm's count fitted; the node's slices are fragmented
            self._misfits[node].add(profiles)
            self.kept_off.setdefault(id(task), set()).add(node)
            self.keeping_off[node].add(id(task))
            return REQUEUED
        for other in self.kept_off.pop(id(task), ()):  # a later task may get its id
            self.keeping_off[other].discard(id(task))
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
        self._misfits[hold.node].clear()
        for g, inst in hold.instances:
            gpu = self.gpus[hold.node][g]
            self.gpus[hold.node][g] = GpuOccupancy(gpu.index, gpu.model, (*gpu.instances, inst))

    def release(self, hold: Hold) -> None:
        """Also takes the node out of what requeued tasks are kept off: its epilog."""
        self.units[hold.node] += hold.units
        self._misfits[hold.node].clear()
        for task in self.keeping_off[hold.node]:
            self.kept_off[task].discard(hold.node)
        self.keeping_off[hold.node].clear()
        for g, inst in hold.instances:
            gpu = self.gpus[hold.node][g]
            left = list(gpu.instances)
            left.remove(inst)
            self.gpus[hold.node][g] = GpuOccupancy(gpu.index, gpu.model, tuple(left))

    def counts(self) -> list[int]:
        return list(self.units)

    def needs(self, task: Task) -> list[Need]:
        off = self.kept_off.get(id(task), ())  # the job's ExcNodeList
        return [
            ((n, units),)
            for n, (units, _) in enumerate(self._requests_for(task))
            if units <= self.shapes[n].gpus * self.shapes[n].slices and n not in off
        ]

    def counted(self, hold: Hold) -> Need:
        return ((hold.node, hold.units),)


class MigPool(MigBlindPool):
    """``mig``: slurmpool as it runs.  Beside its vgpu units each node counts, for Slurm,
    the instances of each size it could carve and its ``next`` (:mod:`slurmpool.fit`,
    with the counts the hooks publish: :func:`slurmpool.fit.node_counts`); a task asks
    for its units, the instances its request rounds to (:func:`slurmpool.fit.fit_request`)
    and one ``next``.  Slurm uses them up as it starts tasks; a node's counts change
    only when the node publishes: :meth:`publish` for the prologs of the tasks a pass
    started, :meth:`release` for an epilog."""

    name = "mig"

    def __init__(self, shapes: Sequence[NodeShape]) -> None:
        super().__init__(shapes)
        # Per node: the fit sizes its requests round to, and the first of its counters:
        # its vgpu units, then one per size, then its next.
        self.sizes = [fit_sizes(s.slices, self._slices_of(s)) for s in self.shapes]
        self.first = list(itertools.accumulate((len(z) + 2 for z in self.sizes), initial=0))
        # What Slurm counts free, per counter: what the node published less what Slurm
        # gave the tasks it started there.
        self.free: list[int] = []
        # Per node: what it published last (its sizes, then next), the instances of each
        # size its tasks hold and how many tasks it runs.
        self.published: list[list[int]] = []
        self.held: list[dict[int, int]] = [{} for _ in self.shapes]
        self.jobs = [0] * len(self.shapes)
        # Per node, per GPU: how many of each size it could carve (fit.carvable of it
        # alone), carved again only when its instances change; their sums per node; and
        # the node's types.
        self.can_carve = [
            [carvable([gpu], sizes) for gpu in gpus]
            for gpus, sizes in zip(self.gpus, self.sizes, strict=True)
        ]
        self.can_carve_node = [
            {s: sum(per_gpu[s] for per_gpu in gpus) for s in sizes}
            for gpus, sizes in zip(self.can_carve, self.sizes, strict=True)
        ]
        self.types = [[*map(fit_type, sizes), NEXT_TYPE] for sizes in self.sizes]
        for node, shape in enumerate(self.shapes):
            counts = self._node_counts(node)
            self.published.append(counts)
            self.free.extend([shape.gpus * shape.slices, *counts])
        self.dirty: set[int] = set()  # nodes whose prologs have not published yet
        # (node, vgpu units) -> what a task of those units asks of Slurm there.
        self._needs: dict[tuple[int, int], Need | None] = {}

    def _node_counts(self, node: int) -> list[int]:
        """What ``node`` publishes now: its count of each size, then its next."""
        free = self.can_carve_node[node]
        counts = node_counts(
            self.gpus[node], self.sizes[node], self.held[node], self.jobs[node], free
        )
        return [counts[t] for t in self.types[node]]

    def _need(self, node: int, units: int) -> Need | None:
        """What a task of ``units`` vgpu units asks of Slurm on ``node``: the units, the
        instances they round to and one next (as job_submit.lua asks); None where no
        instance of a size the node counts holds it."""
        key = (node, units)
        if key in self._needs:
            return self._needs[key]
        shape = self.shapes[node]
        fit = fit_request(units, shape.slices, self._slices_of(shape))
        need: Need | None = None
        if fit is not None and fit[0] in self.sizes[node]:
            size, count = fit
            first = self.first[node]
            need = (
                (first, units),
                (first + 1 + self.sizes[node].index(size), count),
                (first + 1 + len(self.sizes[node]), 1),
            )
        self._needs[key] = need
        return need

    def _fits(self, node: int, units: int, room: Sequence[int] | None) -> bool:
        key = (node, units)
        need = self._needs[key] if key in self._needs else self._need(node, units)
        if need is None:
            return False
        free = self.free if room is None else room
        return all(free[counter] >= count for counter, count in need)

    def occupy(self, hold: Hold) -> None:
        super().occupy(hold)
        node = hold.node
        self._recarve(hold)
        for counter, count in self.counted(hold):
            self.free[counter] -= count
        size = self._size(hold)
        self.held[node][size] = self.held[node].get(size, 0) + len(hold.instances)
        self.jobs[node] += 1
        self.dirty.add(node)

    def release(self, hold: Hold) -> None:
        """Slurm gives back what it counted of the task, and the epilog publishes the
        node's counts before Slurm starts anything there: Slurm starts no job on a node
        whose epilog runs (a COMPLETING node: ``cg_node_bitmap`` in node_scheduler.c and
        backfill.c, 22.05, 24.11 and 26.05)."""
        super().release(hold)
        node = hold.node
        self._recarve(hold)
        for counter, count in self.counted(hold):
            self.free[counter] += count
        size = self._size(hold)
        self.held[node][size] -= len(hold.instances)
        self.jobs[node] -= 1
        self._publish(node)

    def _recarve(self, hold: Hold) -> None:
        """What the GPUs ``hold``'s instances are on could carve, now they changed."""
        gpus, sizes = self.gpus[hold.node], self.sizes[hold.node]
        per_gpu, node = self.can_carve[hold.node], self.can_carve_node[hold.node]
        for g in {g for g, _ in hold.instances}:
            new = carvable([gpus[g]], sizes)
            for s in sizes:
                node[s] += new[s] - per_gpu[g][s]
            per_gpu[g] = new

    def publish(self) -> bool:
        if not self.dirty:
            return False
        for node in self.dirty:
            self._publish(node)
        self.dirty.clear()
        return True

    def _publish(self, node: int) -> None:
        counts = self._node_counts(node)
        first = self.first[node] + 1
        for k, (new, old) in enumerate(zip(counts, self.published[node], strict=True)):
            self.free[first + k] += new - old
        self.published[node] = counts

    def _size(self, hold: Hold) -> int:
        """The instance size (compute slices) ``hold``'s instances have: all one size."""
        return self.shapes[hold.node].model.gi_profile(hold.instances[0][1].profile).slices

    def counts(self) -> list[int]:
        return list(self.free)

    def needs(self, task: Task) -> list[Need]:
        off = self.kept_off.get(id(task), ())  # the job's ExcNodeList
        needs: list[Need] = []
        for n, (units, _) in enumerate(self._requests_for(task)):
            need = self._need(n, units)
            shape = self.shapes[n]
            if need is not None and n not in off and units <= shape.gpus * shape.slices:
                needs.append(need)
        return needs

    def counted(self, hold: Hold) -> Need:
        need = self._need(hold.node, hold.units)
        assert need is not None  # it started
        return need


class StaticMigPool(_Nodes):
    """``mig-static:<layout>``: each GPU's instances are made once; a task takes free ones."""

    def __init__(self, shapes: Sequence[NodeShape], layouts: Sequence[Sequence[str]]) -> None:
        super().__init__(shapes)
        self.name = "mig-static:" + "/".join("+".join(layout) for layout in layouts)
        # Per node: its fixed instances, (gpu, instance, compute slices), in GPU order;
        # the compute sizes its layouts offer; and its free instances of each size.
        self.slots: list[list[tuple[int, PlacedInstance, int]]] = []
        self.sizes: list[tuple[int, ...]] = []
        self.free: list[dict[int, list[int]]] = []
        most = max(s.gpus for s in self.shapes)
        if len(layouts) > most:
            raise PoolError(
                f"{self.name} gives {len(layouts)} GPUs a layout and the largest node has "
                f"{most}: give at most {most} (the last one repeats on the GPUs after it)"
            )
        carved: dict[tuple[str, tuple[str, ...]], list[PlacedInstance]] = {}
        for shape in self.shapes:
            slots: list[tuple[int, PlacedInstance, int]] = []
            for g in range(shape.gpus):
                layout = tuple(layouts[min(g, len(layouts) - 1)])
                key = (shape.model.name, layout)
                if key not in carved:
                    carved[key] = _carve(shape.model, layout)
                slots.extend(
                    (g, inst, shape.model.gi_profile(inst.profile).slices) for inst in carved[key]
                )
            free: dict[int, list[int]] = {}
            for n, (_, _, size) in enumerate(slots):
                free.setdefault(size, []).append(n)
            self.slots.append(slots)
            self.sizes.append(tuple(sorted(free)))
            self.free.append(free)
        # Slurm counts each node's instances of each size (a typed gres): their counters.
        # Per node, the counter of its smallest size.
        self.first = list(itertools.accumulate(map(len, self.sizes), initial=0))[:-1]
        self.capacity = self.counts()  # per counter, the instances there are

    def _size(self, node: int, task: Task) -> int | None:
        """The instance size (compute slices) ``task`` asks for on ``node``: the smallest
        of its layouts that holds the task (a whole GPU's for whole-GPU tasks)."""
        shape = self.shapes[node]
        need = shape.demand(task) if task.fraction else shape.slices
        return next((size for size in self.sizes[node] if size >= need), None)

    def runs(self, task: Task) -> bool:
        for node in range(len(self.shapes)):
            size = self._size(node, task)
            if size is None:
                continue
            count = sum(1 for _, _, s in self.slots[node] if s == size)
            if task.fraction or count >= task.gpus:
                return True
        return False

    def try_start(self, task: Task, room: Sequence[int] | None = None) -> Hold | None:
        for node in range(len(self.shapes)):
            size = self._size(node, task)
            if size is None:
                continue
            if room is not None and room[self._counter(node, size)] < task.gpus:
                continue
            free = self.free[node].get(size, [])
            if len(free) >= task.gpus:
                chosen = tuple(free[: task.gpus])
                slots = self.slots[node]
                hold = Hold(
                    node,
                    tuple(dict.fromkeys(slots[n][0] for n in chosen)),
                    self.shapes[node].demand(task),
                    size * task.gpus,
                    instances=tuple((slots[n][0], slots[n][1]) for n in chosen),
                    slots=chosen,
                )
                self.occupy(hold)
                return hold
        return None

    def occupy(self, hold: Hold) -> None:
        for n in hold.slots:
            self.free[hold.node][self.slots[hold.node][n][2]].remove(n)

    def release(self, hold: Hold) -> None:
        for n in hold.slots:
            bisect.insort(self.free[hold.node][self.slots[hold.node][n][2]], n)

    def _counter(self, node: int, size: int) -> int:
        return self.first[node] + self.sizes[node].index(size)

    def counts(self) -> list[int]:
        return [
            len(free[size])
            for free, sizes in zip(self.free, self.sizes, strict=True)
            for size in sizes
        ]

    def needs(self, task: Task) -> list[Need]:
        needs: list[Need] = []
        for node in range(len(self.shapes)):
            size = self._size(node, task)
            if size is None:
                continue
            counter = self._counter(node, size)
            if self.capacity[counter] >= task.gpus:
                needs.append(((counter, task.gpus),))
        return needs

    def counted(self, hold: Hold) -> Need:
        size = self.slots[hold.node][hold.slots[0]][2]
        return ((self._counter(hold.node, size), len(hold.slots)),)


def _carve(model: GpuModel, layout: Sequence[str]) -> list[PlacedInstance]:
    """The instances ``layout`` makes on one empty GPU of ``model``, where the production
    placement engine puts them, in placement order."""
    try:
        names = [model.gi_profile(name).name for name in layout]
    except CatalogueError as e:
        raise PoolError(f"mig-static: {e}") from None
    engine = engine_for(model)
    placements = engine.plan(names)
    if placements is None:
        raise PoolError(
            f"mig-static: layout {' + '.join(names)} does not fit one {model.name}: "
            f"{engine.explain_misfit(names)}"
        )
    instances = [PlacedInstance(n, pl) for n, pl in zip(names, placements, strict=True)]
    return sorted(instances, key=lambda inst: inst.placement)


class SharedPool(_Counted):
    """``shared:<shares>``: each GPU time-sliced into ``shares`` shares (Slurm shards)."""

    def __init__(self, shapes: Sequence[NodeShape], shares: int) -> None:
        if shares < 1:
            raise PoolError(f"shared:{shares}: expected 1 or more shares per GPU")
        super().__init__(shapes, lambda shape: shares)
        self.name = f"shared:{shares}"
        self.shares = shares

    def _each(self, node: int, task: Task) -> int:
        total = self.shares
        return min(total, -(-total * task.milli // 1000)) if task.fraction else total

    def try_start(self, task: Task, room: Sequence[int] | None = None) -> Hold | None:
        total = self.shares
        for node, gpus in enumerate(self._usable(task, room)):
            if len(gpus) < task.gpus:
                continue
            shape = self.shapes[node]
            if task.fraction:
                need = self._each(node, task)
                hold = Hold(node, (gpus[0],), shape.demand(task), shape.slices * need / total, need)
            else:
                whole = task.gpus * shape.slices
                hold = Hold(node, tuple(gpus[: task.gpus]), whole, whole, total)
            self.occupy(hold)
            return hold
        return None


# The policies: name -> (what its argument is, None for none; how it makes a pool).
POLICIES: dict[str, str | None] = {
    "whole": None,
    "mig": None,
    "mig-blind": None,
    "fluid": None,
    "mig-static": "a MIG layout such as 3g+2g+2g, or 7g/3g+2g+2g per GPU",
    "shared": "the shares of each GPU, such as 4",
}


def make_pool(policy: str, shapes: Sequence[NodeShape]) -> Pool:
    """The pool ``policy`` (``whole``, ``mig-static:3g+2g+2g``, ``shared:4``...) makes of
    nodes of ``shapes``."""
    name, colon, arg = policy.partition(":")
    if name not in POLICIES:
        raise PoolError(f"no policy {policy!r}; expected one of {policy_words()}")
    wants = POLICIES[name]
    if wants is None:
        if colon:
            raise PoolError(f"policy {policy!r}: {name} takes no argument; expected {name}")
    elif not arg:
        raise PoolError(f"policy {policy!r}: expected {name}:<{wants}>")
    if name == "whole":
        return WholePool(shapes)
    if name == "mig":
        return MigPool(shapes)
    if name == "mig-blind":
        return MigBlindPool(shapes)
    if name == "fluid":
        return FluidPool(shapes)
    if name == "mig-static":
        layouts = [[p for p in gpu.split("+")] for gpu in arg.split("/")]
        if any(not p for layout in layouts for p in layout):
            raise PoolError(f"policy {policy!r}: an empty profile name; expected {wants}")
        return StaticMigPool(shapes, layouts)
    if not arg.isdigit():
        raise PoolError(f"policy {policy!r}: {arg!r} is not a whole number; expected {wants}")
    return SharedPool(shapes, int(arg))


def policy_words() -> str:
    """The policies as a user writes them, for messages and help."""
    return ", ".join(name if arg is None else f"{name}:<...>" for name, arg in POLICIES.items())
