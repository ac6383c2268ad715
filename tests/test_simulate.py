"""slurmpool simulate: the replay core on traces small enough to work out by hand."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from click.testing import CliRunner

from slurmpool.catalogue import Catalogue
from slurmpool.cli import main
from slurmpool.simulate.energy import Watts, WattsError, parse_watts, power_for
from slurmpool.simulate.pools import NodeShape, PoolError, make_pool, uniform
from slurmpool.simulate.replay import (
    NO_ROOM,
    UNPLANNED,
    WAIT_REASONS,
    Replay,
    Result,
    compare,
    replay,
)
from slurmpool.simulate.trace import Task, TraceError, parse_trace, read_trace

A100 = "A100-SXM4-80GB"
HEADER = "name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec,qos,pod_phase,"
HEADER += "creation_time,deletion_time,scheduled_time\n"


def task(name: str, arrival: int, duration: int, gpus: int = 1, milli: int = 1000) -> Task:
    return Task(name, arrival, duration, gpus, milli)


def run(
    catalogue: Catalogue,
    policy: str,
    tasks: list[Task],
    nodes: int,
    gpus: int,
    scheduler: str = "fifo",
    requeue_delay: int = 0,
) -> Result:
    pool = make_pool(policy, uniform(nodes, gpus, catalogue.get(A100)))
    return replay(tasks, pool, scheduler, requeue_delay=requeue_delay)


def waits(catalogue: Catalogue, policy: str, tasks: list[Task], nodes: int, gpus: int) -> float:
    return run(catalogue, policy, tasks, nodes, gpus).wait_mean_s * len(tasks)


# -- the trace ---------------------------------------------------------------------------


def write_trace(path: Path, *rows: str) -> Path:
    path.write_text(HEADER + "".join(row + "\n" for row in rows))
    return path


def test_a_trace_row_becomes_a_task_and_cpu_tasks_are_left_out(tmp_path: Path) -> None:
    path = write_trace(
        tmp_path / "t.csv",
        "p0,1000,1024,1,460,,LS,Running,500,1500,500",
        "p1,1000,1024,0,0,,LS,Running,0,10,0",
        "p2,1000,1024,4,1000,,LS,Running,100,100,100",
    )
    assert read_trace(path) == [task("p2", 100, 1, gpus=4), task("p0", 500, 1000, milli=460)]
    assert task("p0", 0, 1, milli=460).slices(7) == 4  # ceil(7 * 460 / 1000)
    assert task("p0", 0, 1, milli=1).slices(7) == 1


@pytest.mark.parametrize(
    ("row", "message"),
    [
        ("p,1,1,one,0,,LS,R,0,1,0", "t.csv:2: num_gpu is 'one', expected a whole number"),
        ("p,1,1,1,0,,LS,R,0,1,0", "t.csv:2: gpu_milli is 0 for a GPU task, expected 1 to 1000"),
        ("p,1,1,1,500,,LS,R,-5,1,0", "t.csv:2: creation_time is -5, expected 0 or more"),
    ],
)
def test_a_bad_row_is_named_by_file_line_and_column(row: str, message: str) -> None:
    with pytest.raises(TraceError, match=message):
        list(parse_trace([HEADER, row + "\n"], "t.csv"))


def test_a_file_that_is_not_a_pod_list_says_what_columns_it_needs() -> None:
    with pytest.raises(TraceError, match="no column num_gpu, gpu_milli"):
        list(parse_trace(["name,creation_time,deletion_time\n"], "t.csv"))


# -- the scheduler --------------------------------------------------------------------


def test_a_task_that_does_not_fit_waits_for_the_next_completion(catalogue: Catalogue) -> None:
    tasks = [task("a", 0, 10, milli=500), task("b", 0, 20, milli=500), task("c", 0, 5)]
    # whole: a and b take both GPUs; c starts when a ends, at 10.
    assert waits(catalogue, "whole", tasks, 1, 2) == 10
    # fluid: a and b (4 slices each) take 4 of each GPU's 7; c needs an empty one.
    assert waits(catalogue, "fluid", tasks, 1, 2) == 10
    # Three quarters of a GPU fit together only under fluid: 2 + 2 + 2 of 7 slices.
    small = [task(n, 0, 10, milli=250) for n in "abc"]
    assert waits(catalogue, "fluid", small, 1, 1) == 0
    assert waits(catalogue, "whole", small, 1, 1) == 10 + 20


def test_completions_come_before_arrivals_at_the_same_second(catalogue: Catalogue) -> None:
    tasks = [task("a", 0, 10), task("b", 10, 10)]
    assert waits(catalogue, "whole", tasks, 1, 1) == 0


def test_an_arrival_that_fits_starts_even_when_others_wait(catalogue: Catalogue) -> None:
    # b (two GPUs) waits for a; c (one GPU) arrives later and takes the free GPU at once.
    tasks = [task("a", 0, 100), task("b", 1, 10, gpus=2), task("c", 2, 10)]
    result = run(catalogue, "whole", tasks, 1, 2)
    assert result.wait_mean_multi_s == 99  # b starts at 100
    assert result.wait_mean_single_s == 0


def test_a_multi_gpu_task_needs_its_gpus_on_one_node(catalogue: Catalogue) -> None:
    tasks = [task("a", 0, 50), task("b", 0, 50), task("c", 0, 10, gpus=2)]
    # Two nodes of two GPUs: a and b share node 0, so c gets node 1 at once...
    assert waits(catalogue, "whole", tasks, 2, 2) == 0
    # ...but with a on node 0 and node 1 holding b, c waits for a node to empty.
    spread = [task("x", 0, 50, gpus=2), task("a", 0, 50), task("c", 0, 10, gpus=2)]
    assert waits(catalogue, "whole", spread, 2, 2) == 50


def waits_of(catalogue: Catalogue, tasks: list[Task], scheduler: str) -> list[int]:
    pool = make_pool("whole", uniform(1, 2, catalogue.get(A100)))
    replayed = Replay(pool, scheduler, keep_runs=True)
    replayed.play(tasks)
    return [r.start - r.task.arrival for r in sorted(replayed.runs, key=lambda r: r.task.name)]


def test_backfill_keeps_the_head_of_the_queue_from_starving(catalogue: Catalogue) -> None:
    """b (both GPUs) waits for a.  c ends before a does, so it backfills; d would still
    run when a ends, so under backfill it waits behind b instead of delaying it."""
    tasks = [task("a", 0, 100), task("b", 1, 10, gpus=2), task("c", 2, 50), task("d", 3, 200)]
    # fifo: c starts at 2, d when c ends (52), b only once d ends (252).
    assert waits_of(catalogue, tasks, "fifo") == [0, 251, 0, 49]
    # backfill: b holds a reservation at 100; d starts when b ends, at 110.
    assert waits_of(catalogue, tasks, "backfill") == [0, 99, 0, 107]


def test_backfill_reserves_for_every_waiting_task_not_just_the_first(
    catalogue: Catalogue,
) -> None:
    """Two nodes of two GPUs.  c (two GPUs) reserves node 0 from 100, when a ends; d
    (two GPUs) reserves node 1 from 200, when b ends.  e (one GPU, 500 s) fits on node 1
    now and would still run at 200: it does not start before d, as it would if only
    the first waiting task held a reservation (d would wait for e, until 503)."""
    tasks = [
        task("a", 0, 100, gpus=2),
        task("b", 0, 200),
        task("c", 1, 300, gpus=2),
        task("d", 2, 10, gpus=2),
        task("e", 3, 500),
    ]
    pool = make_pool("whole", uniform(2, 2, catalogue.get(A100)))
    replayed = Replay(pool, "backfill", keep_runs=True)
    replayed.play(tasks)
    starts = {r.task.name: (r.start, r.hold.node) for r in replayed.runs}
    assert starts == {"a": (0, 0), "b": (0, 1), "c": (100, 0), "d": (200, 1), "e": (210, 1)}


@pytest.mark.parametrize("policy", ["fluid", "shared:7"])
def test_backfill_plans_a_fraction_on_the_gpu_that_will_hold_it(
    catalogue: Catalogue, policy: str
) -> None:
    """Slurm counts each GPU's slices (or shares) apart, as it counts shards.  One node of
    two A100s: a holds 5 slices of GPU 0 until 100, b 4 of GPU 1 until 200.  c (6
    slices) fits no GPU and reserves GPU 0 from 100; d (3) fits GPU 1 now; e (2 slices,
    150 s) would fit GPU 0 now but would leave c 5 at 100, so it waits until c ends.
    (Counted per node, c's 6 of the node's 5 free would reserve nothing, and e would
    start at once and hold c back until 153.)"""
    tasks = [
        task("a", 0, 100, milli=700),
        task("b", 0, 200, milli=550),
        task("c", 1, 50, milli=850),
        task("d", 2, 150, milli=400),
        task("e", 3, 150, milli=250),
    ]
    replayed = Replay(
        make_pool(policy, uniform(1, 2, catalogue.get(A100))), "backfill", keep_runs=True
    )
    replayed.play(tasks)
    starts = {r.task.name: (r.start, r.hold.gpus) for r in replayed.runs}
    assert starts == {
        "a": (0, (0,)),
        "b": (0, (1,)),
        "c": (100, (0,)),
        "d": (2, (1,)),
        "e": (150, (0,)),
    }


def test_backfill_trusts_limits_not_durations(catalogue: Catalogue) -> None:
    """Limits twice the durations: b's reservation is at a's limit, 200 (a really ends
    at 100 and b starts then); c's limit ends at 102, before 200, so c backfills."""
    tasks = [task("a", 0, 100), task("b", 1, 10, gpus=2), task("c", 2, 50)]
    pool = make_pool("whole", uniform(1, 2, catalogue.get(A100)))
    replayed = Replay(pool, "backfill", limit_factor=2, keep_runs=True)
    replayed.play(tasks)
    starts = {r.task.name: r.start for r in replayed.runs}
    assert starts == {"a": 0, "b": 100, "c": 2}


