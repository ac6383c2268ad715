"""The replay's running figures (tally.py) against the same figures computed from every
run kept, and a replay read from an iterator against the same one read from a list."""

from __future__ import annotations

import math
import random
from collections import defaultdict
from collections.abc import Iterator

import pytest
from test_simulate_properties import POLICIES, drawn, played

from slurmpool.catalogue import Catalogue
from slurmpool.simulate.pools import PoolError, make_pool, uniform
from slurmpool.simulate.replay import SCHEDULERS, Replay, replay
from slurmpool.simulate.series import BINS, QueueSeries
from slurmpool.simulate.tally import MAX_BUCKETS, WaitHistogram
from slurmpool.simulate.trace import Task

A100 = "A100-SXM4-80GB"


def nearest_rank(values: list[int], q: float) -> int:
    ordered = sorted(values)
    return ordered[max(0, math.ceil(q * len(ordered) / 100) - 1)]


def test_wait_percentiles_are_exact_while_the_buckets_last() -> None:
    rng = random.Random(7)
    waits = [rng.randrange(1 << 40) for _ in range(MAX_BUCKETS)]
    histogram = WaitHistogram()
    for w in waits:
        histogram.add(w)
    assert histogram.bits == 64
    for q in (0.001, 1, 50, 95, 99.9, 100):
        assert histogram.percentile(q) == nearest_rank(waits, q)
    assert WaitHistogram().percentile(95) == 0


@pytest.mark.parametrize("spread", [1 << 20, 1 << 40])
def test_past_the_buckets_waits_are_rounded_within_the_bound(spread: int) -> None:
    rng = random.Random(spread)
    waits = [rng.randrange(spread) for _ in range(4 * MAX_BUCKETS)] + list(range(1000))
    histogram = WaitHistogram()
    for w in waits:
        histogram.add(w)
    assert len(histogram.counts) <= MAX_BUCKETS and histogram.bits < 64
    assert sum(histogram.counts.values()) == histogram.n == len(waits)
    for q in (0.01, 1, 50, 95, 100):
        exact, counted = nearest_rank(waits, q), histogram.percentile(q)
        assert counted <= exact
        assert exact - counted <= exact * 2 ** (1 - histogram.bits)
        if exact < 1 << histogram.bits:
            assert counted == exact


def test_queue_bins_widen_and_keep_every_task_second() -> None:
    series = QueueSeries(100, 1)
    rng = random.Random(3)
    t, total = 100, 0
    for _ in range(2000):
        step, length = rng.randint(1, 500), rng.randint(0, 9)
        series.add(t, t + step, length)
        total += step * length
        t += step
    points = series.points()
    assert BINS <= len(points) <= 2 * BINS
    width = points[1][0] - points[0][0]
    assert sum(mean * width for _, mean in points) == pytest.approx(total)
    assert points[0][0] == 100 and points[-1][0] < t <= points[-1][0] + width


@pytest.mark.parametrize(
    ("seed", "policy", "scheduler"),
    [(s, p, k) for s in range(12) for p in POLICIES for k in SCHEDULERS],
)
def test_running_figures_match_the_runs(
    seed: int, policy: str, scheduler: str, catalogue: Catalogue
) -> None:
    """What the tally added up is what the kept runs give: waits, slice-hours, and the
    GPU-seconds in which any task held each GPU (the union of its runs)."""
    _, shapes, run = played(seed, policy, catalogue, scheduler)
    tally, runs = run.tally, run.runs
    waits = [r.start - r.task.arrival for r in runs]
    assert tally.tasks == len(runs)
    assert tally.wait_s == sum(waits)
    assert tally.waits.percentile(95) == (nearest_rank(waits, 95) if waits else 0)
    assert tally.asked_slice_s == sum(r.hold.asked * r.task.duration for r in runs)
    assert tally.held_slice_s == pytest.approx(sum(r.hold.slices * r.task.duration for r in runs))
    spans: dict[tuple[int, int], list[tuple[int, int]]] = defaultdict(list)
    for r in runs:
        assert r.end is not None
        for g in r.hold.gpus:
            spans[r.hold.node, g].append((r.start, r.end))
    occupied = [0] * len(shapes)
    for (node, _), held in spans.items():
        seconds: set[int] = set()
        for start, end in held:
            seconds.update(range(start, end))
        occupied[node] += len(seconds)
    assert tally.occupied_gpu_s == occupied
    assert all(h == 0 for node in tally.holders for h in node)


@pytest.mark.parametrize(("seed", "policy"), [(s, p) for s in range(12) for p in POLICIES])
def test_a_replay_from_an_iterator_is_the_replay_from_a_list(
    seed: int, policy: str, catalogue: Catalogue
) -> None:
    """The same figures but the queue's bins (an iterator's end is not known ahead), and
    nothing left in the replay's tables once it is done; the tasks the pool cannot run
    are counted in both."""
    tasks, shapes, spec = drawn(seed, policy, catalogue)
    kept = Replay(make_pool(spec, shapes), keep_runs=True)
    kept.play(tasks)
    pool = make_pool(spec, shapes)
    streamed = Replay(pool)
    streamed.play(iter(tasks))
    assert (streamed.tally.tasks, streamed.refused) == (kept.tally.tasks, kept.refused)
    assert streamed.tally.wait_s == kept.tally.wait_s
    assert streamed.tally.occupied_gpu_s == kept.tally.occupied_gpu_s
    assert streamed.requeues == kept.requeues
    assert not (streamed.order or streamed.held or streamed.due)
    assert not getattr(pool, "kept_off", None)  # mig: every task started, none kept off
    assert not (streamed.runs or streamed.queue or streamed.running or streamed.wakeups)


def test_an_iterator_out_of_arrival_order_is_an_error(catalogue: Catalogue) -> None:
    tasks = [Task("a", 10, 5, 1, 1000), Task("b", 5, 5, 1, 1000)]
    pool = make_pool("whole", uniform(1, 2, catalogue.get(A100)))
    with pytest.raises(ValueError, match=r"task b arrives at 5, before task a \(10\)"):
        replay(iter(tasks), pool)


def test_an_iterator_is_checked_as_it_is_read(catalogue: Catalogue) -> None:
    def tasks() -> Iterator[Task]:
        yield Task("fine", 0, 5, 1, 1000)
        yield Task("huge", 1, 5, 9, 1000)

    pool = make_pool("whole", uniform(1, 8, catalogue.get(A100)))
    with pytest.raises(PoolError, match="task huge asks for 9 GPUs"):
        replay(tasks(), pool)


def test_refused_tasks_from_an_iterator_are_counted(catalogue: Catalogue) -> None:
    pool = make_pool("mig-static:1g+1g+1g+1g+1g+1g+1g", uniform(1, 1, catalogue.get(A100)))
    tasks = [Task("small", 0, 5, 1, 100), Task("whole", 1, 5, 1, 1000)]
    result = replay(iter(tasks), pool)
    assert (result.tasks, result.refused) == (1, 1)
