"""What a replay measures, added up as tasks start and end, in memory that does not grow
with the number of tasks replayed: sums, a wait histogram of bounded size, and one
counter per GPU.  A replay of a million tasks keeps no record of each."""

from __future__ import annotations

import math
from collections.abc import Sequence

from slurmpool.simulate.series import WaitsBySize

TYPE_CHECKING = False
if TYPE_CHECKING:
    from slurmpool.simulate.pools import Hold, NodeShape
    from slurmpool.simulate.trace import Task

# The most distinct wait values a histogram keeps (a few MiB at most).
MAX_BUCKETS = 1 << 15


class WaitHistogram:
    """Waits in seconds, counted per value: exact while there are at most
    :data:`MAX_BUCKETS` distinct ones.  Past that every wait is rounded down to its
    :attr:`bits` leading binary digits, one fewer each time the buckets fill again, so
    the memory stays bounded whatever the number of tasks; a percentile is then at most
    ``2**(1 - bits)`` of itself short (waits under ``2**bits`` seconds stay exact)."""

    def __init__(self) -> None:
        self.counts: dict[int, int] = {}
        self.bits = 64  # leading binary digits kept: every wait a replay can have
        self.n = 0

    def add(self, wait: int) -> None:
        key = _round_down(wait, self.bits)
        self.counts[key] = self.counts.get(key, 0) + 1
        self.n += 1
        if len(self.counts) > MAX_BUCKETS:
            self._coarsen()

    def _coarsen(self) -> None:
        self.bits = min(self.bits, max(self.counts).bit_length())
        while len(self.counts) > MAX_BUCKETS // 2:
            self.bits -= 1
            coarser: dict[int, int] = {}
            for value, count in self.counts.items():
                key = _round_down(value, self.bits)
                coarser[key] = coarser.get(key, 0) + count
            self.counts = coarser

    def percentile(self, q: float) -> float:
        """The nearest-rank ``q`` percentile (0 < q <= 100); 0 for no waits."""
        if not self.n:
            return 0.0
        rank = max(1, math.ceil(q * self.n / 100))
        seen = 0
        for value in sorted(self.counts):
            seen += self.counts[value]
            if seen >= rank:
                return float(value)
        raise AssertionError("the counts add up to fewer than n")


def _round_down(value: int, bits: int) -> int:
    """``value`` with all but its ``bits`` leading binary digits zeroed."""
    drop = value.bit_length() - bits
    return value if drop <= 0 else value >> drop << drop


class Tally:
    """A replay's figures so far: what :func:`slurmpool.simulate.replay.replay` reports,
    added up at each start (:meth:`started`) and completion (:meth:`ended`)."""

    def __init__(self, shapes: Sequence[NodeShape]) -> None:
        self.shapes = shapes
        self.tasks = 0
        self.wait_s = 0  # the sum of all waits
        self.single = [0, 0]  # single-GPU tasks: [count, wait sum]
        self.multi = [0, 0]
        self.waits = WaitHistogram()
        self.by_size = WaitsBySize(shapes[0].slices)
        self.asked_slice_s = 0  # compute slice-seconds asked for
        self.held_slice_s = 0.0  # and held
        self.first_arrival: int | None = None
        self.last_end: int | None = None
        # For the energy, per node: GPU-seconds of compute asked for, and GPU-seconds in
        # which some task held the GPU (counted from holders per GPU).
        self.asked_gpu_s = [0.0] * len(shapes)
        self.occupied_gpu_s = [0] * len(shapes)
        self.holders = [[0] * s.gpus for s in shapes]
        self.busy_since = [[0] * s.gpus for s in shapes]

    def started(self, task: Task, start: int, hold: Hold) -> None:
        wait = start - task.arrival
        self.tasks += 1
        self.wait_s += wait
        group = self.single if task.gpus == 1 else self.multi
        group[0] += 1
        group[1] += wait
        self.waits.add(wait)
        self.by_size.add(task, wait)
        self.asked_slice_s += hold.asked * task.duration
        self.held_slice_s += hold.slices * task.duration
        if self.first_arrival is None or task.arrival < self.first_arrival:
            self.first_arrival = task.arrival
        end = start + task.duration
        if self.last_end is None or end > self.last_end:
            self.last_end = end
        node = hold.node
        self.asked_gpu_s[node] += hold.asked / self.shapes[node].slices * task.duration
        holders, since = self.holders[node], self.busy_since[node]
        for g in hold.gpus:
            if not holders[g]:
                since[g] = start
            holders[g] += 1

    def ended(self, hold: Hold, now: int) -> None:
        node = hold.node
        holders = self.holders[node]
        for g in hold.gpus:
            holders[g] -= 1
            if not holders[g]:
                self.occupied_gpu_s[node] += now - self.busy_since[node][g]

    def window(self) -> tuple[int, int] | None:
        """(first arrival, last completion) of the tasks started; None before any."""
        if self.first_arrival is None or self.last_end is None:
            return None
        return self.first_arrival, self.last_end
