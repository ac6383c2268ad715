"""Churn on the sandbox: what a busy cluster does to the pool in an hour, in a minute.

One round (:func:`churn_round`), driven by one seed: jobs of mixed sizes from
several users at once; some cancelled at a random moment (some while their
prolog runs), some requeued while running; hooks killed at the simulated
driver's fault points; a monitord restarted; slurmdbd stopped for a while.
While it runs, every live record on every node is checked: no slice or whole
GPU is held by two jobs at once.  After it:

- no node is drained, and no MIG instance or live record is left;
- every job's AdminComment holds at most one summary, whose parts each name
  the node and run they are keyed by; every completed job has the part of its
  last run on its node, and every job requeued while running has the part of
  the run that was running then.
"""

from __future__ import annotations

import random
import sqlite3
import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import needs
from polling import poll

from slurmpool.accounting.codec import decode, find_token
from slurmpool.accounting.summary import node_of, part_key
from slurmpool.gpu.select import open_backend
from slurmpool.sim.faults import POINTS, plant, planted
from slurmpool.slurm.parse import JobInfo, parse_jobs, parse_nodes
from slurmpool.state.store import store_path

from .acct import admin_comment, outbox_items, start_slurmdbd, stop_slurmdbd, wait_until_accounted
from .conftest import TERMINAL, Cluster

# What a job asks for, with weights: mostly small slices, some large, some whole GPUs.
SIZES = (("vgpu:1", 4), ("vgpu:2", 4), ("vgpu:3", 2), ("vgpu:4", 2), ("vgpu:7", 1), ("gpu:1", 2))
# A requeued job waits about cred_expire (10 s) plus a scheduling pass (tests/integration/
# test_pooling.py); every bound below is one only a failure reaches.
ROUND_END_S = 420


@dataclass
class Counts:
    """What a round (or a soak) did and checked."""

    rounds: int = 0
    jobs: int = 0
    completed: int = 0
    cancels: int = 0
    requeues: int = 0
    kills_planted: int = 0
    kills_struck: int = 0
    monitord_restarts: int = 0
    slurmdbd_outages: int = 0
    overlap_checks: int = 0
    summaries_checked: int = 0
    parts_checked: int = 0

    def add(self, other: Counts) -> None:
        for name in self.__dataclass_fields__:
            setattr(self, name, getattr(self, name) + getattr(other, name))

    def line(self) -> str:
        return ", ".join(f"{k}={v}" for k, v in vars(self).items())


@dataclass
class Plan:
    """One job of a round and what happens to it."""

    user: str
    gres: str
    seconds: float
    fate: str  # "run", "cancel" (at cancel_at s after submission) or "requeue"
    cancel_at: float = 0.0
    job: int = 0
    submitted: float = 0.0
    requeued_run: tuple[str, int] | None = None  # (node, run) running when requeued
    done: bool = False


@dataclass
class Round:
    seed: int
    users: tuple[str, ...]
    jobs: int = 14
    counts: Counts = field(default_factory=Counts)


def _pick_size(rng: random.Random) -> str:
    sizes, weights = zip(*SIZES, strict=True)
    return rng.choices(sizes, weights)[0]


def make_plans(rng: random.Random, users: tuple[str, ...], n: int) -> list[Plan]:
    plans = []
    for _ in range(n):
        fate = rng.choices(("run", "cancel", "requeue"), (6, 2, 2))[0]
        plans.append(
            Plan(
                user=rng.choice(users),
                gres=_pick_size(rng),
                seconds=round(rng.uniform(2, 6), 1),
                fate=fate,
                cancel_at=round(rng.uniform(0, 4), 2),
            )
        )
    return plans


def _jobs(cluster: Cluster) -> dict[int, JobInfo]:
    res = cluster.slurm.run("scontrol", "show", "job", check=False, timeout=15)
    return {j.job_id: j for j in parse_jobs(res.stdout)} if res.ok else {}


def _live_records(cluster: Cluster, node: str) -> list[sqlite3.Row]:
    """The node store's live allocation records, read-only (the hooks own the file)."""
    path = Path(store_path(cluster.sandbox.layout.host_dir(node) / "state", node))
    if not path.exists():
        return []
    conn = sqlite3.connect(f"file:{path}?mode=ro", uri=True, timeout=10)
    try:
        conn.row_factory = sqlite3.Row
        return conn.execute(
            "SELECT job_id, mode, gpu_index, placement_start, placement_size, state "
            "FROM allocations WHERE state != 'released'"
        ).fetchall()
    except sqlite3.OperationalError as e:
        if "no such table" in str(e):
            return []
        raise
    finally:
        conn.close()


