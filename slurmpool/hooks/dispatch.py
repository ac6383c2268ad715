"""The hook table: one function per Slurm hook, each returning the exit status.

Each hook logs what it saw, then calls into :mod:`slurmpool.pooling`:
the prolog carves/binds/shares the job's GPUs (or requeues it), the task
prolog prints the job's ``export`` lines, the epilog summarises the job's
GPU use and gives everything back.
Pooling modules are imported inside the hook that needs them, so the task
prolog never loads the GPU backend or the state store.
"""

from __future__ import annotations

import sys

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable
    from typing import TypeAlias

    from slurmpool.gpu.interface import GpuBackend
    from slurmpool.hooks.context import HookContext
    from slurmpool.pooling.node import Job, Node
    from slurmpool.pooling.slurmjob import SlurmJobs

    HookFn: TypeAlias = Callable[[HookContext], int]


def _node_fields(ctx: HookContext) -> dict[str, object]:
    node = ctx.job.node
    cls = ctx.config.node_class(node) if node else None
    return {
        "node": node or "-",
        "node_class": cls.name if cls is not None else "-",
        "vgpu_count": cls.vgpu_count if cls is not None else 0,
    }


def _job_fields(ctx: HookContext) -> dict[str, object]:
    return {
        "job": ctx.job.job_id or "-",
        "uid": ctx.job.uid if ctx.job.uid is not None else "-",
        "user": ctx.job.user or "-",
        "partition": ctx.job.partition or "-",
    }


# Seconds a hook keeps for itself below the wrapper's `timeout -k 5 N`.
_MARGIN_S = 3.0


def _pool_node(ctx: HookContext) -> Node | None:
    """The pooling view of this node, or None when the node has no class (not pooled)."""
    from slurmpool.pooling.deadline import Deadline
    from slurmpool.pooling.node import Node

    name = ctx.job.node
    cls = ctx.config.node_class(name) if name else None
    if name is None or cls is None:
        return None
    budget = max(5.0, ctx.budget() - _MARGIN_S)
    config = ctx.config

    def open_backend() -> GpuBackend:
        from slurmpool.gpu.select import open_backend as open_spec

        return open_spec(
            config.gpu_backend,
            mig_minors_path=config.path("mig_minors"),
            catalogue=node.catalogue(),
        )

    node = Node(name, config, cls, ctx.log, open_backend, Deadline(budget))
    return node


def _job(ctx: HookContext) -> Job | None:
    from slurmpool.pooling.node import Job

    j = ctx.job
    # slurmd always sets both; a job id is digits (an array task: digits_digits).
    if j.job_id is None or j.uid is None or not j.job_id.replace("_", "").isdigit():
        return None
    return Job(j.job_id, j.uid, j.user or str(j.uid), j.cluster, j.restart_count)


def prolog(ctx: HookContext) -> int:
    fields = {**_job_fields(ctx), **_node_fields(ctx), "gpus": ctx.job.job_gpus or "-"}
    ctx.log.event("job-start", fields)
    node, job = _pool_node(ctx), _job(ctx)
    if node is None:
        return 0
    if job is None:
        ctx.log.event("no-job", level="error", error="SLURM_JOB_ID/SLURM_JOB_UID missing")
        return 1
    from slurmpool.pooling.prolog import run_prolog

    return run_prolog(node, job, ctx.env, _slurm(ctx, node), after_kill=ctx.after_kill)


def _slurm(ctx: HookContext, node: Node) -> Callable[[], SlurmJobs]:
    """Makes the hook's Slurm access when it is first needed, within the hook's budget."""
    env, deadline, version = ctx.env, node.deadline, ctx.config.slurm_version

    def slurm() -> SlurmJobs:
        from slurmpool.pooling.slurmjob import SlurmJobs
        from slurmpool.slurm.version import SlurmVersionError, parse_version

        try:
            scontrol_json = parse_version(version).supports("scontrol_json")
        except SlurmVersionError:
            scontrol_json = False  # squeue -O reads the allocation on every version
        return SlurmJobs.from_env(env, scontrol_json=scontrol_json, deadline=deadline)

    return slurm


def task_prolog(ctx: HookContext) -> int:
    # Each stdout line "export NAME=value" reaches the job's tasks.  This runs as the
    # job's user: it only reads the export file the prolog wrote.
    from slurmpool.pooling import jobfile

    ctx.log.event("task-start", {**_job_fields(ctx), **_node_fields(ctx)})
    if ctx.job.job_id is None or ctx.config.node_class(ctx.job.node or "") is None:
        return 0
    try:
        text = jobfile.read(ctx.config.path("run_dir"), ctx.job.job_id)
    except jobfile.JobFileError as e:
        ctx.log.event("exports-unreadable", level="error", job=ctx.job.job_id, error=str(e))
        return 1
    if text:
        sys.stdout.write(text)
        sys.stdout.flush()
    return 0


def epilog(ctx: HookContext) -> int:
    ctx.log.event("job-end", {**_job_fields(ctx), **_node_fields(ctx)})
    node, job = _pool_node(ctx), _job(ctx)
    if node is None:
        return 0
    if job is None:
        # Never from slurmd; nothing can be given back without the job's id.
        ctx.log.event("no-job", level="error", error="SLURM_JOB_ID/SLURM_JOB_UID missing")
        return 0
    from slurmpool.pooling.epilog import run_epilog

    return run_epilog(node, job, _slurm(ctx, node))


def epilog_slurmctld(ctx: HookContext) -> int:
    ctx.log.event("job-end-ctld", {**_job_fields(ctx), "cluster": ctx.job.cluster or "-"})
    return 0


HOOKS: dict[str, HookFn] = {
    "prolog": prolog,
    "task-prolog": task_prolog,
    "epilog": epilog,
    "epilog-slurmctld": epilog_slurmctld,
}
