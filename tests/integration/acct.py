"""Helpers the accounting and churn tests share: the CLI on a node, users of a module's
own, slurmdbd stopped and started by PID, the outbox, and what sacct holds."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from polling import poll

from slurmpool.sandbox import procs

from .conftest import TERMINAL, Cluster, make_unix_users


def run_cli(
    cluster: Cluster, *args: str, node: str | None = None
) -> subprocess.CompletedProcess[str]:
    """``python -m slurmpool ARGS`` (inside ``node``'s namespace when given)."""
    argv = [sys.executable, "-m", "slurmpool", *args]
    if node is not None:
        argv = cluster.sandbox.on_node(node, argv)
    return subprocess.run(
        argv,
        capture_output=True,
        text=True,
        timeout=120,
        env=cluster.slurm.child_env(),
        check=False,
    )


@contextmanager
def login_users(cluster: Cluster, names: tuple[str, ...]) -> Iterator[tuple[str, ...]]:
    """Unix users with an association in the sandbox; those made here are removed after."""
    created = make_unix_users(names)
    cluster.sandbox.add_user(*names)
    try:
        yield names
    finally:
        # Their associations go first: Slurm 24.11+ refuses a later user given the same uid.
        if created:
            cluster.sandbox.remove_user(*created)
        for user in created:
            subprocess.run(["userdel", "--remove", user], check=False, capture_output=True)


def admin_comment(cluster: Cluster, job: int) -> str | None:
    """The job's AdminComment in accounting (None: no record)."""
    res = cluster.slurm.run(
        "sacct",
        "-n",
        "-X",
        "-P",
        "-j",
        str(job),
        "-o",
        "JobIDRaw,AdminComment",
        check=False,
        timeout=15,
    )
    for line in res.stdout.splitlines():
        jid, _, value = line.partition("|")
        if jid == str(job):
            return value
    return None


def stop_slurmdbd(cluster: Cluster) -> procs.Daemon:
    """Stop the sandbox's slurmdbd by its PID; returns it, for :func:`start_slurmdbd`."""
    state = cluster.sandbox.state()
    assert state is not None
    dbd = [d for d in state.daemons if d.name == "slurmdbd" and procs.is_running(d)][-1]
    procs.stop([dbd], grace_s=10)
    return dbd


def start_slurmdbd(cluster: Cluster, old: procs.Daemon) -> None:
    """Start slurmdbd again like the sandbox did, recorded so `sandbox down` stops it;
    wait until it answers."""
    layout = cluster.sandbox.layout
    env = cluster.sandbox.runner.child_env()
    env["SLURM_CONF"] = cluster.state.slurm_conf
    d = procs.spawn("slurmdbd", old.argv, layout.log("slurmdbd.out"), env, cwd=layout.root)
    state = cluster.sandbox.state()
    assert state is not None
    state.daemons.append(d)
    state.save(layout)
    poll(
        "slurmdbd back",
        lambda: cluster.slurm.run("sacctmgr", "-n", "list", "cluster", check=False, timeout=10).ok,
        30,
    )


def outbox_items(cluster: Cluster, node: str) -> list[dict[str, Any]]:
    """``slurmpool accounting status --json`` on ``node``."""
    res = run_cli(
        cluster,
        "accounting",
        "status",
        "--json",
        "--node-config",
        str(Path(cluster.state.slurm_conf).parent / "node-config.json"),
        "--node",
        node,
        node=node,
    )
    assert res.returncode == 0, res.stderr
    items: list[dict[str, Any]] = json.loads(res.stdout)
    return items


def _sacct_states(cluster: Cluster, jobs: list[int]) -> str:
    return cluster.slurm.run(
        "sacct",
        "-X",
        "-n",
        "-P",
        "-j",
        ",".join(map(str, jobs)),
        "-o",
        "JobIDRaw,State,End,ElapsedRaw",
        check=False,
        timeout=15,
    ).stdout


def wait_until_accounted(
    cluster: Cluster, jobs: list[int], timeout_s: float = 60, cancelled: Iterable[int] = ()
) -> None:
    """Wait until sacct shows every job terminal with a known End.

    slurmctld's records reach the database seconds after a job ends, and up to
    20 s late after slurmdbd was down (SLURM_FACTS.md); until then sacct's
    Elapsed grows with the clock and a windowed query may not list the job.

    ``cancelled``: jobs slurmctld has CANCELLED, whose last record may stay REQUEUED:
    Slurm writes no record after the requeue's for a job cancelled while its requeue
    is completing (22.05, 24.11, 26.05: tests/data/probe-requeue-cancel-acct.sh).
    """
    may_stay_requeued = {str(j) for j in cancelled}

    def final(jid: str, state: str) -> bool:
        return state in TERMINAL or (state == "REQUEUED" and jid in may_stay_requeued)

    def accounted() -> bool:
        rows = {}
        for line in _sacct_states(cluster, jobs).splitlines():
            jid, state, end, _elapsed = line.split("|")
            rows[jid] = (state.split(" ", 1)[0], end)
        return all(
            str(j) in rows and final(str(j), rows[str(j)][0]) and rows[str(j)][1] != "Unknown"
            for j in jobs
        )

    poll(
        f"jobs {jobs} terminal with a known End in sacct",
        accounted,
        timeout_s,
        seen=lambda: _sacct_states(cluster, jobs),
    )
