"""generate-config for 10,000 nodes in 20 node classes (budget: under 2 s).

Run: ``python benchmarks/bench_generate_config.py``.  Prints the time to
validate and render, and its ratio to a baseline measured in the same run:
``json.dumps`` of the expanded per-node data (what a naive per-node
generator would at least have to write).
"""

from __future__ import annotations

import json
import time

from slurmpool.configgen.render import generate
from slurmpool.hostlist import expand
from slurmpool.policy.loader import parse_policy
from slurmpool.slurm.version import InstalledSlurm, parse_version

NODES = 10_000
CLASSES = 20
BUDGET_S = 2.0
SLURM = InstalledSlurm(parse_version("24.11.5"), "benchmark")


def policy_text() -> str:
    per = NODES // CLASSES
    groups = []
    layouts = [
        "{model: A100-SXM4-80GB, count: 4, mode: mig}\n"
        "      - {model: A100-SXM4-80GB, indices: [4, 5], mode: passthrough}\n"
        "      - {model: A100-SXM4-80GB, indices: [6, 7], mode: mig-static,"
        " layout: [3g, 2g, 1g, 1g]}",
        "{model: H100-SXM5-80GB, count: 8, mode: passthrough}",
        "{model: L40S, count: 4, mode: shared, shares: 4, mps: true}",
    ]
    for c in range(CLASSES):
        groups.append(
            f"  - name: c{c:02d}\n"
            f"    nodes: c{c:02d}n[{1:05d}-{per:05d}]\n"
            "    cpus: 128\n    real_memory_mib: 1000000\n"
            "    slurm_node_options: {Feature: bench}\n"
            f"    gpus:\n      - {layouts[c % len(layouts)]}\n"
        )
    parts = [f"  - name: p{c:02d}\n    node_groups: [c{c:02d}]\n" for c in range(CLASSES)]
    parts[0] += "    default: true\n"
    return (
        "version: v1\ncluster: bench\nnode_groups:\n"
        + "".join(groups)
        + "partitions:\n"
        + "".join(parts)
    )


def main() -> None:
    text = policy_text()
    generate(parse_policy(text), installed=SLURM)  # warm imports, templates and catalogue
    start = time.perf_counter()
    policy = parse_policy(text, "bench.yaml")
    files = generate(policy, installed=SLURM).files
    elapsed = time.perf_counter() - start

    start = time.perf_counter()
    per_node = [
        {"node": n, "group": g.name, "gpus": [s.index for s in g.gpus]}
        for g in policy.node_groups
        for n in expand(g.nodes)
    ]
    json.dumps(per_node)
    baseline = time.perf_counter() - start

    size = sum(len(t) for t in files.values())
    print(f"nodes={NODES} classes={CLASSES} output={size} bytes")
    print(f"generate-config: {elapsed:.3f} s (budget {BUDGET_S} s)")
    print(f"baseline (expand + json.dumps per node): {baseline:.3f} s")
    print(f"ratio generate/baseline: {elapsed / baseline:.2f}")
    print("PASS" if elapsed < BUDGET_S else "FAIL")


if __name__ == "__main__":
    main()