@pytest.mark.parametrize("scheduler", ["fifo", "backfill"])
def test_the_blind_mig_pool_requeues_when_slurms_count_fits_but_the_slices_do_not(
    catalogue: Catalogue, scheduler: str
) -> None:
    """Two 3g instances use all 8 memory slices of an A100 and 6 of its 7 compute
    slices: Slurm counts one vgpu unit free, the prolog cannot carve a 1g there.
    Under ``mig`` the node counts no 1g it could carve: c waits, never started."""
    tasks = [task("a", 0, 100, milli=400), task("b", 0, 100, milli=400)]
    tasks.append(task("c", 1, 10, milli=100))
    result = run(catalogue, "mig-blind", tasks, 1, 1, scheduler, requeue_delay=0)
    assert result.frag_requeues == 1
    assert result.wait_mean_s * 3 == 99  # c starts when a and b end, at 100
    result = run(catalogue, "mig", tasks, 1, 1, scheduler)
    assert (result.frag_requeues, result.wait_mean_s * 3) == (0, 99)
    assert run(catalogue, "fluid", tasks, 1, 1).wait_mean_s == 0  # no geometry, no wait


@pytest.mark.parametrize("scheduler", ["fifo", "backfill"])
def test_a_node_whose_units_are_in_pieces_gets_no_4g_task(
    catalogue: Catalogue, scheduler: str
) -> None:
    """Two nodes of one A100.  Six 1g tasks, one a second, fill node 0's 1g places 6 to
    1 (the placement packs from the top); those in 5, 3 and 1 end, leaving four units
    free in pieces (0, 1, 3, 5), where no 4g fits (a 4g sits in 0-3 only).  A vgpu:4
    task goes to node 1 under ``mig``; ``mig-blind`` starts it on node 0 by its units,
    and the prolog requeues it."""
    ones = [task(f"o{n}", n, 10 if n % 2 else 1000, milli=100) for n in range(6)]
    four = task("four", 20, 100, milli=500)  # 3.5 of 7 slices: vgpu:4
    for policy, requeued in (("mig", False), ("mig-blind", True)):
        pool = make_pool(policy, uniform(2, 1, catalogue.get(A100)))
        replayed = Replay(pool, scheduler, requeue_delay=0, keep_runs=True)
        replayed.play([*ones, four])
        runs = {r.task.name: r for r in replayed.runs}
        assert {r.hold.node for n, r in runs.items() if n != "four"} == {0}
        freed = [runs[f"o{n}"].hold.instances[0][1].placement.start for n in (1, 3, 5)]
        assert freed == [5, 3, 1]
        if requeued:  # again each time a task on node 0 ends and it is let back there
            assert replayed.requeues >= 1 and runs["four"].start > 20
        else:
            assert replayed.requeues == 0
            assert (runs["four"].start, runs["four"].hold.node) == (20, 1)


