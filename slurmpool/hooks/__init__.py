"""Slurm hook entry points.

``python -m slurmpool.hooks prolog|task-prolog|epilog|epilog-slurmctld``.

Import-light on purpose (standard library, the node config loader and
nothing else): a hook runs on every job start and end.  Each hook is a
function in :data:`slurmpool.hooks.dispatch.HOOKS` taking a
:class:`~slurmpool.hooks.context.HookContext` and handing the job to
:mod:`slurmpool.pooling`, which does the work.
"""
