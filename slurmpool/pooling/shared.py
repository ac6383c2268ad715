"""``shared`` mode decisions (pure): which non-MIG GPU takes a job's shares, and
the MPS limits that go with them."""

from __future__ import annotations

from slurmpool.modes import GpuMode
from slurmpool.records import record

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Sequence

    from slurmpool.state.store import Allocation


@record(frozen=True, slots=True)
class SharedGpu:
    index: int
    uuid: str
    shares: int
    mps: bool
    memory_mib: int


def free_shares(gpus: Sequence[SharedGpu], records: Sequence[Allocation]) -> dict[int, int]:
    """Free shares per GPU: its shares minus those of live ``shared`` records."""
    free = {g.index: g.shares for g in gpus}
    for r in records:
        if r.mode is GpuMode.SHARED and r.gpu_index in free:
            free[r.gpu_index] -= r.shares or 0
    return free


def choose(
    gpus: Sequence[SharedGpu], records: Sequence[Allocation], wanted: Sequence[int]
) -> list[tuple[SharedGpu, int]] | None:
    """A GPU for each entry of ``wanted`` (shares), or None if they do not all fit.

    Each goes to the GPU with the most free shares that can take it (ties: the
    lowest index), so load spreads and whole GPUs stay whole the longest only
    when asked for; a multi-GPU request takes distinct GPUs.
    """
    free = free_shares(gpus, records)
    by_index = {g.index: g for g in gpus}
    out: list[tuple[SharedGpu, int]] = []
    used: set[int] = set()
    for n in sorted(wanted, reverse=True):
        fits = [i for i, f in free.items() if f >= n and i not in used]
        if not fits:
            return None
        best = min(fits, key=lambda i: (-free[i], i))
        free[best] -= n
        used.add(best)
        out.append((by_index[best], n))
    return out


def mps_env(shares: int, total: int, memory_mib: int) -> dict[str, str]:
    """MPS client limits proportional to ``shares`` of ``total`` (device 0 = the job's GPU)."""
    if not 0 < shares <= total:
        raise ValueError(f"shares {shares} must be in 1..{total}")
    percent = max(1, 100 * shares // total)
    limit_mib = max(1, memory_mib * shares // total)
    return {
        "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE": str(percent),
        "CUDA_MPS_PINNED_DEVICE_MEM_LIMIT": f"0={limit_mib}M",
    }