@pytest.mark.parametrize(("scheduler", "reason"), [("fifo", NO_ROOM), ("backfill", UNPLANNED)])
def test_a_size_no_node_counts_is_planned_nothing_and_says_so(
    catalogue: Catalogue, scheduler: str, reason: str
) -> None:
    """As above, on one node: its 1g tasks in 6, 4 and 2 (until 1000, 1002, 1004) leave
    no place for a 4g, so the node counts no s4 and Slurm plans the vgpu:4 task nothing
    (it could reserve only what the node counts); it starts at 1004, its 984 s of wait
    all for that reason."""
    ones = [task(f"o{n}", n, 10 if n % 2 else 1000, milli=100) for n in range(6)]
    four = task("four", 20, 100, milli=500)
    result = run(catalogue, "mig", [*ones, four], 1, 1, scheduler)
    assert (result.frag_requeues, round(result.wait_mean_s * 7)) == (0, 984)
    assert result.wait_by_reason_s == {**dict.fromkeys(WAIT_REASONS, 0), reason: 984}


@pytest.mark.parametrize("scheduler", ["fifo", "backfill"])
def test_a_requeued_task_waits_slurms_delay_before_it_starts_again(
    catalogue: Catalogue, scheduler: str
) -> None:
    """As above, but Slurm holds a requeued job back for the credential lifetime: c,
    requeued at 1, may start again at 121 (a and b ended at 100)."""
    tasks = [task("a", 0, 100, milli=400), task("b", 0, 100, milli=400)]
    tasks.append(task("c", 1, 10, milli=100))
    result = run(catalogue, "mig-blind", tasks, 1, 1, scheduler, requeue_delay=120)
    assert (result.frag_requeues, result.wait_mean_s * 3) == (1, 120)
    # Kept off the node that requeued it until a task there ends: a and b run until
    # 200, so c is not started (nor requeued) at 121 but at 200, when they end.
    longer = [task("a", 0, 200, milli=400), task("b", 0, 200, milli=400), tasks[2]]
    result = run(catalogue, "mig-blind", longer, 1, 1, scheduler, requeue_delay=120)
    assert (result.frag_requeues, result.wait_mean_s * 3) == (1, 199)


