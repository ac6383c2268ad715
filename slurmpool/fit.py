"""What a MIG-pooled node tells Slurm it can carve (pure).

Slurm counts ``vgpu`` units per node, while a MIG instance needs a place on one GPU:
a node whose free units are in pieces would be sent jobs it cannot carve.  Beside
``vgpu`` each MIG-pooled node therefore has one typed count GRES, :data:`FIT_GRES`,
with a type per instance size in compute slices (``vgpufit:s4``), for a vgpu job to
ask for the instances its request rounds to (:func:`fit_request`: ``vgpu:4`` ->
``vgpufit:s4:1``, ``vgpu:14`` on A100 -> ``vgpufit:s7:2``).  Slurm uses counts up as
it starts jobs, so one scheduling pass starts no more of a size than the node counts
(measured on 22.05, 24.11 and 26.05 by ``tests/data/probe-count-gres.sh``; the README
says why counts and not features or Extra).

A node's count of a size is how many instances of it the node's jobs hold plus how
many more the node could carve now: Slurm subtracts what it allocated to its jobs, so
what it sees free is what can be carved.

Counts of different sizes are used up independently, while instances of different sizes
compete for the same slices: one scheduling pass may start a 3g and a 2g on a node that
counts one of each but can carve only one of them (measured: 4 requeued runs in a burst
of 36 mixed jobs on the sandbox).  So every vgpu job also asks for one :data:`NEXT_TYPE`,
whose count is the node's jobs plus one (:func:`next_count`): Slurm then starts at most
one job on a node that the node has not yet counted, and the hook publishes again once
its job holds its instance (a node update triggers Slurm's next scheduling pass).

gres.conf's counts (an empty node's) and the counts the hooks publish
(:mod:`slurmpool.pooling.publish`) come from here, and ``slurmpool simulate``'s are to.
"""

from __future__ import annotations

from slurmpool.placement import GpuOccupancy, free_capacity

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable, Iterable, Mapping, Sequence

    from slurmpool.catalogue import GpuInstanceProfile, GpuModel

FIT_GRES = "vgpufit"
_TYPE_PREFIX = "s"
# The fit type that counts jobs, not instances: a node's jobs plus the one more it may be
# sent before it publishes again.  No digits after the "s" prefix: not a size.
NEXT_TYPE = "next"
# The fit type no job asks for, which keeps the node's vgpufit total what gres.conf says:
# slurmctld sets a node INVAL when slurmd registers a GRES total other than the one it
# has while jobs use that GRES ("count changed and jobs are using them", 22.05 gres.c
# _node_config_validate), so the counts may move between types but not change the sum.
PAD_TYPE = "pad"


def fit_type(slices: int) -> str:
    """The GRES type of instances of ``slices`` compute slices: ``s4``.

    A letter first: Slurm reads a GRES field of digits (and a k/m/g suffix) as a count.
    """
    name = _TYPES.get(slices)
    if name is None:
        name = _TYPES[slices] = f"{_TYPE_PREFIX}{slices}"
    return name


_TYPES: dict[int, str] = {}  # fit_type's names, made once (a replay asks millions of times)


def fit_slices(gres_type: str) -> int | None:
    """The size a :func:`fit_type` names, or None for a type that is not one."""
    digits = gres_type[len(_TYPE_PREFIX) :]
    if not gres_type.startswith(_TYPE_PREFIX) or not digits.isdigit():
        return None
    return int(digits)


def fit_sizes(units_per_gpu: int, slices_of: Callable[[int], int | None]) -> tuple[int, ...]:
    """The instance sizes vgpu requests round to on a node, smallest first.

    ``slices_of(n)``: the compute slices of the profile a ``vgpu:n`` request gets on
    one GPU (None where none does), for n up to one GPU's units.
    """
    sizes = {slices_of(n) for n in range(1, units_per_gpu + 1)}
    return tuple(sorted(s for s in sizes if s is not None))


