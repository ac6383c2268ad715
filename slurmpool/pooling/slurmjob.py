"""The Slurm calls the pooling hooks make, through the one runner.

Each call is bounded (``timeout_s``); failures raise
:class:`slurmpool.slurm.runner.SlurmCommandError` with argv, status and stderr.
"""

from __future__ import annotations

import os

from slurmpool.records import record
from slurmpool.slurm.runner import DEFAULT_SEARCH_PATH, Runner

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Mapping

    from slurmpool.slurm.allocation import JobAllocation

DEFAULT_TIMEOUT_S = 10.0


@record
class SlurmJobs:
    runner: Runner
    timeout_s: float = DEFAULT_TIMEOUT_S
    # This Slurm has ``scontrol show job --json`` (23.02+): the allocation is read there.
    scontrol_json: bool = False

    @classmethod
    def from_env(
        cls,
        env: Mapping[str, str],
        timeout_s: float = DEFAULT_TIMEOUT_S,
        *,
        scontrol_json: bool = False,
    ) -> SlurmJobs:
        """A runner for hook context: Slurm's PATH and SLURM_CONF from the hook's env only."""
        child = {k: env[k] for k in ("PATH", "SLURM_CONF") if k in env}
        # The hook's PATH first (the wrapper sets it), then the usual places.
        dirs = [d for d in env.get("PATH", "").split(os.pathsep) if os.path.isabs(d)]
        search = tuple(dict.fromkeys([*dirs, *DEFAULT_SEARCH_PATH]))
        runner = Runner(
            env=child, search_path=search, timeout=timeout_s, slurm_conf=env.get("SLURM_CONF")
        )
        return cls(runner, timeout_s, scontrol_json)

    def allocation(self, job_id: str) -> JobAllocation:
        """What slurmctld allocated to the job, per node
        (:func:`slurmpool.slurm.allocation.read_allocation`)."""
        from slurmpool.slurm.allocation import read_allocation

        return read_allocation(
            self.runner, job_id, timeout=self.timeout_s, scontrol_json=self.scontrol_json
        )

    def admin_comment(self, job_id: str) -> str | None:
        """The job's AdminComment ("" when unset), or None when it cannot be read safely."""
        from slurmpool.slurm.allocation import admin_comment_from_squeue

        res = self.runner.run(
            "squeue", "-h", "-j", job_id, "-O", "JobID:|,AdminComment:|", timeout=self.timeout_s
        )
        return admin_comment_from_squeue(res.stdout, job_id)

    def requeue(self, job_id: str, hold: bool = False) -> None:
        verb = "requeuehold" if hold else "requeue"
        self.runner.run("scontrol", verb, job_id, timeout=self.timeout_s)

    def set_admin_comment(self, job_id: str, text: str) -> None:
        # One argv element: scontrol takes the whole value, spaces and quotes included.
        self.runner.run(
            "scontrol", "update", f"jobid={job_id}", f"AdminComment={text}", timeout=self.timeout_s
        )
