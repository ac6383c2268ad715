"""``python -m slurmpool.hooks HOOK --node-config PATH [--log-file PATH]``.

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

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Mapping, Sequence
    from typing import TextIO

USAGE = (
    "usage: python -m slurmpool.hooks {" + "|".join(HOOKS) + "} "
    "--node-config PATH [--log-file PATH]"
)


class UsageError(ValueError):
    pass


def parse_args(argv: Sequence[str]) -> tuple[str, str, str | None]:
    if not argv or argv[0] not in HOOKS:
        got = argv[0] if argv else "nothing"
        raise UsageError(f"unknown hook {got!r}; expected one of {', '.join(HOOKS)}")
    hook = argv[0]
    node_config = DEFAULT_NODE_CONFIG
    log_file: str | None = None
    rest = list(argv[1:])
    while rest:
        opt = rest.pop(0)
        if opt in ("--node-config", "--log-file") and rest:
            value = rest.pop(0)
            if opt == "--node-config":
                node_config = value
            else:
                log_file = value
        else:
            raise UsageError(f"unexpected argument {opt!r}")
    return hook, node_config, log_file


def main(
    argv: Sequence[str],
    env: Mapping[str, str],
    stderr: TextIO | None = None,
    use_syslog: bool = True,
) -> int:
    """Run one hook with the environment ``env``; return its exit status."""
    err = sys.stderr if stderr is None else stderr
    try:
        hook, node_config_path, log_file = parse_args(argv)
    except UsageError as e:
        err.write(f"slurmpool hooks: {e}\n{USAGE}\n")
        return 2
    log = HookLog(hook, stream=err, path=log_file, use_syslog=use_syslog)
    job = JobEnv.from_env(env)
    try:
        config = load_node_config(node_config_path)
    except NodeConfigError as e:
        log.event("node-config-error", level="error", job=job.job_id or "-", error=str(e))
        return 1
    ctx = HookContext(hook, env, job, config, log)
    try:
        return HOOKS[hook](ctx)
    except Exception as e:  # a bug must be visible in the log, with the job it hit
        log.event("error", level="error", job=job.job_id or "-", error=f"{type(e).__name__}: {e}")
        return 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:], os.environ))
