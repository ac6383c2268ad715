"""Benchmark: `slurmpool simulate`'s replay over 1,000,000 synthetic tasks, streamed.

The tasks are drawn from the default openb trace's mix: each takes the request
(GPUs, thousandths) and the duration of a random row of it, and they arrive as a
Poisson stream at an offered load of half the pool's compute slices (6 nodes of 8
A100, scheduler fifo), where every policy keeps up (their queues stay bounded; at
70 % the trace's weeks-long tasks make every policy's waits run to a day).

Each policy replays the 1,000,000 tasks in a child process (its time and peak RSS)
and 250,000 in another (its peak RSS).  Budgets, per policy: replaying the tasks
takes at most 100 x making them (the baseline, measured in the same run: making
the 1,000,000 tasks without replaying them; the budget was 120 s on one core
where making them took about 1.05 s, so about 114 x), and a peak RSS at
1,000,000 at most 1.2 x the one at 250,000 (memory that does not grow with the
tasks replayed; the queue's own length still varies).

Run: ``python benchmarks/bench_simulate_million.py [--tasks N] [--policies P,...]``.
Fails (exit 1) over a budget.
"""

from __future__ import annotations

import argparse
import json
import random
import resource
import subprocess
import sys
import time
from collections.abc import Iterator, Sequence
from pathlib import Path

from slurmpool.catalogue import default_catalogue
from slurmpool.simulate.pools import NodeShape, make_pool, uniform
from slurmpool.simulate.replay import replay
from slurmpool.simulate.trace import Task, read_trace

TASKS = 1_000_000
BUDGET_X = 100.0  # replaying the tasks over making them
RSS_GROWTH = 1.2  # peak RSS at all the tasks over that at a quarter of them
LOAD = 0.5  # offered compute slices over the pool's
SEED = 31
POLICIES = "whole,mig,mig-blind,fluid,shared:4,mig-static:7g/7g/7g/7g/7g/7g/4g+3g"
DEFAULT_TRACE = (
    Path(__file__).resolve().parent.parent.parent / "shared/data/traces/openb_pod_list_default.csv"
)


def pool_shapes() -> list[NodeShape]:
    return uniform(6, 8, default_catalogue().get("A100-SXM4-80GB"))


def synthetic(mix: Sequence[Task], n: int, shapes: Sequence[NodeShape]) -> Iterator[Task]:
    """``n`` tasks with the requests and durations of ``mix``'s rows, arriving at
    :data:`LOAD` of the pool's compute slices, made as they are read."""
    per_gpu = shapes[0].slices
    slices = sum(s.gpus * s.slices for s in shapes)
    asked = sum(t.duration * (t.slices(per_gpu) if t.fraction else t.gpus * per_gpu) for t in mix)
    gap = asked / len(mix) / (LOAD * slices)  # mean seconds between arrivals
    rng = random.Random(SEED)
    clock = 0.0
    for i in range(n):
        clock += rng.expovariate(1 / gap)
        row = mix[rng.randrange(len(mix))]
        yield Task(f"s{i}", int(clock), row.duration, row.gpus, row.milli)


def child(trace: Path, policy: str, n: int) -> None:
    """Replay ``n`` synthetic tasks under ``policy``; print what it took as JSON."""
    shapes = pool_shapes()
    mix = read_trace(trace)
    start = time.perf_counter()
    result = replay(synthetic(mix, n, shapes), make_pool(policy, shapes))
    took = time.perf_counter() - start
    peak_kib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    print(
        json.dumps(
            {
                "seconds": took,
                "rss_mib": peak_kib / 1024,
                "tasks": result.tasks,
                "refused": result.refused,
                "requeues": result.frag_requeues,
                "wait_mean_h": result.wait_mean_s / 3600,
                "util": result.util,
            }
        )
    )


def run_child(trace: Path, policy: str, n: int) -> dict[str, float]:
    out = subprocess.run(
        [sys.executable, __file__, "--trace", str(trace), "--child", policy, "--tasks", str(n)],
        check=True,
        capture_output=True,
        text=True,
    )
    figures: dict[str, float] = json.loads(out.stdout)
    return figures


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--trace", type=Path, default=DEFAULT_TRACE)
    parser.add_argument("--tasks", type=int, default=TASKS)
    parser.add_argument("--policies", default=POLICIES)
    parser.add_argument("--child", metavar="POLICY", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if not args.trace.exists():
        print(f"error: no trace at {args.trace}; give one with --trace", file=sys.stderr)
        return 1
    if args.child:
        child(args.trace, args.child, args.tasks)
        return 0
    shapes = pool_shapes()
    mix = read_trace(args.trace)
    start = time.perf_counter()
    for _ in synthetic(mix, args.tasks, shapes):
        pass
    baseline = time.perf_counter() - start
    print(
        f"{args.tasks:,} tasks from the mix of {args.trace.name}, offered load {LOAD:.0%}, "
        f"6 x 8 A100, fifo; making them alone: {baseline:.2f} s"
    )
    ok = True
    for policy in args.policies.split(","):
        full = run_child(args.trace, policy, args.tasks)
        quarter = run_child(args.trace, policy, args.tasks // 4)
        growth = full["rss_mib"] / quarter["rss_mib"]
        fits = full["seconds"] <= BUDGET_X * baseline and growth <= RSS_GROWTH
        ok = ok and fits
        print(
            f"{policy:36s} {full['seconds']:6.1f} s = {full['seconds'] / baseline:4.1f} x making "
            f"them; peak RSS {quarter['rss_mib']:.0f} MiB at {args.tasks // 4:,}, "
            f"{full['rss_mib']:.0f} MiB at {args.tasks:,} (x {growth:.2f}); "
            f"{full['tasks']:.0f} run, {full['refused']:.0f} refused, "
            f"{full['requeues']:.0f} requeues, mean wait {full['wait_mean_h']:.2f} h, "
            f"util {full['util']:.1%}{'' if fits else '  OVER BUDGET'}"
        )
    verdict = "met" if ok else "MISSED"
    print(f"budget: {BUDGET_X:.0f} x making them and RSS x {RSS_GROWTH} per policy: {verdict}")
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
