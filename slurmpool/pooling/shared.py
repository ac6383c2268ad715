"""``shared`` mode decisions (pure): the shares a GPU has left, and the MPS limits
that go with a job's shares.  Slurm picks the GPU (``shard`` GRES)."""

from __future__ import annotations

from slurmpool.modes import GpuMode

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Sequence

    from slurmpool.state.store import Allocation


def free_shares(gpus: Sequence[tuple[int, int]], records: Sequence[Allocation]) -> dict[int, int]:
    """Free shares per GPU, for ``(index, shares)`` pairs: its shares minus those of
    live ``shared`` records."""
    free = dict(gpus)
    for r in records:
        if r.mode is GpuMode.SHARED and r.gpu_index in free:
            free[r.gpu_index] -= r.shares or 0
    return free


def share_limits(shares: int, total: int, memory_mib: int) -> tuple[int, int]:
    """(active thread percentage, pinned device memory MiB) for ``shares`` of ``total``."""
    if not 0 < shares <= total:
        raise ValueError(f"shares {shares} must be in 1..{total}")
    return max(1, 100 * shares // total), max(1, memory_mib * shares // total)


def mps_env(shares: int, total: int, memory_mib: int) -> dict[str, str]:
    """MPS client limits proportional to ``shares`` of ``total`` (device 0 = the job's GPU)."""
    percent, limit_mib = share_limits(shares, total, memory_mib)
    return {
        "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE": str(percent),
        "CUDA_MPS_PINNED_DEVICE_MEM_LIMIT": f"0={limit_mib}M",
    }