@pytest.mark.parametrize("scheduler", ["fifo", "backfill"])
def test_a_requeued_task_goes_to_another_node_next(catalogue: Catalogue, scheduler: str) -> None:
    """Two nodes of one A100: a and b fill the first node's memory slices, c is started
    there by count, requeued at 1 and kept off it; Slurm's next try, at 121, is the
    second node, where it runs (on the first it would wait for a and b, until 200)."""
    tasks = [task("a", 0, 200, milli=400), task("b", 0, 200, milli=400)]
    tasks.append(task("c", 1, 10, milli=100))
    replayed = Replay(
        make_pool("mig-blind", uniform(2, 1, catalogue.get(A100))),
        scheduler,
        requeue_delay=120,
        keep_runs=True,
    )
    replayed.play(tasks)
    placed = {r.task.name: (r.start, r.hold.node) for r in replayed.runs}
    assert placed == {"a": (0, 0), "b": (0, 0), "c": (121, 1)}
    assert replayed.requeues == 1
    # Under mig one pass starts one task on a node (its next): a and b go to a node
    # each, and c starts at once beside a.
    pool = make_pool("mig", uniform(2, 1, catalogue.get(A100)))
    replayed = Replay(pool, scheduler, keep_runs=True)
    replayed.play(tasks)
    placed = {r.task.name: (r.start, r.hold.node) for r in replayed.runs}
    assert placed == {"a": (0, 0), "b": (0, 1), "c": (1, 0)}
    assert replayed.requeues == 0


def test_mig_holds_what_the_rounding_carves(catalogue: Catalogue) -> None:
    # 5 slices asked (milli 700), a 7g instance held: vgpu:5 rounds up to vgpu:7.
    result = run(catalogue, "mig", [task("a", 0, 3600, milli=700)], 1, 1)
    assert (result.requested_slice_h, result.allocated_slice_h) == (5, 7)
    assert result.util == pytest.approx(5 / 7)
    whole = run(catalogue, "whole", [task("a", 0, 3600, milli=700)], 1, 1)
    assert whole.allocated_slice_h == 7


def test_a_task_bigger_than_any_node_is_an_error_not_a_wait(catalogue: Catalogue) -> None:
    with pytest.raises(PoolError, match="asks for 8 GPUs and the largest node has 4"):
        run(catalogue, "whole", [task("big", 0, 1, gpus=8)], 2, 4)


