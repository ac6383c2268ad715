"""What a job gets on this node: pure resolution of its allocated vgpu count.

Slurm counts ``vgpu`` (MIG pools) or ``shard`` (shared pools: job_submit.lua
rewrites a vgpu request) per node and tells neither the prolog nor the job how
many a job got; the prolog reads the count from slurmctld's structured record
(:mod:`slurmpool.slurm.allocation`).  The ``slurmpool:vgpu=N`` token that
``job_submit.lua`` stores in Extra (Slurm 23.02+) is only compared with it.
"""

from __future__ import annotations

import re

from slurmpool.modes import GpuMode

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable, Sequence

    from slurmpool.configgen.nodeconfig import NodeClassConfig, NodeGpu

# Any spelling of our token: job_submit.lua scrubs them all from users' Extra.
_EXTRA_TOKEN_RE = re.compile(r"slurmpool\s*:\s*vgpu\s*=\s*([0-9]{1,9})", re.I)


class RequestError(ValueError):
    """The job's request cannot be served on this node (a message for the log)."""


def vgpu_claimed_in_extra(extra: str | None) -> int | None:
    """The count a ``slurmpool:vgpu=N`` token in Extra claims, or None without one.

    Only ever compared with the allocation (a mismatch is a forgery attempt): the
    prolog never carves what Extra says.
    """
    m = _EXTRA_TOKEN_RE.search(extra or "")
    return int(m.group(1)) if m else None


def pool_gres(mode: GpuMode | None) -> str:
    """The GRES a pool's units are allocated as (``configgen.plan.pool_gres``)."""
    return "shard" if mode is GpuMode.SHARED else "vgpu"


def pooled_mode(cls: NodeClassConfig) -> GpuMode | None:
    """``mig`` or ``shared`` for a node class with pooled GPUs, else None."""
    modes = {g.mode for g in cls.pooled_gpus}
    if not modes:
        return None
    if len(modes) > 1:
        raise RequestError(
            f"node class {cls.name} pools GPUs in modes {sorted(modes)}; one node pools "
            "all its GPUs the same way (the policy validator should have refused this)"
        )
    return modes.pop()


def mig_profiles(
    count: int, units_per_gpu: int, profile_of: Callable[[int], str | None]
) -> tuple[str, ...]:
    """The MIG instances a ``vgpu:count`` request gets, one profile name each.

    Up to one GPU: the smallest profile with at least ``count`` compute slices
    (``profile_of(count)``, the node config's table).  Above one GPU: a whole
    multiple of it, as that many whole-GPU instances.
    """
    if count < 1:
        raise RequestError(f"vgpu:{count} asks for nothing")
    if count <= units_per_gpu:
        profile = profile_of(count)
        if profile is None:
            raise RequestError(f"no MIG profile for vgpu:{count} in the node config")
        return (profile,)
    if count % units_per_gpu:
        raise RequestError(
            f"vgpu:{count} is more than one GPU ({units_per_gpu} units) and not a whole "
            f"multiple of it"
        )
    whole = profile_of(units_per_gpu)
    if whole is None:
        raise RequestError(f"no whole-GPU MIG profile (vgpu:{units_per_gpu}) in the node config")
    return (whole,) * (count // units_per_gpu)


def gres_gpu_entries(cls: NodeClassConfig) -> list[NodeGpu | None]:
    """The node's ``gpu`` GRES entries in Slurm's index order (:mod:`slurmpool.gresorder`):
    a passthrough or shared GPU is one entry, each instance of a fixed (``mig-static``)
    layout another (None here)."""
    from slurmpool.gresorder import GresGpu, gpu_gres_entries

    by_index = {g.index: g for g in cls.gpus}
    entries = gpu_gres_entries(GresGpu(g.index, g.mode, g.slurm_type, g.layout) for g in cls.gpus)
    return [by_index[e.gpu] if e.whole else None for e in entries]


def job_gpus(job_gpus: str | None, cls: NodeClassConfig) -> list[NodeGpu]:
    """The passthrough and shared GPUs behind ``SLURM_JOB_GPUS``.

    slurmd sets it in the prolog's environment (a job cannot) for ``gpu`` and ``shard``
    jobs alike, as indices of :func:`gres_gpu_entries` (measured on 22.05: the
    sandbox's only whole GPU, ``/dev/nvidia2``, arrives as ``0``; a shard job gets the
    index of its shards' GPU).
    """
    if not job_gpus:
        return []
    entries = gres_gpu_entries(cls)
    out: list[NodeGpu] = []
    for token in job_gpus.split(","):
        token = token.strip()
        if not token.isdigit() or int(token) >= len(entries):
            raise RequestError(
                f"SLURM_JOB_GPUS={job_gpus!r}: {token!r} is not one of this node's "
                f"{len(entries)} gpu GRES entries"
            )
        gpu = entries[int(token)]
        if gpu is not None and gpu not in out:
            out.append(gpu)
    return out


def split_shards(gpus: Sequence[NodeGpu], shards: int) -> tuple[list[NodeGpu], NodeGpu | None]:
    """The job's whole GPUs, and the shared GPU its ``shards`` come from (None without).

    A job's shards all come from one GPU, which ``SLURM_JOB_GPUS`` names among the
    job's GPUs; a shared GPU named there without shards was given whole.
    """
    shared = [g for g in gpus if g.mode is GpuMode.SHARED]
    whole = [g for g in gpus if g.mode is not GpuMode.SHARED]
    if not shards:
        return whole + shared, None
    if len(shared) != 1:
        named = ", ".join(str(g.index) for g in shared) or "none"
        raise RequestError(
            f"shard:{shards} must come from exactly one shared GPU; SLURM_JOB_GPUS names "
            f"shared GPUs {named} (a job takes shares or whole shared GPUs, not both)"
        )
    return whole, shared[0]
