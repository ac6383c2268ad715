"""Invariants of the replay on random traces and pools (seeded, so a failure replays):
every task runs once for its duration, no GPU ever holds more than it has, a task that
arrives at an idle pool starts at once, and every MIG instance sits where the
catalogue allows.  ``mig-static`` draws one of its model's layouts per seed."""

from __future__ import annotations

import random
from collections import defaultdict
from collections.abc import Sequence
from typing import Literal

import pytest

from slurmpool.catalogue import Catalogue
from slurmpool.simulate.energy import power_for
from slurmpool.simulate.pools import REQUEUED, Hold, MigBlindPool, NodeShape, make_pool
from slurmpool.simulate.replay import (
    RESERVED,
    SCHEDULERS,
    UNPLANNED,
    WAIT_REASONS,
    Replay,
    Run,
    replay,
)
from slurmpool.simulate.trace import Task

SEEDS = range(40)
POLICIES = ("whole", "mig", "mig-blind", "fluid", "shared:3", "mig-static")
EVERY_CASE = pytest.mark.parametrize(
    ("seed", "policy", "scheduler"),
    [(s, p, k) for s in SEEDS for p in POLICIES for k in SCHEDULERS],
)
MODELS = ("A100-SXM4-80GB", "A30-24GB", "H100-SXM5-80GB")
# Layouts per number of compute slices (a layout is one model's, so a mig-static case
# has nodes of one model); some leave whole-GPU tasks nowhere to run (refused).
LAYOUTS = {
    7: ("7g/3g+2g+1g+1g", "4g+3g", "7g/7g/1g+1g+1g+1g+1g+1g+1g", "3g+3g/7g", "2g+2g+3g"),
    4: ("4g/2g+1g+1g", "2g+2g", "4g/4g/1g+1g+1g+1g", "1g+1g+2g/4g"),
}


def random_case(
    seed: int, catalogue: Catalogue, one_model: bool = False
) -> tuple[list[Task], list[NodeShape]]:
    rng = random.Random(seed)
    models = [rng.choice(MODELS)] if one_model else MODELS
    shapes = [
        NodeShape(rng.randint(2, 4), catalogue.get(rng.choice(models)))
        for _ in range(rng.randint(1, 3))
    ]
    most = max(s.gpus for s in shapes)
    tasks = []
    for n in range(rng.randint(20, 80)):
        kind = rng.random()
        if kind < 0.6:
            gpus, milli = 1, rng.randint(1, 999)
        elif kind < 0.85:
            gpus, milli = 1, 1000
        else:
            gpus, milli = rng.randint(2, most), 1000
        # Few distinct seconds, so that arrivals and completions coincide often.
        tasks.append(
            Task(f"t{n}", rng.randrange(0, 400, 10), rng.randrange(10, 200, 10), gpus, milli)
        )
    tasks.sort(key=lambda t: t.arrival)
    return tasks, shapes


def drawn(seed: int, policy: str, catalogue: Catalogue) -> tuple[list[Task], list[NodeShape], str]:
    """A random case for ``policy``: its tasks, its nodes and the policy's spec (with a
    layout drawn for ``mig-static``)."""
    static = policy == "mig-static"
    tasks, shapes = random_case(seed, catalogue, one_model=static)
    if static:
        most = max(s.gpus for s in shapes)
        fit = [lay for lay in LAYOUTS[shapes[0].slices] if lay.count("/") < most]
        policy += ":" + random.Random(seed).choice(fit)
    return tasks, shapes, policy


def played(
    seed: int, policy: str, catalogue: Catalogue, scheduler: str = "fifo"
) -> tuple[list[Task], list[NodeShape], Replay]:
    tasks, shapes, spec = drawn(seed, policy, catalogue)
    pool = make_pool(spec, shapes)
    tasks = [t for t in tasks if pool.runs(t)]
    run = Replay(pool, scheduler, keep_runs=True)
    run.play(tasks)
    return tasks, shapes, run


def holding(runs: list[Run], t: int) -> list[Run]:
    """The runs holding GPUs just after second ``t`` (one ending at ``t`` gave them back)."""
    return [r for r in runs if r.start <= t and (r.end is None or t < r.end)]


def instants(runs: list[Run]) -> list[tuple[int, list[Run]]]:
    """Each second at which something starts, with the runs holding GPUs just after it."""
    return [(t, holding(runs, t)) for t in sorted({r.start for r in runs})]


