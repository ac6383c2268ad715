"""Figures over time and by size that a replay collects as it goes, in memory that does
not grow with the number of tasks: the queue's length per time bin, and the waits per
request size."""

from __future__ import annotations

import math

from slurmpool.simulate.trace import Task

BINS = 300  # time bins over the trace's arrivals (the drain after them adds more)


class QueueSeries:
    """The time-weighted mean length of the queue in bins of ``width`` seconds from
    ``origin``.  Past ``2 * BINS`` bins (a long drain, or a trace whose end was not known
    at the start) neighbouring bins are merged and the width doubles, so the series stays
    between :data:`BINS` and twice that long."""

    def __init__(self, origin: int, width: int) -> None:
        self.origin = origin
        self.width = max(1, width)
        self.sums: list[float] = []  # per bin: task-seconds spent waiting

    @classmethod
    def over(cls, first_arrival: int, last_arrival: int) -> QueueSeries:
        """Bins of a width that gives about :data:`BINS` of them over the arrivals."""
        return cls(first_arrival, math.ceil((last_arrival - first_arrival + 1) / BINS))

    def add(self, start: int, end: int, length: int) -> None:
        """``length`` tasks waited from ``start`` to ``end``."""
        if end <= start:
            return
        last = (end - 1 - self.origin) // self.width
        while last >= 2 * BINS:
            self._fold()
            last = (end - 1 - self.origin) // self.width
        if last >= len(self.sums):
            self.sums.extend([0.0] * (last + 1 - len(self.sums)))
        if not length:
            return
        t = start
        while t < end:
            k = (t - self.origin) // self.width
            edge = min(end, self.origin + (k + 1) * self.width)
            self.sums[k] += length * (edge - t)
            t = edge

    def _fold(self) -> None:
        sums = self.sums + [0.0] * (len(self.sums) % 2)
        self.sums = [sums[k] + sums[k + 1] for k in range(0, len(sums), 2)]
        self.width *= 2

    def points(self) -> list[tuple[int, float]]:
        """(bin start, mean queue length in it), in order."""
        return [(self.origin + k * self.width, s / self.width) for k, s in enumerate(self.sums)]


class WaitsBySize:
    """The count and mean wait of the tasks of each request size: ``k/S`` of one GPU of
    ``S`` slices, or ``N GPU``."""

    def __init__(self, slices: int) -> None:
        self.slices = slices
        self.sums: dict[tuple[int, int], list[float]] = {}  # (whole GPUs, slices) -> [n, wait]

    def add(self, task: Task, wait: float) -> None:
        key = (0, task.slices(self.slices)) if task.fraction else (task.gpus, 0)
        entry = self.sums.setdefault(key, [0, 0.0])
        entry[0] += 1
        entry[1] += wait

    def rows(self) -> list[tuple[str, int, float]]:
        """(size, tasks, mean wait in seconds), fractions first, smallest first."""
        return [
            (f"{k}/{self.slices} GPU" if not n else f"{n} GPU", int(c), w / c)
            for (n, k), (c, w) in sorted(self.sums.items())
        ]
