"""The backfill plan: counts free over time, reservations, and where a task fits first."""

from __future__ import annotations

import pytest

from slurmpool.simulate.backfill import AnyOf, Timeline


def test_counts_come_back_when_each_limit_ends() -> None:
    plan = Timeline(10, [0, 1], [(50, ((0, 2),)), (30, ((1, 1),)), (50, ((1, 2),))])
    assert plan.starts == [10, 30, 50]
    assert plan.free == [[0, 0, 2], [1, 2, 4]]


def test_a_task_fits_now_or_at_the_first_second_that_holds_it_for_its_limit() -> None:
    plan = Timeline(0, [1, 0], [(100, ((0, 1),)), (40, ((1, 2),))])
    assert plan.earliest([((0, 1),)], 10) == (0, ((0, 1),))
    assert plan.earliest([((0, 2),)], 10) == (100, ((0, 2),))
    # Node 1 has two from 40; node 0 only from 100: the earlier one wins.
    assert plan.earliest([((0, 2),), ((1, 2),)], 10) == (40, ((1, 2),))
    assert plan.earliest([((0, 3),), ((1, 3),)], 10) is None  # more than either has


def test_a_reservation_splits_the_spans_and_takes_its_count_over_its_limit() -> None:
    plan = Timeline(0, [2], [])
    plan.take(20, 50, ((0, 2),))
    assert plan.starts == [0, 20, 50]
    assert plan.free == [[2, 0, 2]]
    # A task of 10 s fits now (it ends at 10, before 20); one of 30 s waits until 50.
    assert plan.earliest([((0, 1),)], 10) == (0, ((0, 1),))
    assert plan.earliest([((0, 1),)], 30) == (50, ((0, 1),))
    assert plan.room(10) == [2]
    assert plan.room(21) == [0]


def test_a_run_of_spans_must_last_the_whole_limit() -> None:
    """Enough from 0 to 20 and from 30 on: a 25 s task starts at 30, not in the gap."""
    plan = Timeline(0, [1], [])
    plan.take(20, 30, ((0, 1),))
    assert plan.earliest([((0, 1),)], 25) == (30, ((0, 1),))
    assert plan.earliest([((0, 1),)], 20) == (0, ((0, 1),))


def test_a_plan_moves_forward_only_until_a_span_starts() -> None:
    plan = Timeline(0, [1], [(60, ((0, 1),))])
    plan.advance(59)
    assert plan.now == 59
    with pytest.raises(ValueError, match="a span starts at 60"):
        plan.advance(60)


def test_runs_follow_each_reservation_and_the_plans_present() -> None:
    plan = Timeline(0, [2], [(40, ((0, 1),))])
    assert plan.runs(0, 3) == ([40], [-1])
    assert plan.runs(0, 2) == ([0], [-1])
    plan.take(10, 20, ((0, 1),))  # the runs of the counter are found anew
    assert plan.runs(0, 2) == ([0, 20], [10, -1])
    assert plan.earliest([((0, 2),)], 15) == (20, ((0, 2),))
    plan.advance(5)
    assert plan.runs(0, 2) == ([5, 20], [10, -1])


def test_a_need_of_several_counts_fits_where_all_of_them_are_free_for_its_limit() -> None:
    """Counter 0 is free until 30 and from 60; counter 1 only from 20: both from 20 to
    30 (too short for 20 s) and from 60 on."""
    plan = Timeline(0, [1, 0], [(20, ((1, 1),))])
    plan.take(30, 60, ((0, 1),))
    both = ((0, 1), (1, 1))
    assert plan.earliest([both], 5) == (20, both)
    assert plan.earliest([both], 20) == (60, both)
    # A second place with only one of the two counts free is no earlier.
    assert plan.earliest([((1, 1), (0, 2)), both], 20) == (60, both)
    plan.take(60, 100, both)
    assert plan.free == [[1, 1, 0, 0, 1], [0, 1, 1, 0, 1]]
    assert plan.starts == [0, 20, 30, 60, 100]


def test_any_k_of_several_counts_fit_from_the_first_second_k_of_them_are_free() -> None:
    """Three GPUs of one node: GPU 0 free from 50, GPU 1 from 20 until 40 and from 80,
    GPU 2 from 30.  Two whole GPUs for 30 s: from 50 (GPUs 0 and 2; GPU 1 is taken
    again at 40); for 10 s, from 30 (GPUs 1 and 2)."""
    plan = Timeline(0, [0, 0, 0], [(50, ((0, 1),)), (20, ((1, 1),)), (30, ((2, 1),))])
    plan.take(40, 80, ((1, 1),))
    two = AnyOf(2, ((0, 1), (1, 1), (2, 1)))
    assert plan.earliest([two], 30) == (50, ((0, 1), (2, 1)))
    assert plan.earliest([two], 10) == (30, ((1, 1), (2, 1)))
    assert plan.earliest([AnyOf(4, two.parts)], 10) is None
    # An earlier place among the needs wins over a later k-of.
    assert plan.earliest([((1, 1),), two], 10) == (20, ((1, 1),))