@EVERY_CASE
def test_every_task_runs_once_for_its_duration(
    seed: int, policy: str, scheduler: str, catalogue: Catalogue
) -> None:
    tasks, _, run = played(seed, policy, catalogue, scheduler)
    assert sorted(r.task.name for r in run.runs) == sorted(t.name for t in tasks)
    for r in run.runs:
        assert r.start >= r.task.arrival
        assert r.end is not None and r.end - r.start == r.task.duration


@EVERY_CASE
def test_no_gpu_ever_holds_more_than_it_has(
    seed: int, policy: str, scheduler: str, catalogue: Catalogue
) -> None:
    _, shapes, run = played(seed, policy, catalogue, scheduler)
    for t, active in instants(run.runs):
        used: dict[tuple[int, int], float] = defaultdict(float)
        for r in active:
            for g in r.hold.gpus:
                assert g < shapes[r.hold.node].gpus
                if not r.hold.instances:  # whole, fluid, shared: compute slices
                    used[r.hold.node, g] += r.hold.slices / len(r.hold.gpus)
            for g, inst in r.hold.instances:
                used[r.hold.node, g] += inst.placement.size  # memory slices, checked below
        for (node, g), n in used.items():
            shape = shapes[node]
            assert shape.model.mig is not None
            limit = shape.model.mig.memory_slices if policy.startswith("mig") else shape.slices
            assert n <= limit + 1e-9, (t, node, g, n)
        if policy.startswith("shared"):
            shares: dict[tuple[int, int], int] = defaultdict(int)
            for r in active:
                for g in r.hold.gpus:
                    shares[r.hold.node, g] += r.hold.units
            assert max(shares.values(), default=0) <= 3, t
        if policy in ("whole", "mig-static"):  # a GPU, or an instance, is one task's
            held = [(r.hold.node, g) for r in active for g in r.hold.slots or r.hold.gpus]
            assert len(held) == len(set(held)), t


@pytest.mark.parametrize("scheduler", SCHEDULERS)
@pytest.mark.parametrize("policy", ["mig", "mig-blind", "mig-static"])
@pytest.mark.parametrize("seed", SEEDS)
def test_mig_instances_sit_where_the_catalogue_allows_and_never_overlap(
    seed: int, policy: str, scheduler: str, catalogue: Catalogue
) -> None:
    _, shapes, run = played(seed, policy, catalogue, scheduler)
    for t, active in instants(run.runs):
        masks: dict[tuple[int, int], int] = defaultdict(int)
        units: dict[int, int] = defaultdict(int)
        for r in active:
            model = shapes[r.hold.node].model
            units[r.hold.node] += r.hold.units
            for g, inst in r.hold.instances:
                profile = model.gi_profile(inst.profile)
                pl = inst.placement
                assert (pl.start, pl.size) in profile.placements, (t, inst)
                key = (r.hold.node, g)
                assert not masks[key] & pl.mask, (t, key, inst)
                masks[key] |= pl.mask
        for node, n in units.items():
            assert n <= shapes[node].gpus * shapes[node].slices  # Slurm's count


@EVERY_CASE
def test_a_task_arriving_at_an_idle_pool_starts_at_once(
    seed: int, policy: str, scheduler: str, catalogue: Catalogue
) -> None:
    _, _, run = played(seed, policy, catalogue, scheduler)
    for r in run.runs:
        if all(o is r for o in holding(run.runs, r.task.arrival)):  # nothing else running
            assert r.start == r.task.arrival, r.task


# Not mig-blind: Slurm counts units, so it keeps starting tasks on the first node whose
# count fits even when its slices are fragmented and every other node is empty (README).
@pytest.mark.parametrize("scheduler", SCHEDULERS)
@pytest.mark.parametrize("policy", ["whole", "mig", "fluid", "shared:3"])
@pytest.mark.parametrize("seed", range(10))
def test_on_a_pool_big_enough_nobody_waits(
    seed: int, policy: str, scheduler: str, catalogue: Catalogue
) -> None:
    tasks, shapes = random_case(seed, catalogue)
    big = shapes * len(tasks)  # a node of its own for every task
    run = Replay(make_pool(policy, big), scheduler, keep_runs=True)
    run.play(tasks)
    assert all(r.start == r.task.arrival for r in run.runs)
    assert run.requeues == 0


@pytest.mark.parametrize("scheduler", SCHEDULERS)
@pytest.mark.parametrize("seed", SEEDS)
def test_mig_starts_a_task_only_where_its_instances_can_be_carved(
    seed: int, scheduler: str, catalogue: Catalogue
) -> None:
    """What each node publishes is what it can carve, and a pass starts one task on a
    node before it publishes again: no task is ever requeued, while ``mig-blind``,
    counting units alone, requeues on some of these traces."""
    _, _, run = played(seed, "mig", catalogue, scheduler)
    assert run.requeues == 0


