"""What a hook knows about the job: read from the environment mapping Slurm gives it."""

from __future__ import annotations

from slurmpool.records import record

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Mapping

    from slurmpool.configgen.nodeconfig import NodeConfig
    from slurmpool.hooks.log import HookLog


@record(frozen=True)
class JobEnv:
    job_id: str | None
    uid: int | None
    user: str | None
    partition: str | None
    node: str | None
    cluster: str | None
    job_gpus: str | None
    restart_count: int

    @classmethod
    def from_env(cls, env: Mapping[str, str]) -> JobEnv:
        uid = env.get("SLURM_JOB_UID")
        restarts = env.get("SLURM_JOB_RESTART_COUNT", "0")
        return cls(
            job_id=env.get("SLURM_JOB_ID"),
            uid=int(uid) if uid and uid.isdigit() else None,
            user=env.get("SLURM_JOB_USER"),
            partition=env.get("SLURM_JOB_PARTITION"),
            node=env.get("SLURMD_NODENAME"),
            cluster=env.get("SLURM_CLUSTER_NAME"),
            job_gpus=env.get("SLURM_JOB_GPUS"),
            restart_count=int(restarts) if restarts.isdigit() else 0,
        )


@record(frozen=True)
class HookContext:
    hook: str
    env: Mapping[str, str]
    job: JobEnv
    config: NodeConfig
    log: HookLog
    budget_s: float | None = None  # what the wrapper gave this run (None: the config's)
    after_kill: bool = False  # a second prolog run, after the first died by a signal

    def budget(self) -> float:
        """The seconds this run has, before the margin the hook keeps below it."""
        if self.budget_s is not None:
            return self.budget_s
        return float(self.config.hooks.get(self.hook.replace("-", "_") + "_timeout_s", 30))
