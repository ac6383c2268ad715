"""What a job gets on this node: pure resolution of its allocated vgpu count.

Slurm counts ``vgpu`` per node and tells neither the prolog nor the job how
many a job got; the prolog reads the count from slurmctld's structured record
(:mod:`slurmpool.slurm.allocation`).  The ``slurmpool:vgpu=N`` token that
``job_submit.lua`` stores in Extra (Slurm 23.02+) is only compared with it.
"""

from __future__ import annotations

import re

from slurmpool.modes import GpuMode

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable

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


def shares_wanted(count: int, shares_per_gpu: int) -> tuple[int, ...]:
    """Shares per GPU for a ``vgpu:count`` request on GPUs of ``shares_per_gpu`` shares."""
    if count < 1:
        raise RequestError(f"vgpu:{count} asks for nothing")
    if count <= shares_per_gpu:
        return (count,)
    if count % shares_per_gpu:
        raise RequestError(
            f"vgpu:{count} is more than one GPU ({shares_per_gpu} shares) and not a whole "
            "multiple of it"
        )
    return (shares_per_gpu,) * (count // shares_per_gpu)


def gres_gpu_entries(cls: NodeClassConfig) -> list[NodeGpu | None]:
    """The node's ``gpu`` GRES entries in gres.conf order: a passthrough GPU is one
    entry, each instance of a fixed (``mig-static``) layout another (None here)."""
    out: list[NodeGpu | None] = []
    for g in sorted(cls.gpus, key=lambda g: g.index):
        if g.mode is GpuMode.PASSTHROUGH:
            out.append(g)
        elif g.mode is GpuMode.MIG_STATIC:
            out.extend([None] * max(1, len(g.layout)))
    return out


def passthrough_gpus(job_gpus: str | None, cls: NodeClassConfig) -> list[NodeGpu]:
    """The passthrough GPUs behind ``SLURM_JOB_GPUS``.

    Slurm numbers a node's ``gpu`` GRES by position in gres.conf (measured on
    22.05: the only whole GPU, ``/dev/nvidia2``, arrives as ``0``).
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