def test_a_model_without_mig_is_refused(catalogue: Catalogue) -> None:
    with pytest.raises(PoolError, match="L40S-48GB has no MIG"):
        make_pool("whole", [NodeShape(1, catalogue.get("L40S-48GB"))])


def test_a_static_layout_gives_each_task_the_smallest_instance_that_holds_it(
    catalogue: Catalogue,
) -> None:
    """One A100 carved 3g + 2g + 2g.  a (3 slices) takes the 3g; b and c (2 and 1) the
    two 2g; d (1 slice) asks for a 2g too, the smallest instance there is, and waits for
    b's at 50.  A whole-GPU task has no 7g to run on: refused."""
    tasks = [
        task("a", 0, 100, milli=400),
        task("b", 0, 50, milli=250),
        task("c", 0, 100, milli=100),
        task("d", 10, 10, milli=100),
        task("e", 20, 10),
    ]
    result = run(catalogue, "mig-static:3g+2g+2g", tasks, 1, 1)
    assert (result.tasks, result.refused) == (4, 1)
    assert result.wait_mean_s * 4 == 40  # d: 10 -> 50
    assert result.policy == "mig-static:3g+2g+2g"
    # Held: the instances (3 + 2 + 2 + 2 slices), asked: 3 + 2 + 1 + 1.
    assert result.allocated_slice_h * 3600 == 3 * 100 + 2 * 50 + 2 * 100 + 2 * 10
    assert result.requested_slice_h * 3600 == 3 * 100 + 2 * 50 + 100 + 10


def test_a_static_layout_per_gpu_the_last_repeating(catalogue: Catalogue) -> None:
    """7g/3g+4g on nodes of 3 GPUs: GPU 0 is whole, GPUs 1 and 2 are 4g + 3g.  A 1-GPU
    task takes the 7g; two more wait for it; a 2-GPU task has one 7g a node: refused."""
    pool = make_pool("mig-static:7g/4g+3g", uniform(1, 3, catalogue.get(A100)))
    assert pool.name == "mig-static:7g/4g+3g"
    tasks = [task("a", 0, 100), task("b", 0, 10), task("c", 0, 1, milli=500), task("d", 0, 1, 2)]
    replayed = Replay(pool, keep_runs=True)
    replayed.play([t for t in tasks if pool.runs(t)])
    starts = {r.task.name: (r.start, r.hold.gpus) for r in replayed.runs}
    assert starts == {"a": (0, (0,)), "b": (100, (0,)), "c": (0, (1,))}
    assert not pool.runs(tasks[3])


@pytest.mark.parametrize(
    ("policy", "message"),
    [
        ("mig-static", "expected mig-static:<a MIG layout such as 3g+2g+2g"),
        ("mig-static:", "expected mig-static:<a MIG layout"),
        ("mig-static:3g++2g", "an empty profile name"),
        ("mig-static:5g", "unknown MIG profile '5g' for A100-SXM4-80GB"),
        ("mig-static:4g+4g", "layout 4g.40gb + 4g.40gb does not fit one A100-SXM4-80GB"),
        ("mig-static:7g/7g/7g", "gives 3 GPUs a layout and the largest node has 2"),
        ("shared", "expected shared:<the shares of each GPU"),
        ("shared:0", "shared:0: expected 1 or more shares per GPU"),
        ("shared:-2", "'-2' is not a whole number"),
        ("whole:2", "whole takes no argument"),
        ("best", "no policy 'best'; expected one of whole, mig, mig-blind, fluid, mig-static:"),
    ],
)
def test_a_policy_that_cannot_be_modelled_says_what_it_expected(
    catalogue: Catalogue, policy: str, message: str
) -> None:
    with pytest.raises(PoolError, match=re.escape(message)):
        make_pool(policy, uniform(1, 2, catalogue.get(A100)))