def overlaps(records: Iterable[Any]) -> list[str]:
    """Pairs of live records of different jobs that hold one slice or GPU at once."""
    found = []
    recs = list(records)
    for i, a in enumerate(recs):
        for b in recs[i + 1 :]:
            if a["job_id"] == b["job_id"] or a["gpu_index"] != b["gpu_index"]:
                continue
            whole = "passthrough" in (a["mode"], b["mode"])
            if not whole and a["placement_start"] is not None and b["placement_start"] is not None:
                a0, a1 = a["placement_start"], a["placement_start"] + a["placement_size"]
                b0, b1 = b["placement_start"], b["placement_start"] + b["placement_size"]
                if a1 <= b0 or b1 <= a0:
                    continue
            elif not whole:
                continue
            found.append(f"GPU {a['gpu_index']}: job {a['job_id']} {dict(a)} and {dict(b)}")
    return found


def check_no_overlap(cluster: Cluster) -> None:
    for node in cluster.state.nodes:
        bad = overlaps(_live_records(cluster, node))
        assert not bad, f"{node}: one slice held by two jobs: {bad}"


def _submit(cluster: Cluster, p: Plan, workdir: Path) -> int:
    py = needs.python_for_jobs_shell()
    script = f"{py} -m slurmpool.sim.workload --seconds {p.seconds} --mem-mib 200"
    out = workdir / "churn-%j.out"
    return cluster.submit(f"--gres={p.gres}", "-o", str(out), "--wrap", script, user=p.user)


def _output(cluster: Cluster, job: int) -> Path:
    return cluster.workdir / f"churn-{job}.out"


def _working(cluster: Cluster, p: Plan) -> bool:
    """The job's workload runs on its slice (its prolog is done): requeued now, the run
    has GPU use to summarise.  RUNNING in slurmctld alone may precede the prolog."""
    try:
        return "running: pid" in _output(cluster, p.job).read_text()
    except OSError:
        return False


def _plant_kills(cluster: Cluster, rng: random.Random, counts: Counts) -> dict[str, list[str]]:
    """Two one-shot kills at random fault points and nodes; returns what was planted."""
    out: dict[str, list[str]] = {}
    for _ in range(2):
        node = rng.choice(cluster.state.nodes)
        point = rng.choice(sorted(POINTS))
        sim = cluster.sandbox.layout.host_dir(node) / "sim"
        plant(sim, point, rng.randint(1, 3))
        out.setdefault(node, []).append(point)
        counts.kills_planted += 1
    return out


def _unplant(cluster: Cluster, counts: Counts) -> None:
    """Remove the kills no hook reached; count the ones that struck."""
    from slurmpool.sim.faults import FAULTS_DIR

    left = 0
    for node in cluster.state.nodes:
        sim = cluster.sandbox.layout.host_dir(node) / "sim"
        left += len(planted(sim))
        faults = sim / FAULTS_DIR
        for path in faults.glob("*") if faults.is_dir() else []:
            path.unlink()
    counts.kills_struck += counts.kills_planted - left


