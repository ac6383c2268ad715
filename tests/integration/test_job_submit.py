"""job_submit.lua on the real slurmctld: bad vgpu requests are refused with a visible message."""

from __future__ import annotations

import pytest

from .conftest import Cluster


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--gres=vgpu:0"], "vgpu:0 asks for nothing"),
        (["--gres=vgpu:-1"], "vgpu"),
        (["--gres=vgpu:99"], "vgpu:99 is more than one GPU"),
        (["--gres=vgpu:2", "--partition=site-cpu"], "vgpu jobs can use: pool"),
    ],
    ids=["zero", "negative", "too-big", "partition-without-pool"],
)
def test_rejected_with_a_message(cluster: Cluster, args: list[str], message: str) -> None:
    res = cluster.sbatch(*args, "--wrap", "true", user="sp-bob", check=False)
    assert res.returncode != 0
    assert message in res.stderr, res.stderr
    assert res.stdout.strip() == ""


def _tres_per_node(cluster: Cluster, job: int) -> str:
    # Measured: 22.05 prints TresPerNode=gres:vgpu:7, 24.11 and 26.05 gres/vgpu:7.
    return cluster.job(job)["TresPerNode"].replace("gres/", "gres:")


def test_valid_request_is_normalised(cluster: Cluster) -> None:
    res = cluster.sbatch("--gres=vgpu:5", "--hold", "--wrap", "true", user="sp-bob")
    job = int(res.stdout.strip())
    try:
        assert "vgpu:5 rounded up to vgpu:7" in res.stderr
        assert _tres_per_node(cluster, job) == "gres:vgpu:7"
    finally:
        cluster.slurm.run("scancel", str(job))


def test_whole_gpu_multiples_are_kept(cluster: Cluster) -> None:
    res = cluster.sbatch("--gres=vgpu:14", "--hold", "--wrap", "true", user="sp-bob")
    job = int(res.stdout.strip())
    try:
        assert _tres_per_node(cluster, job) == "gres:vgpu:14"
    finally:
        cluster.slurm.run("scancel", str(job))