def test_shares_of_one_gpu_come_from_the_first_gpu_with_enough(catalogue: Catalogue) -> None:
    """shared:4 on two GPUs.  a (300 -> 2 shares) and b (500 -> 2) fill GPU 0; c (100 ->
    1) goes to GPU 1, which the whole-GPU task d then waits for (until c ends at 30)."""
    tasks = [
        task("a", 0, 100, milli=300),
        task("b", 0, 100, milli=500),
        task("c", 0, 30, milli=100),
        task("d", 5, 10),
    ]
    pool = make_pool("shared:4", uniform(1, 2, catalogue.get(A100)))
    replayed = Replay(pool, keep_runs=True)
    replayed.play(tasks)
    placed = {r.task.name: (r.start, r.hold.gpus, r.hold.units) for r in replayed.runs}
    assert placed == {
        "a": (0, (0,), 2),
        "b": (0, (0,), 2),
        "c": (0, (1,), 1),
        "d": (30, (1,), 4),
    }
    result = run(catalogue, "shared:4", tasks, 1, 2)
    # Held: half a GPU each for a and b (3.5 slices), a quarter for c, all of one for d.
    assert result.allocated_slice_h * 3600 == pytest.approx(3.5 * 200 + 1.75 * 30 + 7 * 10)


# -- energy ------------------------------------------------------------------------------


def test_energy_is_idle_power_for_the_window_plus_the_work_asked_for(
    catalogue: Catalogue,
) -> None:
    """Two A100s at 100 W idle, 400 W busy; one task asks for 4 of 7 slices for an hour.
    The pool draws 2 x 100 W for the hour, plus 300 W x 4/7 for the work; the second GPU
    holds nothing all hour (and under whole, the first holds the task)."""
    power = {A100: Watts(100, 400, "test")}
    pool = make_pool("whole", uniform(1, 2, catalogue.get(A100)))
    result = replay([task("a", 0, 3600, milli=500)], pool, power=power)
    assert result.energy_kwh == pytest.approx((2 * 100 + 300 * 4 / 7) / 1000)
    assert (result.empty_gpu_h, result.empty_kwh) == (1, pytest.approx(0.1))


def test_policies_are_measured_over_the_same_window(catalogue: Catalogue) -> None:
    """On one A100, a (4 slices) and b (3) share the GPU under fluid and end at 100; under
    whole, b waits and ends at 200.  Both pools are measured to 200: the same energy (the
    same work), but fluid's GPU stands empty from 100 to 200."""
    tasks = [task("a", 0, 100, milli=500), task("b", 0, 100, milli=400)]
    power = {A100: Watts(100, 400, "test")}
    whole, fluid = compare(
        tasks, ["whole", "fluid"], uniform(1, 1, catalogue.get(A100)), power=power
    )
    assert whole.energy_kwh == pytest.approx(fluid.energy_kwh)
    assert (whole.empty_gpu_h, fluid.empty_gpu_h * 3600) == (0, pytest.approx(100))
    assert fluid.empty_kwh == pytest.approx(100 * 100 / 3.6e6)


def test_a_model_without_known_power_has_no_energy_until_it_is_given(
    catalogue: Catalogue,
) -> None:
    shapes = uniform(1, 1, catalogue.get("H200-141GB"))
    assert power_for(shapes) == {"H200-141GB": None}
    result = replay([task("a", 0, 10)], make_pool("whole", shapes))
    assert (result.energy_kwh, result.empty_gpu_h, result.empty_kwh) == (None, None, None)
    every, named = parse_watts(["50/500", "H200-141GB=80/700"])
    assert every == Watts(50, 500, "given with --watts")
    assert power_for(shapes, every, named)["H200-141GB"] == Watts(80, 700, "given with --watts")
    assert power_for(uniform(1, 1, catalogue.get(A100)), every, named)[A100] == every


@pytest.mark.parametrize("spec", ["60", "400/60", "x/400", "A100=/", "-1/400", "0/0"])
def test_a_power_figure_that_cannot_be_read_says_what_was_expected(spec: str) -> None:
    with pytest.raises(
        WattsError, match=re.escape(f"--watts {spec!r}: expected [MODEL=]IDLE/BUSY")
    ):
        parse_watts([spec])


def test_the_command_asks_for_power_it_does_not_know(trace: Path) -> None:
    args = ["simulate", "--trace", str(trace), "--nodes", "1", "--gpus-per-node", "1"]
    result = CliRunner().invoke(main, [*args, "--model", "H200-141GB"])
    assert result.exit_code == 0, result.output
    assert (
        "energy: no power figures for H200-141GB; give them with --watts H200-141GB=IDLE/BUSY"
        in result.output
    )
    assert "energy MWh" not in result.output
    given = CliRunner().invoke(
        main, [*args, "--model", "H200-141GB", "--watts", "80/700", "--json"]
    )
    data = json.loads(given.output)
    assert data["power"] == {
        "H200-141GB": {"idle_w": 80, "busy_w": 700, "source": "given with --watts"}
    }
    assert all(r["energy_kwh"] > 0 for r in data["results"])
    wrong = CliRunner().invoke(main, [*args, "--model", A100, "--watts", "400/60"])
    assert wrong.exit_code != 0 and "--watts '400/60': expected" in wrong.output


