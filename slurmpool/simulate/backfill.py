"""Slurm's plan of a pool over time during one backfill pass: the counts free in
each span between the seconds something is due to end, less what the plan has
already given to the tasks before.

Spans start at the seconds where a count may change: now, each running task's
time limit, and each reservation's start and end.  A task fits from a span on
when one of its counters leaves it enough in every span over its time limit;
the earliest such span is where it starts (now) or what it reserves.  Nothing
here knows what a count is: the pool says (:meth:`slurmpool.simulate.pools.Pool.counts`).
"""

from __future__ import annotations

import bisect
from collections.abc import Iterable, Sequence

# What a task needs in one place: (counter, how many), such as (a node, 7 vgpu units).
Need = tuple[int, int]


class Timeline:
    """The counts free in each span from ``now``, per counter; ``ends`` gives back
    ``(second, counter, how many)`` at the second a running task's limit ends."""

    def __init__(self, now: int, free: Sequence[int], ends: Iterable[tuple[int, int, int]]):
        given: dict[int, list[Need]] = {}
        for second, counter, count in ends:  # all after now: a limit is never passed
            given.setdefault(second, []).append((counter, count))
        self.starts = [now]  # the second each span starts; the last one never ends
        self.free = [[n] for n in free]  # per counter, per span
        level = list(free)
        for second in sorted(given):
            for counter, count in given[second]:
                level[counter] += count
            self.starts.append(second)
            for counter, column in enumerate(self.free):
                column.append(level[counter])
        # Per (counter, how many): the runs of spans with that many free, as (first
        # seconds, seconds they end at, -1: never), kept while the counter is unchanged
        # (its number of changes, ``changes``, is the same).
        self.changes = [0] * len(self.free)
        self._runs: dict[Need, tuple[int, list[int], list[int]]] = {}

    @property
    def now(self) -> int:
        return self.starts[0]

    def advance(self, now: int) -> None:
        """Move the plan's present to ``now``, where nothing has ended since it was made
        (so the first span still holds)."""
        if len(self.starts) > 1 and now >= self.starts[1]:
            raise ValueError(f"the plan cannot move to {now}: a span starts at {self.starts[1]}")
        self.starts[0] = max(self.starts[0], now)
        self._runs.clear()  # a run from the first span starts later now

    def earliest(self, needs: Iterable[Need], limit: int) -> tuple[int, int, int] | None:
        """``(second, counter, how many)``: the first second from which one of ``needs``
        is free for ``limit`` seconds, the first of ``needs`` at a tie; None when none
        ever is."""
        best: tuple[int, int, int] | None = None
        for counter, count in needs:
            firsts, ends = self.runs(counter, count)
            for first, end in zip(firsts, ends, strict=True):
                if best is not None and first >= best[0]:
                    break  # no earlier than the best
                if end < 0 or end - first >= limit:
                    best = (first, counter, count)
                    break
        return best

    def runs(self, counter: int, count: int) -> tuple[list[int], list[int]]:
        """The runs of spans in which ``counter`` has ``count`` free: the second each
        starts, and the second it ends (-1: it never does)."""
        known = self._runs.get((counter, count))
        if known is not None and known[0] == self.changes[counter]:
            return known[1], known[2]
        firsts: list[int] = []
        ends: list[int] = []
        inside = False
        for start, free in zip(self.starts, self.free[counter], strict=True):
            if free >= count:
                if not inside:
                    firsts.append(start)
                    inside = True
            elif inside:
                ends.append(start)
                inside = False
        if inside:
            ends.append(-1)
        self._runs[counter, count] = (self.changes[counter], firsts, ends)
        return firsts, ends

    def room(self, until: int) -> list[int]:
        """Per counter, the least free from now to ``until``."""
        spans = max(1, bisect.bisect_left(self.starts, until))
        if spans == 1:
            return [column[0] for column in self.free]
        return [min(column[:spans]) for column in self.free]

    def take(self, start: int, until: int, counter: int, count: int) -> None:
        """Give ``count`` of ``counter`` to a task from ``start`` to ``until``."""
        first = self._cut(start)
        end = self._cut(until)
        column = self.free[counter]
        for k in range(first, end):
            column[k] -= count
        self.changes[counter] += 1

    def _cut(self, second: int) -> int:
        """The span that starts at ``second``, splitting the one it falls in."""
        k = bisect.bisect_right(self.starts, second) - 1
        if self.starts[k] == second:
            return k
        self.starts.insert(k + 1, second)
        for column in self.free:
            column.insert(k + 1, column[k])
        return k + 1
