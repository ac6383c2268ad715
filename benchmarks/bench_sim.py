"""How long the simulated NVML takes for what the job hooks do.

Run: ``python benchmarks/bench_sim.py``.  Builds an 8 x A100 MIG node with
seven 1g instances per GPU, then times opening a backend, listing every
instance, and one create + destroy cycle (what one prolog + epilog do).
"""

from __future__ import annotations

import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from slurmpool.gpu.select import open_backend
from slurmpool.placement import Placement
from slurmpool.sim.node import create_node


def _time(fn: Callable[[], object], n: int) -> float:
    samples = []
    for _ in range(n):
        t = time.perf_counter()
        fn()
        samples.append(time.perf_counter() - t)
    return statistics.median(samples) * 1000


def main() -> None:
    with tempfile.TemporaryDirectory() as tmp:
        node = create_node(Path(tmp) / "s", Path(tmp) / "d", [("A100-SXM4-80GB", True)] * 8)
        b = open_backend(node.backend_spec)
        for g in range(8):
            for s in range(6):
                b.create_instance(g, "1g.10gb", Placement(s, 1))

        def cycle() -> None:
            m = b.create_instance(3, "1g.10gb", Placement(6, 1))
            b.destroy_instance(3, m.gi_id)

        rows = [
            ("open backend", lambda: open_backend(node.backend_spec)),
            ("gpus() on 8 GPUs", b.gpus),
            ("instances() of 48 instances", lambda: [b.instances(g) for g in range(8)]),
            ("create + destroy one 1g", cycle),
        ]
        for label, fn in rows:
            print(f"{label:<30} {_time(fn, 20):7.2f} ms")


if __name__ == "__main__":
    main()