# -- the command -------------------------------------------------------------------------


@pytest.fixture
def trace(tmp_path: Path) -> Path:
    return write_trace(
        tmp_path / "trace.csv",
        "a,1,1,1,400,,LS,R,0,100,0",
        "b,1,1,1,400,,LS,R,0,100,0",
        "c,1,1,1,100,,LS,R,1,11,1",
    )


def test_the_command_prints_one_row_per_policy(trace: Path) -> None:
    args = ["simulate", "--trace", str(trace), "--nodes", "1", "--gpus-per-node", "1"]
    result = CliRunner().invoke(main, [*args, "--model", A100])
    assert result.exit_code == 0, result.output
    lines = result.output.splitlines()
    assert lines[0] == f"3 GPU tasks on 1 nodes x 1 {A100}, scheduler fifo"
    assert lines[1].split()[:3] == ["policy", "tasks", "wait"]
    assert [line.split()[0] for line in lines[2:5]] == ["whole", "mig", "fluid"]
    assert lines[3].split()[-1] == "0"  # mig: the node counts no 1g it could carve
    assert lines[5] == ""
    assert lines[6].startswith(f"energy: {A100} 60 W idle, 400 W busy (busy: NVIDIA A100")
    assert lines[7].split() == ["policy", "energy", "MWh", "empty", "GPU-h", "empty", "MWh"]
    # The wait by reason: c waits 99 s for room under fifo (0 task-hours, rounded).
    why = lines.index("task-hours of waiting, by why the task waited:")
    head = ["policy", "no", "room", "reserved", "unplanned", "requeue", "hold", "untested"]
    assert lines[why + 1].split() == head
    assert [line.split()[0] for line in lines[why + 2 :]] == ["whole", "mig", "fluid"]


def test_the_command_counts_what_a_static_layout_refuses(trace: Path) -> None:
    args = ["simulate", "--trace", str(trace), "--nodes", "1", "--gpus-per-node", "1"]
    more = ["--compare", "whole,mig-static:2g+2g+2g+1g,shared:4"]
    result = CliRunner().invoke(main, [*args, "--model", A100, *more])
    assert result.exit_code == 0, result.output
    lines = result.output.splitlines()
    assert lines[1].split()[-1] == "refused"
    rows = {line.split()[0]: line.split() for line in lines[2:5]}
    assert list(rows) == ["whole", "mig-static:2g+2g+2g+1g", "shared:4"]
    # a and b need 3 slices, and no instance has 3: only c runs.
    assert (rows["mig-static:2g+2g+2g+1g"][1], rows["mig-static:2g+2g+2g+1g"][-1]) == ("1", "2")
    assert rows["whole"][-1] == "0"
    with_json = CliRunner().invoke(main, [*args, "--model", A100, *more, "--json"])
    assert [r["refused"] for r in json.loads(with_json.output)["results"]] == [0, 2, 0]


def test_the_command_with_backfill(trace: Path) -> None:
    args = ["simulate", "--trace", str(trace), "--nodes", "1", "--gpus-per-node", "1"]
    more = ["--model", A100, "--scheduler", "backfill", "--limit-factor", "1.5", "--json"]
    result = CliRunner().invoke(main, [*args, *more])
    assert result.exit_code == 0, result.output
    data = json.loads(result.output)
    assert (data["scheduler"], data["limit_factor"]) == ("backfill", 1.5)
    assert [r["scheduler"] for r in data["results"]] == ["backfill"] * 3


def test_the_command_in_json(trace: Path) -> None:
    args = ["simulate", "--trace", str(trace), "--nodes", "1", "--gpus-per-node", "1"]
    result = CliRunner().invoke(main, [*args, "--model", A100, "--compare", "mig", "--json"])
    assert result.exit_code == 0, result.output
    data = json.loads(result.output)
    assert data["scheduler"] == "fifo"
    assert data["pool"] == [{"nodes": 1, "gpus": 1, "model": A100}]
    assert (data["limit_factor"], data["requeue_delay_s"]) == (1.0, 120)
    [mig] = data["results"]
    assert mig["policy"] == "mig" and mig["tasks"] == 3 and mig["frag_requeues"] == 0
    for key in ("wait_mean_s", "wait_p95_s", "wait_mean_multi_s", "util"):
        assert isinstance(mig[key], float)


