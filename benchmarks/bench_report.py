"""Benchmark: `slurmpool report` on 1,000,000 generated sacct --parsable2 records.

Writes the records to a temporary file, then in this one run measures:

- a plain ``csv.reader`` pass over the file (the baseline);
- the report over the same file (parse, decode every AdminComment, aggregate, render);
- the peak RSS of ``slurmpool report --input FILE --json`` in a child process
  on 25% and 100% of the records: memory must not grow with the record count
  (what the report keeps is per user/account/partition/model/profile and per
  device and hour of the heatmap, which 25% of the records already cover).

Records: 75% pooled GPU jobs with a slurmpool summary (MIG on A100 without
utilisation, MIG on H100 with GPM utilisation, whole GPUs), 15% GPU jobs
without one (AllocTRES only), 10% CPU jobs; 2% requeued runs.  Summaries are
drawn from a pool of 5,000 distinct encoded ones (encoding a million takes
longer than the benchmark); the report decodes every record's anyway.

Run: ``python benchmarks/bench_report.py [--records N]``.  Fails (exit 1)
when the ratio is above 3 or the RSS grows by more than 10%.
"""

from __future__ import annotations

import argparse
import csv
import os
import random
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from slurmpool.accounting.codec import encode
from slurmpool.accounting.summary import index_of, job_document, pack_series
from slurmpool.report.aggregate import Aggregator
from slurmpool.report.render import to_json, to_table

MAX_RATIO = 3.0
USERS = [f"user{i:03d}" for i in range(300)]
ACCOUNTS = [f"acct{i:02d}" for i in range(40)]
NODES = [f"gpu{i:03d}" for i in range(64)]
START = 1_780_000_000.0  # a fixed epoch: reproducible records


