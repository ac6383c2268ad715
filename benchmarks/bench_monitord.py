"""Benchmark: monitord's own CPU cost sampling 8 GPUs x 7 MIG instances at 1 Hz.

On a simulated node of 8 H100s (GPM, so SM utilisation is sampled too) with
seven 1g instances each, every instance busy with a process and allocated
to a job in the node store.

The simulator answers an NVML call far more slowly than a driver (it keeps
a JSON state file and checks every registered PID in /proc on each read),
so its own cost would drown monitord's.  The simulator's answers to one
pass are therefore recorded and replayed by :class:`Replay` (every call
returns what the simulator returned), and in one run this measures:

- baseline: a bare read loop over the same backend calls monitord makes
  (memory, power, energy, processes, instances, GPM samples and metrics);
- monitord: :meth:`Monitor.pass_once` over the same replayed backend
  (attribution from the node store, samples and running totals written to
  SQLite, the metrics snapshot) plus one Prometheus scrape every 15 passes;
- for reference, both on the live simulator, and a real 1 Hz run of the
  daemon loop over the replayed backend as process CPU.

monitord's own cost is its CPU per pass minus the baseline's, as a
percentage of one core at one pass per second; the limit is 1%.

Run: ``python benchmarks/bench_monitord.py [--passes N] [--seconds S]``.
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

from prometheus_client import generate_latest

from slurmpool.gpu.nvml import NvmlBackend
from slurmpool.gpu.select import open_backend
from slurmpool.monitor.daemon import Monitor, MonitorSettings
from slurmpool.monitor.exporter import make_registry
from slurmpool.monitor.sampler import Sampler
from slurmpool.placement import Placement
from slurmpool.sim.node import create_node
from slurmpool.sim.processes import attach_process
from slurmpool.state.samples import SAMPLES
from slurmpool.state.store import NewAllocation, NodeStore

GPUS, PER_GPU = 8, 7
LIMIT_PERCENT = 1.0
SCRAPE_EVERY = 15


def build(tmp: Path) -> tuple[NvmlBackend, Path, list[subprocess.Popen[bytes]]]:
    node = create_node(tmp / "sim", tmp / "dev", gpus=[("H100-SXM5-80GB", True)] * GPUS)
    backend = open_backend(node.backend_spec)
    holders = [subprocess.Popen(["sleep", "3600"]) for _ in range(PER_GPU)]
    db = tmp / "bench.sqlite"
    with NodeStore(db, (SAMPLES,)) as store:
        job = 1000
        for g in range(GPUS):
            for slot in range(PER_GPU):
                inst = backend.create_instance(g, "1g", Placement(slot, 1))
                attach_process(
                    node.state_dir,
                    g,
                    inst.gi_id,
                    inst.ci_id,
                    pid=holders[slot].pid,
                    used_mib=2000,
                    util=20 + 10 * slot,
                )
                with store.transaction():
                    aid = store.add_intent(
                        NewAllocation(
                            str(job),
                            f"user{slot}",
                            2000 + slot,
                            "mig",
                            g,
                            f"GPU-{g}",
                            profile="1g.10gb",
                        )
                    )
                    store.mark_active(aid, gi_id=inst.gi_id, ci_id=inst.ci_id)
                job += 1
    return backend, db, holders


class Replay:
    """A backend that answers every call with what ``real`` answered the first time."""

    def __init__(self, real: NvmlBackend) -> None:
        self.real = real
        self.name = f"replay:{real.name}"
        self._seen: dict[tuple[str, tuple[object, ...]], object] = {}

    def __getattr__(self, method: str) -> object:
        fn = getattr(self.real, method)

        def call(*args: object) -> object:
            if method == "free_sm_sample":
                return None  # recorded samples are reused
            key = (method, args)
            if method == "sm_utilization":
                first = args[0]
                key = (method, (first.gpu_index, first.gi_id))  # type: ignore[attr-defined]
                if key not in self._seen:
                    self._seen[key] = self._fresh_util(first.gpu_index, first.gi_id)  # type: ignore[attr-defined]
            if key not in self._seen:
                self._seen[key] = fn(*args)
            return self._seen[key]

        return call

    def _fresh_util(self, gpu: int, gi: int | None) -> float | None:
        a = self.real.sm_sample(gpu, gi)
        time.sleep(0.11)
        b = self.real.sm_sample(gpu, gi)
        assert a is not None and b is not None
        try:
            return self.real.sm_utilization(a, b)
        finally:
            self.real.free_sm_sample(a)
            self.real.free_sm_sample(b)


def bare_pass(b: NvmlBackend, prev: dict[tuple[int, int], object]) -> None:
    for g in range(GPUS):
        b.memory(g)
        b.power_mw(g)
        b.energy_mj(g)
        b.processes(g)
        for inst in b.instances(g):
            s = b.sm_sample(g, inst.gi_id)
            old = prev.get((g, inst.gi_id))
            if old is not None and s is not None:
                b.sm_utilization(old, s)  # type: ignore[arg-type]
                b.free_sm_sample(old)  # type: ignore[arg-type]
            prev[(g, inst.gi_id)] = s


def cpu_per_pass(fn: object, passes: int) -> list[float]:
    assert callable(fn)
    out = []
    for _ in range(passes):
        t = time.process_time()
        fn()
        out.append(time.process_time() - t)
        time.sleep(0.11)  # GPM needs samples 100 ms apart; not counted
    return out


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--passes", type=int, default=20)
    ap.add_argument("--seconds", type=float, default=10.0)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as d:
        backend, db, holders = build(Path(d))
        try:
            live_prev: dict[tuple[int, int], object] = {}
            bare_pass(backend, live_prev)
            live_base = cpu_per_pass(lambda: bare_pass(backend, live_prev), 3)
            live_sampler = Sampler(backend, "bench")
            live_mon = Monitor(
                node="bench",
                store_path=db,
                sampler=live_sampler,
                settings=MonitorSettings(port=None, push=False),
            )
            live_sampler.prime()
            time.sleep(0.11)
            live_full = cpu_per_pass(live_mon.pass_once, 3)
            live_mon.close()

            replay = Replay(backend)
            prev: dict[tuple[int, int], object] = {}
            bare_pass(replay, prev)  # type: ignore[arg-type]
            time.sleep(0.11)
            bare_pass(replay, prev)  # type: ignore[arg-type]
            base = cpu_per_pass(lambda: bare_pass(replay, prev), args.passes)  # type: ignore[arg-type]

            sampler = Sampler(replay, "bench")  # type: ignore[arg-type]
            mon = Monitor(
                node="bench",
                store_path=db,
                sampler=sampler,
                settings=MonitorSettings(interval_s=1.0, port=None, push=False),
            )
            registry = make_registry(mon.collector)
            sampler.prime()
            time.sleep(0.11)
            snap = mon.pass_once()
            assert len([s for s in snap.samples if s.job_id]) == GPUS * PER_GPU, snap.errors
            assert all(s.util is not None for s in snap.samples if s.kind == "mig")
            count = [0]

            def monitored() -> None:
                mon.pass_once()
                count[0] += 1
                if count[0] % SCRAPE_EVERY == 0:
                    generate_latest(registry)

            full = cpu_per_pass(monitored, args.passes)
            t = time.process_time()
            for _ in range(SCRAPE_EVERY):
                generate_latest(registry)
            scrape = (time.process_time() - t) / SCRAPE_EVERY

            stop = threading.Event()
            timer = threading.Timer(args.seconds, stop.set)
            c0, w0 = time.process_time(), time.monotonic()
            timer.start()
            mon.run(stop)  # one pass per second until the timer stops it
            loop_cpu = (time.process_time() - c0) / (time.monotonic() - w0) * 100
        finally:
            for h in holders:
                h.kill()
                h.wait()
            backend.close()
    b_ms, f_ms = statistics.median(base) * 1e3, statistics.median(full) * 1e3
    own = (f_ms - b_ms) / 10.0  # ms per 1 s period -> percent of one core
    print(f"node: {GPUS} x H100 MIG, {PER_GPU} instances each, every instance in a job")
    print(
        f"live simulator, for reference: bare reads {statistics.median(live_base) * 1e3:.0f} ms,"
        f" monitord pass {statistics.median(live_full) * 1e3:.0f} ms CPU per pass"
    )
    print(f"bare backend reads:   {b_ms:7.2f} ms CPU per pass (median of {args.passes})")
    print(
        f"monitord pass:        {f_ms:7.2f} ms CPU per pass (incl. a scrape every "
        f"{SCRAPE_EVERY}; one scrape {scrape * 1e3:.2f} ms)"
    )
    print(
        f"monitord's own cost:  {f_ms - b_ms:7.2f} ms per pass = {own:.2f}% of one core "
        f"at 1 Hz (limit {LIMIT_PERCENT:g}%)"
    )
    print(
        f"daemon loop at 1 Hz:  {loop_cpu:.2f}% of one core over {args.seconds:g} s "
        f"(replayed reads included)"
    )
    ok = own <= LIMIT_PERCENT
    print("PASS" if ok else "FAIL")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