@pytest.mark.parametrize(
    ("more", "message"),
    [
        (["--compare", "whole,best"], "no policy 'best'; expected one of whole, mig, mig-blind"),
        (["--compare", ","], "--compare ',': no policy; expected some of"),
        (["--compare", "mig-static:3g+3g+3g"], "layout 3g.40gb + 3g.40gb + 3g.40gb does not fit"),
        (["--compare", "shared:x"], "'x' is not a whole number"),
        (["--model", "L40S-48GB"], "L40S-48GB has no MIG"),
        (["--gpus-per-node", "0"], "0 is not in the range x>=1"),
        (["--limit-factor", "0.5"], "0.5 is not in the range x>=1"),
        (["--requeue-delay", "-1"], "-1 is not in the range x>=0"),
        (["--scheduler", "sjf"], "'sjf' is not one of 'fifo', 'backfill'"),
    ],
)
def test_the_command_names_what_is_wrong(trace: Path, more: list[str], message: str) -> None:
    args = ["simulate", "--trace", str(trace), "--nodes", "1", "--gpus-per-node", "1"]
    result = CliRunner().invoke(main, [*args, "--model", A100, *more])
    assert result.exit_code != 0
    assert message in result.output


# -- a site's pool ---------------------------------------------------------------------

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"


def test_a_site_policy_gives_every_node_of_its_groups(catalogue: Catalogue) -> None:
    from slurmpool.policy.loader import load_policy
    from slurmpool.simulate.site import site_shapes

    shapes = site_shapes(load_policy(EXAMPLES / "mixed-cluster.yaml"), catalogue)
    # train: 128 nodes of 8 H100 (whole in the policy); serve: 17 of 8 A100.
    assert len(shapes) == 128 + 17
    assert (shapes[0].gpus, shapes[0].model.name) == (8, "H100-SXM5-80GB")
    assert (shapes[-1].gpus, shapes[-1].model.name) == (8, A100)


def test_a_group_of_two_models_is_refused(tmp_path: Path, catalogue: Catalogue) -> None:
    from slurmpool.policy.loader import load_policy
    from slurmpool.simulate.site import site_shapes

    text = (EXAMPLES / "mixed-cluster.yaml").read_text()
    text = text.replace("{model: A100-SXM4-80GB, index: 7", "{model: A30-24GB, index: 7")
    path = tmp_path / "two-models.yaml"
    path.write_text(text)
    with pytest.raises(PoolError, match="node group serve has GPUs of A100-SXM4-80GB and A30"):
        site_shapes(load_policy(path), catalogue)


def test_a_task_on_one_gpu_takes_the_fullest_gpu_it_fits_on_any_node(
    catalogue: Catalogue,
) -> None:
    """Half a GPU is 4 of an A100's 7 slices and 2 of an A30's 4: fluid fills the A30
    (fewer free slices that suffice) before it breaks into the A100."""
    pool = make_pool(
        "fluid", [NodeShape(1, catalogue.get(A100)), NodeShape(1, catalogue.get("A30-24GB"))]
    )
    holds = [pool.try_start(task(n, 0, 1, milli=500)) for n in "abc"]
    assert [(h.node, h.asked) for h in holds if h is not None and h != "requeued"] == [
        (1, 2),
        (1, 2),
        (0, 4),
    ]


def test_the_command_models_a_site_from_its_policy(trace: Path, tmp_path: Path) -> None:
    args = ["simulate", "--trace", str(trace), "--policy", str(EXAMPLES / "sandbox.yaml")]
    result = CliRunner().invoke(main, [*args, "--var", f"root={tmp_path}"])
    assert result.exit_code == 0, result.output
    assert result.output.splitlines()[0] == f"3 GPU tasks on 2 nodes x 3 {A100}, scheduler fifo"


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--nodes", "2"], "the pool: give --gpus-per-node, --model, or --policy POLICY"),
        (["--policy", str(EXAMPLES / "sandbox.yaml"), "--nodes", "2"], "leave out --nodes"),
    ],
)
def test_the_pool_comes_one_way(trace: Path, args: list[str], message: str) -> None:
    result = CliRunner().invoke(main, ["simulate", "--trace", str(trace), *args])
    assert result.exit_code != 0
    assert message in result.output
