"""A hook's time budget, and the rule every wait in a hook follows.

Slurm drains a node whose prolog fails or runs past its time, so a hook
ends on its own: each wait (the node lock, NVML retries, stopping processes,
Slurm calls) takes its bound from the hook's :class:`Deadline`, and stops
short of the reserve the exit path needs (undo, requeue, record).
"""

from __future__ import annotations

import time

from slurmpool.records import field, record

# Seconds a hook keeps for its exit path (undo what it began, requeue the job, record
# the outcome): waits on hardware and on the node lock stop this far from the deadline.
EXIT_RESERVE_S = 4.0
# The node lock is never waited on for more than this share of the hook's budget:
# the hook behind a stuck one gives up with time left to requeue its job.
LOCK_SHARE = 1 / 3


@record
class Deadline:
    """A hook's own time bound, below the wrapper's hard ``timeout``.

    Every wait in a hook is derived from it (:meth:`within`), never from a fixed
    constant alone, so a hook ends on its own, with time left for its exit path.
    """

    seconds: float
    start: float = field(default_factory=time.monotonic)

    def left(self) -> float:
        return max(0.0, self.seconds - (time.monotonic() - self.start))

    def within(self, wanted: float, reserve: float = 0.0) -> float:
        """How long one wait may take: at most ``wanted``, and never into the last
        ``reserve`` seconds of the budget (0 when none is left)."""
        return max(0.0, min(wanted, self.left() - reserve))

    def lock_wait(self) -> float:
        """How long to wait for the node lock now (:data:`LOCK_SHARE`, :data:`EXIT_RESERVE_S`)."""
        return self.within(self.seconds * LOCK_SHARE, EXIT_RESERVE_S)
