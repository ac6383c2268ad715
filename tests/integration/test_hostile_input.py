"""Hostile job names and comments reach the hooks and the logs as data, never as code."""

from __future__ import annotations

from pathlib import Path

from slurmpool.slurm.parse import parse_nodes

from .conftest import Cluster


def test_hostile_job_name_changes_nothing(cluster: Cluster, tmp_path: Path) -> None:
    marker = tmp_path / "pwned"
    name = f"a'b\"c $(touch {marker}) `touch {marker}` ; touch {marker}\nsecond line"
    job = cluster.submit(
        "--gres=vgpu:1",
        "-J",
        name,
        f"--comment=$(touch {marker})",
        "-o",
        "/dev/null",
        "--wrap",
        "true",
        user="sp-alice",
    )
    assert cluster.wait(job) == "COMPLETED"
    assert not marker.exists()
    node = cluster.job(job)["NodeList"]
    lines = [line for line in cluster.host_hook_log(node).splitlines() if f"job={job} " in line]
    assert lines, "the hooks logged nothing for the job"
    for line in lines:
        assert "second line" not in line  # nothing of the name forged a log line
    nodes = {n.name: n for n in parse_nodes(cluster.slurm.run("scontrol", "show", "node").stdout)}
    assert "DRAIN" not in nodes[node].flags
