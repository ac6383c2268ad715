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
        (["--gres=vgpu:1,vgpufit:s7:1"], "vgpufit is set by slurmpool from --gres=vgpu:N"),
        (["--gres=vgpufit:s1:1"], "vgpufit is set by slurmpool"),
    ],
    ids=["zero", "negative", "too-big", "partition-without-pool", "fit-forged", "fit-alone"],
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
        assert _tres_per_node(cluster, job) == "gres:vgpu:7,gres:vgpufit:s7:1,gres:vgpufit:next:1"
    finally:
        cluster.slurm.run("scancel", str(job))


def test_whole_gpu_multiples_are_kept(cluster: Cluster) -> None:
    res = cluster.sbatch("--gres=vgpu:14", "--hold", "--wrap", "true", user="sp-bob")
    job = int(res.stdout.strip())
    try:
        assert _tres_per_node(cluster, job) == "gres:vgpu:14,gres:vgpufit:s7:2,gres:vgpufit:next:1"
    finally:
        cluster.slurm.run("scancel", str(job))


def test_a_users_modify_asks_anew_and_cannot_forge_the_fit(cluster: Cluster) -> None:
    """An ordinary user's GRES change gets the requirement of the new size; one that
    names vgpufit is refused and the job keeps what it had."""
    job = cluster.submit("--gres=vgpu:2", "--hold", "--wrap", "true", user="sp-bob")
    try:
        assert _tres_per_node(cluster, job) == "gres:vgpu:2,gres:vgpufit:s2:1,gres:vgpufit:next:1"
        cluster.slurm.run("scontrol", "update", f"JobId={job}", "Gres=vgpu:4", as_user="sp-bob")
        assert _tres_per_node(cluster, job) == "gres:vgpu:4,gres:vgpufit:s4:1,gres:vgpufit:next:1"
        res = cluster.slurm.run(
            "scontrol",
            "update",
            f"JobId={job}",
            "Gres=vgpu:4,vgpufit:s1:1",
            as_user="sp-bob",
            check=False,
        )
        assert res.returncode != 0
        assert _tres_per_node(cluster, job) == "gres:vgpu:4,gres:vgpufit:s4:1,gres:vgpufit:next:1"
    finally:
        cluster.slurm.run("scancel", str(job))


def test_a_job_pinned_to_a_node_asks_for_no_size(cluster: Cluster) -> None:
    job = cluster.submit("--gres=vgpu:3", "-w", "sbx1", "--hold", "--wrap", "true", user="sp-bob")
    try:
        assert _tres_per_node(cluster, job) == "gres:vgpu:3,gres:vgpufit:next:1"
    finally:
        cluster.slurm.run("scancel", str(job))
