"""Slurm's plan of a pool over time during one backfill pass: the counts free in
each span between the seconds something is due to end, less what the plan has
already given to the tasks before.

Spans start at the seconds where a count may change: now, each running task's
time limit, and each reservation's start and end.  A task needs, in each place it
could go, some of one or more counters at once (a ``mig`` task on a node: vgpu
units, an instance of its size and the node's ``next``, :mod:`slurmpool.fit`).
Or it needs any ``k`` of some counters (:class:`AnyOf`: a task of k whole GPUs
on a node that counts each GPU apart).  It fits from a span on when one place
leaves it enough of each of those counters in every span over its time limit;
the earliest such span is where it starts (now) or what it reserves.  Nothing
here knows what a count is: the pool says
(:meth:`slurmpool.simulate.pools.Pool.counts`).
"""

from __future__ import annotations

import bisect
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

# (counter, how many), such as (a node's vgpu units, 7).
Part = tuple[int, int]
# What a task needs in one place, all at once: one part or more.
Need = tuple[Part, ...]


@dataclass(frozen=True, slots=True)
class AnyOf:
    """Any ``k`` of ``parts`` at once, whichever they are: k GPUs of a node, each with
    its count free."""

    k: int
    parts: tuple[Part, ...]


class Timeline:
    """The counts free in each span from ``now``, per counter; ``ends`` gives back
    ``(second, need)`` at the second a running task's limit ends."""

    def __init__(self, now: int, free: Sequence[int], ends: Iterable[tuple[int, Need]]):
        given: dict[int, list[Part]] = {}
        for second, need in ends:  # all after now: a limit is never passed
            given.setdefault(second, []).extend(need)
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
        self._runs: dict[Part, tuple[int, list[int], list[int]]] = {}

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

    def earliest(self, needs: Iterable[Need | AnyOf], limit: int) -> tuple[int, Need] | None:
        """``(second, need)``: the first second from which one of ``needs`` is free for
        ``limit`` seconds, the first of ``needs`` at a tie; None when none ever is.  For
        an :class:`AnyOf`, ``need`` is the parts chosen: the first ``k`` free then."""
        best: tuple[int, Need] | None = None
        for need in needs:
            if isinstance(need, AnyOf):
                found = self._any_of(need, limit, None if best is None else best[0])
                if found is not None:
                    best = found
                continue
            firsts, ends = self.runs(*need[0]) if len(need) == 1 else self._both(need)
            for first, end in zip(firsts, ends, strict=True):
                if best is not None and first >= best[0]:
                    break  # no earlier than the best
                if end < 0 or end - first >= limit:
                    best = (first, need)
                    break
        return best

    def _any_of(self, want: AnyOf, limit: int, before: int | None) -> tuple[int, Need] | None:
        """The first second, before ``before``, from which ``want.k`` of its parts are
        free for ``limit`` seconds, and those parts.  Parts join only where a run of
        theirs starts, so the first such second is one of those."""
        runs = [(part, *self.runs(*part)) for part in want.parts]
        for t in sorted({first for _, firsts, _ in runs for first in firsts}):
            if before is not None and t >= before:
                return None
            chosen: list[Part] = []
            for part, firsts, ends in runs:
                k = bisect.bisect_right(firsts, t) - 1
                if k >= 0 and (ends[k] < 0 or ends[k] - t >= limit):
                    chosen.append(part)
                    if len(chosen) == want.k:
                        return t, tuple(chosen)
        return None

    def _both(self, need: Need) -> tuple[list[int], list[int]]:
        """The runs of spans in which every part of ``need`` is free: where the runs of
        its parts overlap."""
        firsts, ends = self.runs(*need[0])
        for part in need[1:]:
            other_firsts, other_ends = self.runs(*part)
            out_firsts: list[int] = []
            out_ends: list[int] = []
            i = j = 0
            while i < len(firsts) and j < len(other_firsts):
                first = max(firsts[i], other_firsts[j])
                a, b = ends[i], other_ends[j]
                end = b if a < 0 else a if b < 0 else min(a, b)
                if end < 0 or first < end:
                    out_firsts.append(first)
                    out_ends.append(end)
                # Step past the run that ends first (a run that never ends is last).
                if b < 0 or (a >= 0 and a <= b):
                    i += 1
                else:
                    j += 1
            firsts, ends = out_firsts, out_ends
        return firsts, ends

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

    def take(self, start: int, until: int, need: Need) -> None:
        """Give ``need`` to a task from ``start`` to ``until``."""
        first = self._cut(start)
        end = self._cut(until)
        for counter, count in need:
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