def test_the_blind_pool_requeues_on_the_same_traces(catalogue: Catalogue) -> None:
    """The traces above do fragment: counting units alone, Slurm sends tasks that the
    prolog cannot carve."""
    requeues = [played(seed, "mig-blind", catalogue)[2].requeues for seed in SEEDS]
    assert sum(1 for n in requeues if n) >= len(requeues) // 4, requeues


@EVERY_CASE
def test_the_wait_by_reason_adds_up_to_every_tasks_wait(
    seed: int, policy: str, scheduler: str, catalogue: Catalogue
) -> None:
    tasks, shapes, spec = drawn(seed, policy, catalogue)
    result = replay(tasks, make_pool(spec, shapes), scheduler)
    assert set(result.wait_by_reason_s) == set(WAIT_REASONS)
    assert all(s >= 0 for s in result.wait_by_reason_s.values())
    assert sum(result.wait_by_reason_s.values()) == round(result.wait_mean_s * result.tasks)
    if scheduler == "fifo":  # nothing is planned
        assert not result.wait_by_reason_s[RESERVED] and not result.wait_by_reason_s[UNPLANNED]


@EVERY_CASE
def test_energy_lies_between_an_idle_and_a_busy_pool(
    seed: int, policy: str, scheduler: str, catalogue: Catalogue
) -> None:
    """Whatever runs, the pool draws at least every GPU idle and at most every GPU busy
    for the window, and no more GPU-hours stand empty than the pool has."""
    tasks, shapes, run = played(seed, policy, catalogue, scheduler)
    pool = make_pool(run.pool.name, shapes)
    result = replay(tasks, pool, scheduler)
    hours = result.makespan_s / 3600
    watts = {model: w for model, w in power_for(shapes).items() if w is not None}
    idle = sum(s.gpus * watts[s.model.name].idle for s in shapes) * hours / 1000
    busy = sum(s.gpus * watts[s.model.name].busy for s in shapes) * hours / 1000
    assert result.energy_kwh is not None and result.empty_gpu_h is not None
    assert idle - 1e-9 <= result.energy_kwh <= busy + 1e-9
    assert 0 <= result.empty_gpu_h <= sum(s.gpus for s in shapes) * hours


class LoggedMigPool(MigBlindPool):
    """``mig-blind`` that notes each requeue: (task, node, tasks ended on the node so far)."""

    def __init__(self, shapes: list[NodeShape]) -> None:
        super().__init__(shapes)
        self.ended = [0] * len(shapes)
        self.requeued: list[tuple[str, int, int]] = []

    def try_start(
        self, task: Task, room: Sequence[int] | None = None
    ) -> Hold | Literal["requeued", "kept off"] | None:
        before = set(self.kept_off.get(id(task), ()))
        got = super().try_start(task, room)
        if got == REQUEUED:
            [node] = self.kept_off[id(task)] - before
            self.requeued.append((task.name, node, self.ended[node]))
        return got

    def release(self, hold: Hold) -> None:
        super().release(hold)
        self.ended[hold.node] += 1


@pytest.mark.parametrize("delay", [0, 30, 120])
@pytest.mark.parametrize("scheduler", SCHEDULERS)
@pytest.mark.parametrize("seed", SEEDS)
def test_a_node_requeues_a_task_once_until_a_task_on_it_ends(
    seed: int, scheduler: str, delay: int, catalogue: Catalogue
) -> None:
    """Kept off the node that requeued it (the prolog's ExcNodeList) until the node's
    epilog: never requeued there twice with nothing ended there in between.  The traces
    are crowded with fractions on a grid of 30 s, so that requeues, arrivals, completions
    and tries meet in the same seconds."""
    rng = random.Random(seed)
    shapes = [NodeShape(rng.randint(1, 2), catalogue.get("A100-SXM4-80GB"))] * rng.randint(1, 3)
    tasks = sorted(
        (
            Task(f"t{n}", 30 * rng.randrange(40), 30 * rng.randint(1, 20), 1, rng.randint(1, 999))
            for n in range(rng.randint(40, 160))
        ),
        key=lambda t: t.arrival,
    )
    pool = LoggedMigPool(shapes)
    run = Replay(pool, scheduler, requeue_delay=delay, keep_runs=True)
    run.play(tasks)
    assert len(run.runs) == len(tasks)
    assert len(pool.requeued) == run.requeues
    assert len(set(pool.requeued)) == len(pool.requeued)
    assert not pool.kept_off and not any(pool.keeping_off)  # all started: nothing kept
