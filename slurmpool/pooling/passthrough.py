"""``passthrough`` mode decisions (pure): may a whole GPU go to the job as it is?"""

from __future__ import annotations

from slurmpool.configgen.nodeconfig import STRAY_KILL
from slurmpool.records import record

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Sequence

    from slurmpool.configgen.nodeconfig import PoolingPolicy
    from slurmpool.gpu.backend import GpuInfo

OK = "ok"
DISABLE_MIG = "disable-mig"
KILL = "kill"
REFUSE = "refuse"  # requeue the job: the GPU is busy, not broken
BROKEN = "broken"  # drain: an admin must act


@record(frozen=True, slots=True)
class Decision:
    action: str
    reason: str = ""


def decide(info: GpuInfo, pids: Sequence[int], instances: int, policy: PoolingPolicy) -> Decision:
    """The next step for one allocated whole GPU (call again after acting)."""
    # MIG that is on now matters; a pending change applies only at the next GPU reset.
    if info.mig_current:
        if not info.mig_pending:
            return Decision(
                BROKEN, f"GPU {info.index}: MIG is being disabled; the GPU needs a reset"
            )
        if not policy.allow_disable_mig:
            return Decision(
                BROKEN,
                f"GPU {info.index} ({info.uuid}) is a passthrough GPU with MIG enabled; "
                f"disable it (nvidia-smi -i {info.index} -mig 0) or set "
                "pooling.allow_disable_mig",
            )
        if pids or instances:
            return Decision(
                REFUSE,
                f"GPU {info.index} has MIG enabled and is not idle "
                f"({len(pids)} process(es), {instances} instance(s)); cannot disable MIG now",
            )
        return Decision(DISABLE_MIG, f"GPU {info.index}: disabling MIG (policy allows)")
    if pids:
        listed = ", ".join(map(str, pids))
        if policy.stray_processes == STRAY_KILL:
            return Decision(KILL, f"GPU {info.index}: stopping stray process(es) {listed}")
        return Decision(REFUSE, f"GPU {info.index} is busy with stray process(es) {listed}")
    return Decision(OK)
