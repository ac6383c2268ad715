"""``python -m slurmpool.hooks HOOK --node-config PATH [--log-file PATH] [--budget-s N]``.

``--budget-s``: the seconds the wrapper gave this run (its ``timeout``);
without it, the node config's timeout for the hook.  ``--after-kill`` (prolog
only): the wrapper saw the prolog die by a signal; undo what it began and
requeue the job.

Exit status: 0 for every expected condition.  A missing or unreadable node
config is a broken installation: the hook says so and exits 1 (a failing
prolog drains the node, which is what a broken node needs).
"""

from __future__ import annotations

import os
import sys

from slurmpool.configgen.nodeconfig import DEFAULT_NODE_CONFIG, NodeConfigError, load_node_config
from slurmpool.hooks.context import HookContext, JobEnv
from slurmpool.hooks.dispatch import HOOKS
from slurmpool.hooks.log import HookLog
from slurmpool.records import record

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Mapping, Sequence
    from typing import TextIO

USAGE = (
    "usage: python -m slurmpool.hooks {" + "|".join(HOOKS) + "} "
    "--node-config PATH [--log-file PATH] [--budget-s N] [--after-kill]"
)


class UsageError(ValueError):
    pass


@record(frozen=True)
class HookArgs:
    hook: str
    node_config: str = DEFAULT_NODE_CONFIG
    log_file: str | None = None
    budget_s: float | None = None
    after_kill: bool = False


def parse_args(argv: Sequence[str]) -> HookArgs:
    if not argv or argv[0] not in HOOKS:
        got = argv[0] if argv else "nothing"
        raise UsageError(f"unknown hook {got!r}; expected one of {', '.join(HOOKS)}")
    values: dict[str, str] = {}
    after_kill = False
    rest = list(argv[1:])
    while rest:
        opt = rest.pop(0)
        if opt == "--after-kill" and argv[0] == "prolog":
            after_kill = True
        elif opt in ("--node-config", "--log-file", "--budget-s") and rest:
            values[opt] = rest.pop(0)
        else:
            raise UsageError(f"unexpected argument {opt!r}")
    budget = values.get("--budget-s")
    if budget is not None and not (budget.isdigit() and int(budget) > 0):
        raise UsageError(f"--budget-s: expected a whole number of seconds above 0, got {budget!r}")
    return HookArgs(
        argv[0],
        values.get("--node-config", DEFAULT_NODE_CONFIG),
        values.get("--log-file"),
        float(budget) if budget is not None else None,
        after_kill,
    )


def main(
    argv: Sequence[str],
    env: Mapping[str, str],
    stderr: TextIO | None = None,
    use_syslog: bool = True,
) -> int:
    """Run one hook with the environment ``env``; return its exit status."""
    err = sys.stderr if stderr is None else stderr
    try:
        args = parse_args(argv)
    except UsageError as e:
        err.write(f"slurmpool hooks: {e}\n{USAGE}\n")
        return 2
    hook = args.hook
    log = HookLog(hook, stream=err, path=args.log_file, use_syslog=use_syslog)
    job = JobEnv.from_env(env)
    try:
        config = load_node_config(args.node_config)
    except NodeConfigError as e:
        log.event("node-config-error", level="error", job=job.job_id or "-", error=str(e))
        return 1
    ctx = HookContext(hook, env, job, config, log, args.budget_s, args.after_kill)
    try:
        return HOOKS[hook](ctx)
    except Exception as e:  # a bug must be visible in the log, with the job it hit
        log.event("error", level="error", job=job.job_id or "-", error=f"{type(e).__name__}: {e}")
        return 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:], os.environ))