def fit_request(
    count: int, units_per_gpu: int, slices_of: Callable[[int], int | None]
) -> tuple[int, int] | None:
    """What a ``vgpu:count`` request asks of :data:`FIT_GRES`: (instance size, how
    many), or None for a request the node cannot serve (job_submit refuses those).

    Up to one GPU, one instance of the smallest profile that holds ``count`` units;
    above it, whole GPUs (a whole multiple of one GPU's units).
    """
    if count < 1:
        return None
    if count <= units_per_gpu:
        size = slices_of(count)
        return None if size is None else (size, 1)
    whole = slices_of(units_per_gpu)
    if count % units_per_gpu or whole is None:
        return None
    return whole, count // units_per_gpu


def carvable(gpus: Iterable[GpuOccupancy], sizes: Iterable[int]) -> dict[int, int]:
    """For each size in ``sizes``: how many instances of that size the node's MIG GPUs
    could take now, one size at a time, summed over the GPUs.

    The standard profile of each size (``free_capacity``) counts placements that do
    not overlap what each GPU holds, bounded by the profile's per-GPU maximum; a
    profile's placements tile a board without overlapping one another, so they fit
    all at once.
    """
    by_slices = free_capacity(list(gpus), key=_slices)
    return {s: by_slices.get(s, 0) for s in sizes}


def published_counts(held: Mapping[int, int], free: Mapping[int, int]) -> dict[int, int]:
    """The count of each size the node publishes: the instances of it the node's jobs
    hold (``held``) plus what it could carve now (``free``)."""
    return {s: held.get(s, 0) + n for s, n in free.items()}


def node_counts(
    gpus: Sequence[GpuOccupancy],
    sizes: Iterable[int],
    held: Mapping[int, int],
    held_jobs: int,
    free: Mapping[int, int] | None = None,
) -> dict[str, int]:
    """Every :data:`FIT_GRES` type's count on a node whose MIG GPUs hold what ``gpus``
    say: each size's (:func:`published_counts` of ``held`` and what can be carved),
    :data:`NEXT_TYPE`'s from the ``held_jobs`` jobs holding them, and :data:`PAD_TYPE`'s.
    An empty node's (no instance, nothing held) are what gres.conf says.  ``free``:
    :func:`carvable` of ``gpus``, where the caller keeps it already (a replay, which
    sums it over the GPUs and carves again only those that changed)."""
    sizes = tuple(sizes)
    if free is None:
        free = carvable(gpus, sizes)
    out = {fit_type(s): n for s, n in published_counts(held, free).items()}
    out[NEXT_TYPE] = next_count(held_jobs)
    out[PAD_TYPE] = _pad(tuple(g.model for g in gpus), sizes, out)
    return out


def _pad(models: tuple[GpuModel, ...], sizes: tuple[int, ...], counts: Mapping[str, int]) -> int:
    """:func:`pad_count` on a node of GPUs of ``models``; what an empty one counts is
    remembered (a replay asks it of the same few nodes at every change)."""
    # By the models' identity: the entry keeps them, so no other object takes their ids.
    key = (tuple(map(id, models)), sizes)
    known = _EMPTY.get(key)
    if known is None:
        empty = carvable([GpuOccupancy(i, m) for i, m in enumerate(models)], sizes)
        units = sum(m.require_mig().compute_slices for m in models)
        known = _EMPTY[key] = (models, empty, units)
    return pad_count(known[1], known[2], counts)


# (ids of GPU models, sizes) -> the models, what an empty node of them counts of each
# size, and its units.
_EMPTY: dict[
    tuple[tuple[int, ...], tuple[int, ...]], tuple[tuple[GpuModel, ...], dict[int, int], int]
]
_EMPTY = {}


def next_count(held_jobs: int) -> int:
    """The :data:`NEXT_TYPE` count of a node whose MIG instances belong to ``held_jobs``
    jobs: Slurm, which subtracts the jobs it started there, sees one free."""
    return held_jobs + 1


def pad_count(empty: Mapping[int, int], units: int, counts: Mapping[str, int]) -> int:
    """The :data:`PAD_TYPE` count that makes a node's vgpufit total its constant one:
    an empty node's counts of each size, one :data:`NEXT_TYPE`, and one more for each of
    the node's ``units`` (a node holds at most that many jobs, so ``next`` never exceeds
    ``units`` + 1; no size count exceeds an empty node's), less ``counts`` (the other
    types)."""
    return sum(empty.values()) + next_count(0) + units - sum(counts.values())


def _slices(p: GpuInstanceProfile) -> int:
    return p.slices
