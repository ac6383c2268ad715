"""The hook table: one function per Slurm hook, each returning the exit status.

For now each hook records what it saw and succeeds.  The per-job MIG carving
(prolog), CUDA_VISIBLE_DEVICES export (task prolog), release (epilog) and
accounting hand-off (epilog-slurmctld) replace these functions.
"""

from __future__ import annotations

from collections.abc import Callable

from slurmpool.hooks.context import HookContext

HookFn = Callable[[HookContext], int]


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


def prolog(ctx: HookContext) -> int:
    fields = {**_job_fields(ctx), **_node_fields(ctx)}
    ctx.log.event("job-start", fields, gpus=ctx.job.job_gpus or "-")
    return 0


def task_prolog(ctx: HookContext) -> int:
    # Anything printed to stdout as "export NAME=value" reaches the job's tasks;
    # nothing is exported until instances are carved per job.
    ctx.log.event("task-start", {**_job_fields(ctx), **_node_fields(ctx)})
    return 0


def epilog(ctx: HookContext) -> int:
    ctx.log.event("job-end", {**_job_fields(ctx), **_node_fields(ctx)})
    return 0


def epilog_slurmctld(ctx: HookContext) -> int:
    ctx.log.event("job-end-ctld", _job_fields(ctx), cluster=ctx.job.cluster or "-")
    return 0


HOOKS: dict[str, HookFn] = {
    "prolog": prolog,
    "task-prolog": task_prolog,
    "epilog": epilog,
    "epilog-slurmctld": epilog_slurmctld,
}
