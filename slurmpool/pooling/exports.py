"""The TaskProlog's ``export`` lines for a job's allocations (pure)."""

from __future__ import annotations

from slurmpool.modes import GpuMode
from slurmpool.pooling.jobfile import export_line
from slurmpool.pooling.shared import mps_env

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Sequence

    from slurmpool.state.store import Allocation


def exports(allocations: Sequence[Allocation], sim_state: str | None = None) -> list[str]:
    """``export NAME=value`` lines: CUDA_VISIBLE_DEVICES (MIG devices first, then whole
    GPUs, then shared GPUs, as UUIDs), the profile(s) and parent GPU UUID(s), MPS
    limits for a share on an MPS-enabled GPU, and on a simulated node
    (``sim_state``) SLURMPOOL_SIM_STATE, so that the simulator's workload finds the
    job's GPUs as a CUDA program finds real ones, with no flags."""
    order = {GpuMode.MIG: 0, GpuMode.PASSTHROUGH: 1, GpuMode.SHARED: 2}
    allocs = sorted(allocations, key=lambda a: (order.get(a.mode, 9), a.id))
    if not allocs:
        return []
    devices = [a.mig_uuid if a.mode is GpuMode.MIG else a.gpu_uuid for a in allocs]
    env: dict[str, str] = {
        "CUDA_VISIBLE_DEVICES": ",".join(d for d in devices if d),
        "SLURMPOOL_GPU_UUID": ",".join(dict.fromkeys(a.gpu_uuid for a in allocs)),
        "SLURMPOOL_MODE": ",".join(dict.fromkeys(a.mode for a in allocs)),
    }
    profiles = [a.profile for a in allocs if a.mode is GpuMode.MIG and a.profile]
    if profiles:
        env["SLURMPOOL_PROFILE"] = ",".join(profiles)
    shared = [a for a in allocs if a.mode is GpuMode.SHARED]
    if shared:
        total = int(shared[0].details.get("total_shares", shared[0].shares or 1))
        env["SLURMPOOL_SHARES"] = f"{shared[0].shares}/{total}"
        if len(shared) == 1 and shared[0].details.get("mps") and shared[0].shares:
            env.update(mps_env(shared[0].shares, total, int(shared[0].details["memory_mib"])))
            if shared[0].details.get("mps_pipe"):
                env["CUDA_MPS_PIPE_DIRECTORY"] = str(shared[0].details["mps_pipe"])
    if sim_state is not None:
        env["SLURMPOOL_SIM_STATE"] = sim_state
    return [export_line(k, v) for k, v in env.items()]