def churn_round(cluster: Cluster, r: Round) -> Counts:
    rng = random.Random(r.seed)
    c = r.counts
    c.rounds += 1
    plans = make_plans(rng, r.users, r.jobs)
    _plant_kills(cluster, rng, c)
    restart_at = rng.uniform(1, 6)
    dbd_down_at, dbd_down_s = rng.uniform(2, 8), rng.uniform(5, 12)
    restart_node = rng.choice(cluster.state.nodes)
    dbd: Any = None
    dbd_up_at = 0.0
    restarted = False

    t0 = time.monotonic()
    for p in plans:
        p.job = _submit(cluster, p, cluster.workdir)
        p.submitted = time.monotonic()
    c.jobs += len(plans)
    try:
        while True:
            now = time.monotonic() - t0
            jobs = _jobs(cluster)
            check_no_overlap(cluster)
            c.overlap_checks += 1
            if not restarted and now >= restart_at:
                cluster.sandbox.restart(f"monitord-{restart_node}")
                c.monitord_restarts += 1
                restarted = True
            if dbd is None and dbd_up_at == 0.0 and now >= dbd_down_at:
                dbd = stop_slurmdbd(cluster)
                c.slurmdbd_outages += 1
                dbd_up_at = now + dbd_down_s
            if dbd is not None and now >= dbd_up_at:
                start_slurmdbd(cluster, dbd)
                dbd = None
            for p in plans:
                info = jobs.get(p.job)
                if p.done or info is None:
                    continue
                age = time.monotonic() - p.submitted
                if p.fate == "cancel" and age >= p.cancel_at:
                    cluster.slurm.run("scancel", str(p.job), check=False, timeout=15)
                    c.cancels += 1
                    p.done = True
                elif p.fate == "requeue" and info.state == "RUNNING" and _working(cluster, p):
                    res = cluster.slurm.run(
                        "scontrol", "requeue", str(p.job), check=False, timeout=15
                    )
                    if res.ok:
                        p.requeued_run = (info.node_list, info.restarts)
                        c.requeues += 1
                    p.done = True
            ended = all((j := jobs.get(p.job)) is not None and j.state in TERMINAL for p in plans)
            if ended and dbd is None:
                break
            assert now < ROUND_END_S, f"round {r.seed}: jobs still not ended after {now:.0f} s"
            time.sleep(0.5)
    finally:
        if dbd is not None:
            start_slurmdbd(cluster, dbd)
    _unplant(cluster, c)
    final = _jobs(cluster)
    check_after(cluster, plans, final, c)
    return c


def _drained(cluster: Cluster) -> list[str]:
    out = cluster.slurm.run("scontrol", "show", "node", timeout=15).stdout
    return [f"{n.name}: {n.state} {n.reason}" for n in parse_nodes(out) if not n.available]


def _instances(cluster: Cluster) -> list[str]:
    found = []
    for node in cluster.state.nodes:
        with open_backend(f"sim:{cluster.sandbox.layout.host_dir(node) / 'sim'}") as b:
            found += [
                f"{node} GPU {g.index} GI {i.gi_id}" for g in b.gpus() for i in b.instances(g.index)
            ]
    return found


def check_after(cluster: Cluster, plans: list[Plan], final: dict[int, JobInfo], c: Counts) -> None:
    assert not _drained(cluster), f"nodes drained: {_drained(cluster)}"

    def leftovers() -> str:
        records = [dict(r) for n in cluster.state.nodes for r in _live_records(cluster, n)]
        return f"instances {_instances(cluster)}, records {records}"

    poll(
        "no live record and no MIG instance on any node",
        lambda: (
            not _instances(cluster)
            and not any(_live_records(cluster, n) for n in cluster.state.nodes)
        ),
        90,
        seen=leftovers,
    )
    ids = [p.job for p in plans]
    cancelled = [p.job for p in plans if final[p.job].state == "CANCELLED"]
    wait_until_accounted(cluster, ids, 120, cancelled=cancelled)
    # Every summary stored and checked twice: the outboxes empty.
    poll(
        "every node's accounting outbox to empty",
        lambda: not any(outbox_items(cluster, n) for n in cluster.state.nodes),
        240,
        seen=lambda: str({n: outbox_items(cluster, n) for n in cluster.state.nodes}),
    )
    for p in plans:
        info = final[p.job]
        text = admin_comment(cluster, p.job) or ""
        assert text.count("sp1:") <= 1, f"job {p.job}: {text}"
        nodes: dict[str, Any] = decode(text)["nodes"] if find_token(text) else {}
        if nodes:
            c.summaries_checked += 1
        for key, part in nodes.items():
            run = part.get("run", 0)
            assert key == part_key(node_of(key), run), f"job {p.job}: part {key} says run {run}"
            assert run <= info.restarts, f"job {p.job}: run {run} of {info.restarts} restarts"
            c.parts_checked += 1
        expected = []
        if info.state == "COMPLETED":
            c.completed += 1
            assert info.node_list, f"job {p.job} completed on no node"
            expected.append(part_key(info.node_list, info.restarts))
        if p.requeued_run is not None:
            expected.append(part_key(*p.requeued_run))
        missing = [k for k in expected if k not in nodes]
        assert not missing, (
            f"job {p.job} ({p.gres}, {p.fate}, {info.state}, {info.restarts} restarts): "
            f"no summary part {missing} in {sorted(nodes)}; AdminComment {text[:200]!r}"
        )
