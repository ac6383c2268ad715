"""Benchmark: `slurmpool simulate` on the default openb trace under six policies.

The default openb pod list (8,152 rows, 7,064 GPU tasks) on 6 nodes of 8 A100s,
scheduler fifo, 120 s requeue delay, policies whole, mig, mig-blind, fluid, shared:4 and
mig-static:7g/7g/7g/7g/7g/7g/4g+3g: budget 10 s in all, on one core (the replay
is one thread).

Baseline, measured in the same run: reading the trace (``read_trace``), the part
no replay can skip.  Prints each policy's time, the total and its ratio to the
baseline.

Run: ``python benchmarks/bench_simulate.py [--trace FILE]``.  Fails (exit 1) over
the budget.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

from slurmpool.catalogue import default_catalogue
from slurmpool.simulate.pools import make_pool, uniform
from slurmpool.simulate.replay import replay
from slurmpool.simulate.trace import read_trace

BUDGET_S = 10.0
POLICIES = ("whole", "mig", "mig-blind", "fluid", "shared:4", "mig-static:7g/7g/7g/7g/7g/7g/4g+3g")
DEFAULT_TRACE = (
    Path(__file__).resolve().parent.parent.parent / "shared/data/traces/openb_pod_list_default.csv"
)


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--trace", type=Path, default=DEFAULT_TRACE)
    args = parser.parse_args()
    if not args.trace.exists():
        print(f"error: no trace at {args.trace}; give one with --trace", file=sys.stderr)
        return 1
    start = time.perf_counter()
    tasks = read_trace(args.trace)
    baseline = time.perf_counter() - start
    shapes = uniform(6, 8, default_catalogue().get("A100-SXM4-80GB"))
    total = 0.0
    for policy in POLICIES:
        start = time.perf_counter()
        result = replay(tasks, make_pool(policy, shapes), "fifo")
        took = time.perf_counter() - start
        total += took
        print(
            f"{policy:38s} {took:6.2f} s  ({result.tasks} tasks, "
            f"{result.frag_requeues} requeues, mean wait {result.wait_mean_s / 3600:.2f} h)"
        )
    print(
        f"six policies: {total:.2f} s (budget {BUDGET_S:.0f} s) = {total / baseline:.0f} x "
        f"reading the trace ({baseline * 1000:.0f} ms)"
    )
    return 0 if total <= BUDGET_S else 1


if __name__ == "__main__":
    raise SystemExit(main())
