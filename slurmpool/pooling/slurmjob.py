"""The Slurm calls the pooling hooks make, through the one runner.

Each call is bounded by ``timeout_s`` and by the hook's deadline: a call
made early (reading the allocation) stops short of the hook's exit reserve,
the requeue on the exit path may use that reserve, and a call with less than
:data:`MIN_CALL_S` left is not started.  Failures raise
:class:`slurmpool.slurm.runner.SlurmCommandError` with argv, status and stderr.
"""

from __future__ import annotations

import os

from slurmpool.pooling.deadline import EXIT_RESERVE_S
from slurmpool.records import record
from slurmpool.slurm.runner import DEFAULT_SEARCH_PATH, Runner, SlurmCommandTimeout

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Mapping

    from slurmpool.pooling.deadline import Deadline
    from slurmpool.slurm.allocation import JobAllocation
    from slurmpool.slurm.nodegres import NodeGres

DEFAULT_TIMEOUT_S = 10.0
# A Slurm call with less time than this is not started (its answer could not arrive).
MIN_CALL_S = 0.5
# What the AdminComment calls leave for the requeue that follows them.
REQUEUE_RESERVE_S = 2.0


@record
class SlurmJobs:
    runner: Runner
    timeout_s: float = DEFAULT_TIMEOUT_S
    # This Slurm has ``scontrol show job --json`` (23.02+): the allocation is read there.
    scontrol_json: bool = False
    # The hook's deadline (None: each call gets ``timeout_s``, e.g. from the CLI).
    deadline: Deadline | None = None

    @classmethod
    def from_env(
        cls,
        env: Mapping[str, str],
        timeout_s: float = DEFAULT_TIMEOUT_S,
        *,
        scontrol_json: bool = False,
        deadline: Deadline | None = None,
    ) -> SlurmJobs:
        """A runner for hook context: Slurm's PATH and SLURM_CONF from the hook's env only."""
        child = {k: env[k] for k in ("PATH", "SLURM_CONF") if k in env}
        # The hook's PATH first (the wrapper sets it), then the usual places.
        dirs = [d for d in env.get("PATH", "").split(os.pathsep) if os.path.isabs(d)]
        search = tuple(dict.fromkeys([*dirs, *DEFAULT_SEARCH_PATH]))
        runner = Runner(
            env=child, search_path=search, timeout=timeout_s, slurm_conf=env.get("SLURM_CONF")
        )
        return cls(runner, timeout_s, scontrol_json, deadline)

    def _limit(self, argv: tuple[str, ...], reserve: float, wanted: float | None = None) -> float:
        """Seconds the call ``argv`` may take (at most ``wanted``, by default
        ``timeout_s``), keeping ``reserve`` of the hook's budget."""
        wanted = self.timeout_s if wanted is None else min(wanted, self.timeout_s)
        if self.deadline is None:
            return wanted
        limit = self.deadline.within(wanted, reserve)
        if limit < MIN_CALL_S:
            raise SlurmCommandTimeout(
                argv,
                None,
                "",
                reason=f"not started: {self.deadline.left():.1f} s left of the hook's budget",
            )
        return limit

    def allocation(self, job_id: str) -> JobAllocation:
        """What slurmctld allocated to the job, per node
        (:func:`slurmpool.slurm.allocation.read_allocation`)."""
        from slurmpool.slurm.allocation import read_allocation

        limit = self._limit(("read allocation of job", job_id), EXIT_RESERVE_S)
        return read_allocation(self.runner, job_id, timeout=limit, scontrol_json=self.scontrol_json)

    def admin_comment(self, job_id: str) -> str | None:
        """The job's AdminComment ("" when unset), or None when it cannot be read safely."""
        from slurmpool.slurm.allocation import admin_comment_from_squeue

        argv = ("squeue", "-h", "-j", job_id, "-O", "JobID:|,AdminComment:|")
        res = self.runner.run(*argv, timeout=self._limit(argv, REQUEUE_RESERVE_S))
        return admin_comment_from_squeue(res.stdout, job_id)

    def requeue(self, job_id: str, hold: bool = False) -> None:
        argv = ("scontrol", "requeuehold" if hold else "requeue", job_id)
        self.runner.run(*argv, timeout=self._limit(argv, 0.0))

    def exclusions(self, job_id: str) -> tuple[str, str] | None:
        """(the job's state, its ExcNodeList as a hostlist expression, "" for none), or
        None when slurmctld no longer knows the job.  Both fields come from slurmctld:
        it refuses node names that are not nodes."""
        from slurmpool.slurm.runner import SlurmCommandError

        argv = ("squeue", "-h", "-j", job_id, "-o", "%T|%x")
        try:
            res = self.runner.run(*argv, timeout=self._limit(argv, 0.0))
        except SlurmCommandError as e:
            if "Invalid job id" in e.stderr:
                return None  # gone (past MinJobAge)
            raise
        lines = res.stdout.splitlines()
        if not lines:
            return None
        state, bar, nodes = lines[0].strip().partition("|")
        if len(lines) != 1 or not bar or not state.isalpha():
            raise SlurmCommandError(argv, 0, "", res.stdout, reason="unexpected output")
        return state, "" if nodes in ("", "(null)") else nodes

    def set_exclusions(self, job_id: str, nodes: str) -> None:
        """Set the job's ExcNodeList to the hostlist ``nodes`` ("" for none); slurmctld
        takes it only while the job is not running."""
        argv = ("scontrol", "update", f"jobid={job_id}", f"ExcNodeList={nodes}")
        self.runner.run(*argv, timeout=self._limit(argv, 0.0))

    def set_admin_comment(self, job_id: str, text: str) -> None:
        # One argv element: scontrol takes the whole value, spaces and quotes included.
        argv = ("scontrol", "update", f"jobid={job_id}", f"AdminComment={text}")
        self.runner.run(*argv, timeout=self._limit(argv, REQUEUE_RESERVE_S))

    def node_gres(self, node: str, timeout_s: float | None = None) -> NodeGres:
        """The node's GRES as slurmctld has them (:mod:`slurmpool.slurm.nodegres`)."""
        from slurmpool.slurm.nodegres import parse_node_gres, read_node_argv

        argv = tuple(read_node_argv(node))
        res = self.runner.run(*argv, timeout=self._limit(argv, 0.0, timeout_s))
        return parse_node_gres(res.stdout, node)

    def set_node_gres(self, node: str, gres: str, timeout_s: float | None = None) -> None:
        """Replace the node's whole GRES list with ``gres``."""
        from slurmpool.slurm.nodegres import update_argv

        argv = tuple(update_argv(node, gres))
        self.runner.run(*argv, timeout=self._limit(argv, 0.0, timeout_s))