def _summary(rng: random.Random, job: int, node: str) -> str:
    kind = rng.random()
    dur = rng.randint(60, 8 * 3600)
    points = min(48, max(1, dur // 10))
    if kind < 0.5:
        slices = rng.choice([1, 2, 3, 4, 7])
        dev = {
            "gpu": rng.randint(0, 7),
            "gi": rng.randint(1, 14),
            "kind": "mig",
            "model": "A100-SXM4-80GB",
            "profile": f"{slices}g.{10 * slices}gb",
            "slices": slices,
            "of": 7,
            "util_mean": None,
            "util_max": None,
            "util_source": None,
            "energy_j": None,
        }
        util = [None] * points
    elif kind < 0.8:
        slices = rng.choice([1, 2, 3, 4, 7])
        u = rng.uniform(5, 95)
        dev = {
            "gpu": rng.randint(0, 7),
            "gi": rng.randint(1, 14),
            "kind": "mig",
            "model": "H100-SXM5-80GB",
            "profile": f"{slices}g.{10 * slices}gb",
            "slices": slices,
            "of": 7,
            "util_mean": round(u, 1),
            "util_max": min(100, u + 9),
            "util_source": "gpm",
            "energy_j": None,
        }
        util = [int(u)] * points
    else:
        u = rng.uniform(0, 100)
        dev = {
            "gpu": rng.randint(0, 7),
            "gi": None,
            "kind": "gpu",
            "model": "H100-SXM5-80GB",
            "profile": None,
            "slices": None,
            "of": None,
            "util_mean": round(u, 1),
            "util_max": min(100, u + 5),
            "util_source": "nvml",
            "energy_j": float(rng.randint(10**4, 10**7)),
        }
        util = [int(u)] * points
    dev.update(
        {
            "mem_max_mib": rng.randint(500, 80000),
            "mem_total_mib": 81920,
            "samples": dur // 10,
            "duration_s": float(dur),
            "timeline": {
                "step_s": dur / points,
                "util": pack_series(util),
                "mem_pct": pack_series([rng.randint(0, 100)] * points),
            },
        }
    )
    part = {
        "user": "x",
        "run": 0,
        "start": START,
        "end": START + dur,
        "request": {"vgpu": dev.get("slices"), "gpu": None},
        "carved": [{"gpu": dev["gpu"], "mode": dev["kind"], "gi": dev["gi"]}],
        "devices": [dev],
    }
    doc = job_document(str(job), "bench", {node: part})
    return encode(doc, index_of(doc))


def generate(path: Path, n: int, seed: int = 1) -> None:
    rng = random.Random(seed)
    pool = [_summary(rng, 10_000_000 + i, rng.choice(NODES)) for i in range(5000)]
    with open(path, "w") as f:
        for i in range(n):
            r = rng.random()
            start = START + rng.uniform(0, 30 * 86400)
            stamp = time.strftime("%Y-%m-%dT%H:%M:%S", time.localtime(start))
            elapsed = rng.randint(30, 8 * 3600)
            state = "REQUEUED" if rng.random() < 0.02 else "COMPLETED"
            node = rng.choice(NODES)
            if r < 0.75:
                tres, comment = "billing=4,cpu=4,gres/vgpu=2,mem=16G,node=1", rng.choice(pool)
            elif r < 0.9:
                tres, comment = "billing=8,cpu=8,gres/gpu=1,mem=64G,node=1", ""
            else:
                tres, comment = "billing=2,cpu=2,mem=4G,node=1", ""
            f.write(
                f"{1000 + i}|{rng.choice(USERS)}|{rng.choice(ACCOUNTS)}|gpu|{node}|{state}|"
                f"{stamp}|{elapsed}|{tres}|bench|{comment}\n"
            )


def csv_read(path: Path) -> int:
    n = 0
    with open(path, newline="") as f:
        for _row in csv.reader(f, delimiter="|"):
            n += 1
    return n


def report(path: Path) -> int:
    agg = Aggregator(START, START + 31 * 86400, heatmap_by="gpu")
    with open(path) as f:
        agg.add_lines(f)
    result = agg.result()
    to_table(result)
    to_json(result)
    return result.records


def child_rss_kib(path: Path) -> int:
    """Peak RSS (KiB) of `slurmpool report --input path --json` in a child process."""
    argv = [
        sys.executable,
        "-m",
        "slurmpool",
        "report",
        "--input",
        str(path),
        "--json",
        "--since",
        time.strftime("%Y-%m-%dT%H:%M:%S", time.localtime(START)),
        "--until",
        time.strftime("%Y-%m-%dT%H:%M:%S", time.localtime(START + 31 * 86400)),
    ]
    proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    _pid, status, usage = os.wait4(proc.pid, 0)
    if status != 0:
        raise SystemExit(f"report failed: {proc.stderr.read().decode() if proc.stderr else ''}")
    return int(usage.ru_maxrss)


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--records", type=int, default=1_000_000)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        big = Path(tmp) / "sacct.txt"
        small = Path(tmp) / "sacct-small.txt"
        t = time.perf_counter()
        generate(big, args.records)
        generate(small, max(1, args.records // 4))
        size = big.stat().st_size
        print(
            f"generated {args.records} records ({size / 2**20:.0f} MiB) in "
            f"{time.perf_counter() - t:.1f} s"
        )
        t = time.perf_counter()
        n_csv = csv_read(big)
        t_csv = time.perf_counter() - t
        t = time.perf_counter()
        n_rep = report(big)
        t_rep = time.perf_counter() - t
        assert n_csv == n_rep == args.records, (n_csv, n_rep)
        ratio = t_rep / t_csv
        rss_small = child_rss_kib(small)
        rss_big = child_rss_kib(big)
    growth = rss_big / rss_small
    print(f"csv.reader baseline: {t_csv:.2f} s ({args.records / t_csv / 1e3:.0f}k records/s)")
    print(f"report:              {t_rep:.2f} s ({args.records / t_rep / 1e3:.0f}k records/s)")
    print(f"ratio report/csv:    {ratio:.2f} (limit {MAX_RATIO:g})")
    print(
        f"peak RSS of `slurmpool report`: {rss_small / 1024:.1f} MiB on {args.records // 4} "
        f"records, {rss_big / 1024:.1f} MiB on {args.records} (x{growth:.2f})"
    )
    ok = ratio <= MAX_RATIO and growth <= 1.1
    print("PASS" if ok else "FAIL")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
