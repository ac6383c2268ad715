"""The ``gpu`` GRES of a node in the order Slurm numbers them (pure).

Slurm names a job's GPUs by index (``SLURM_JOB_GPUS``, ``IDX:`` of ``scontrol show
job -d``).  Measured on 22.05: it numbers a node's ``gpu`` GRES type by type, in the
order the types appear in the node's ``Gres=`` in slurm.conf, and within a type in
gres.conf order (moving ``gpu:a100:1`` after ``gpu:a100_shared:2`` in ``Gres=`` turned
``/dev/nvidia2`` from index 0 into index 2).  generate-config writes ``Gres=`` with
the types of :func:`gpu_gres_types`, and writes gres.conf GPU by GPU, so that the
prolog can turn an index back into a GPU with :func:`gpu_gres_entries`.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from slurmpool.modes import GpuMode


def mig_type_name(slurm_type: str, profile: str) -> str:
    """Slurm's MIG gpu type: ``<model up to '-'>_<profile>`` (a100_3g.40gb)."""
    return f"{slurm_type}_{profile}"


def shared_type_name(slurm_type: str) -> str:
    """The gpu and shard type of a ``shared`` GPU: ``<model up to '-'>_shared``."""
    return f"{slurm_type}_shared"


@dataclass(frozen=True)
class GpuGres:
    """One ``gpu`` GRES entry: a whole GPU (passthrough, or a shared GPU with its
    shards), or one instance of a fixed MIG layout (``whole`` False)."""

    gpu: int
    type: str
    whole: bool


@dataclass(frozen=True)
class GresGpu:
    """What the order needs of a configured GPU (a policy spec or a node-config GPU)."""

    index: int
    mode: GpuMode
    slurm_type: str
    layout: Sequence[str] = ()


def _entries_in_gres_conf_order(gpus: Iterable[GresGpu]) -> list[GpuGres]:
    out = []
    for g in sorted(gpus, key=lambda g: g.index):
        if g.mode is GpuMode.PASSTHROUGH:
            out.append(GpuGres(g.index, g.slurm_type, True))
        elif g.mode is GpuMode.SHARED:
            out.append(GpuGres(g.index, shared_type_name(g.slurm_type), True))
        elif g.mode is GpuMode.MIG_STATIC:
            out += [GpuGres(g.index, mig_type_name(g.slurm_type, p), False) for p in g.layout]
    return out


def gpu_gres_types(gpus: Iterable[GresGpu]) -> list[str]:
    """The node's gpu types in ``Gres=`` order: by the lowest GPU index that has each,
    then by name."""
    first: dict[str, int] = {}
    for e in _entries_in_gres_conf_order(gpus):
        first.setdefault(e.type, e.gpu)
    return sorted(first, key=lambda t: (first[t], t))


def gpu_gres_entries(gpus: Iterable[GresGpu]) -> list[GpuGres]:
    """The node's gpu GRES entries in Slurm's index order."""
    gpus = list(gpus)
    entries = _entries_in_gres_conf_order(gpus)
    return [e for t in gpu_gres_types(gpus) for e in entries if e.type == t]
