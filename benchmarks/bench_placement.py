"""Placement engine throughput and quality.

Replays a churn workload (arrivals and departures of MIG requests, sized by
the slice mix of the Alibaba GPU-sharing trace in ../shared/data/traces) on
8-GPU A100 nodes, through the same ``choose_gpu`` the prolog uses.

Prints decisions per second (target: >= 50,000 on one core) and, measured in
the same run, the ratio against a first-fit baseline, plus how many requests
each policy turned away although a repacked GPU could have taken them.
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable

from slurmpool.catalogue import default_catalogue
from slurmpool.placement import GpuOccupancy, PlacedInstance, Placement, choose_gpu, engine_for

TARGET = 50_000
# Slice mix of fractional GPU tasks in openb_pod_list_default.csv (see traces/README.md),
# 5g/6g folded into 7g as the vgpu mapping does.
MIX = {"1g.10gb": 32, "2g.20gb": 280, "3g.40gb": 389, "4g.40gb": 971, "7g.80gb": 328 + 1078}


def first_fit_gpu(gpus: list[GpuOccupancy], profile: str) -> tuple[int, Placement] | None:
    for g in gpus:
        pl = engine_for(g.model).first_fit(profile, g.instances)
        if pl is not None:
            return g.index, pl
    return None


def engine_gpu(gpus: list[GpuOccupancy], profile: str) -> tuple[int, Placement] | None:
    c = choose_gpu(gpus, profile)
    return None if c is None else (c.gpu_index, c.placement)


def replay(
    decide: Callable[[list[GpuOccupancy], str], tuple[int, Placement] | None],
    events: int,
    seed: int = 7,
) -> tuple[float, int, int]:
    model = default_catalogue().get("A100-SXM4-80GB")
    eng = engine_for(model)
    rnd = random.Random(seed)
    names, weights = list(MIX), list(MIX.values())
    gpus = [GpuOccupancy(i, model) for i in range(8)]
    decisions = avoidable = 0
    elapsed = 0.0
    for _ in range(events):
        live = [(g.index, inst) for g in gpus for inst in g.instances]
        if live and rnd.random() < 0.45:
            gi, inst = live[rnd.randrange(len(live))]
            g = gpus[gi]
            rest = tuple(i for i in g.instances if i is not inst)
            gpus[gi] = GpuOccupancy(gi, model, rest)
            continue
        profile = rnd.choices(names, weights)[0]
        t0 = time.perf_counter()
        choice = decide(gpus, profile)
        elapsed += time.perf_counter() - t0
        decisions += 1
        if choice is None:
            if any(eng.plan([i.profile for i in g.instances] + [profile]) for g in gpus):
                avoidable += 1
            continue
        gi, pl = choice
        g = gpus[gi]
        gpus[gi] = GpuOccupancy(gi, model, (*g.instances, PlacedInstance(profile, pl)))
    return decisions / elapsed, decisions, avoidable


def main() -> None:
    events = 200_000
    replay(engine_gpu, 2_000)  # warm the memo tables, as a long-lived process would
    base_rate, base_n, base_avoid = replay(first_fit_gpu, events)
    rate, n, avoid = replay(engine_gpu, events)
    print(f"placement: {n} node decisions (8 x A100-SXM4-80GB), {rate:,.0f} decisions/s")
    print(
        f"first-fit baseline (same run): {base_rate:,.0f} decisions/s; ratio {rate / base_rate:.2f}"
    )
    print(
        f"requests turned away that a repacked GPU could take: engine {avoid}/{n}, "
        f"first-fit {base_avoid}/{base_n}"
    )
    status = "OK" if rate >= TARGET else "BELOW TARGET"
    print(f"target >= {TARGET:,} decisions/s: {status}")


if __name__ == "__main__":
    main()
