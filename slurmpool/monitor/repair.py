"""monitord's repair of the fit counts slurmctld has of its node.

:func:`slurmpool.pooling.publish.repair` does the work.

No hook runs when slurmd registers (a slurmd start, a node reboot), when slurmctld
restarts, or at ``scontrol reconfigure``, and each of them puts gres.conf's fit counts,
an empty node's, back in slurmctld.  monitord therefore runs a repair when it starts
and every interval after: a fresh note of what the node can carve, then a send if
slurmctld's counts differ.  Each pass is a hook-like run of its own: its own
:class:`~slurmpool.pooling.node.Node`, deadline, store connection and GPU backend.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping

from slurmpool.configgen.nodeconfig import NodeClassConfig, NodeConfig
from slurmpool.gpu.interface import GpuBackend
from slurmpool.hooks.log import format_line
from slurmpool.pooling.deadline import Deadline
from slurmpool.pooling.node import Node
from slurmpool.pooling.slurmjob import SlurmJobs
from slurmpool.slurm.runner import Runner

# Seconds between repairs when the node config does not say (monitor.repair_interval_s).
DEFAULT_REPAIR_S = 30.0
SENT, IN_STEP, FAILED = "sent", "in-step", "failed"
# The pooling events that say a pass did not get its counts to slurmctld.
FAILURES = frozenset({"fit-note-failed", "fit-publish-failed", "fit-publish-skipped"})
# A repair pass's own deadline: the node lock, NVML and two Slurm calls.
PASS_S = 30.0


class RepairLog:
    """The pooling event log (:class:`~slurmpool.pooling.node.EventLog`) written to
    monitord's log: ``fit: action=... key=value ...``."""

    def __init__(self, log: Callable[[str], None]) -> None:
        self._log = log
        self.actions: list[str] = []  # each pass's actions, for the caller to count

    def event(
        self,
        action: str,
        fields: Mapping[str, object] | None = None,
        level: str = "info",
        **more: object,
    ) -> str:
        line = format_line({"action": action, "level": level, **(fields or {}), **more})
        self.actions.append(action)
        self._log(f"fit: {line}")
        return line


class FitRepair:
    """One repair pass per call (see the module docstring)."""

    def __init__(
        self,
        *,
        node: str,
        config: NodeConfig,
        cls: NodeClassConfig,
        open_backend: Callable[[], GpuBackend],
        runner: Runner,
        log: Callable[[str], None],
    ) -> None:
        self.node = node
        self.config = config
        self.cls = cls
        self.open_backend = open_backend
        self.runner = runner
        self.log = log

    def __call__(self) -> str:
        """Repair once: :data:`SENT` (slurmctld was sent new counts), :data:`IN_STEP`
        (it had them) or :data:`FAILED` (logged; the next pass tries again)."""
        from slurmpool.pooling import publish

        log = RepairLog(self.log)
        deadline = Deadline(PASS_S, time.monotonic())
        node = Node(self.node, self.config, self.cls, log, self.open_backend, deadline)

        def slurm() -> SlurmJobs:
            return SlurmJobs(self.runner, PASS_S, deadline=deadline)

        try:
            sent = publish.repair(node, slurm)
        finally:
            node.close()
        if sent:
            return SENT
        return FAILED if any(a in FAILURES for a in log.actions) else IN_STEP
