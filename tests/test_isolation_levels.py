"""The isolation each GPU mode gets from what the node runs (pure)."""

from __future__ import annotations

import pytest

from slurmpool.isolation import GPU, JOB, NONE, USER, NodeFences, isolation, node_isolation
from slurmpool.modes import GpuMode

FENCED_V1 = NodeFences(task_cgroup=True, constrain_devices=True, cgroup="v1", mig_fence=True)


def test_a_cgroup_v1_node_fences_every_mode_to_the_job_or_its_gpu() -> None:
    got = {m: isolation(m, FENCED_V1).level for m in GpuMode}
    assert got == {
        GpuMode.PASSTHROUGH: JOB,
        GpuMode.MIG: JOB,
        GpuMode.MIG_STATIC: JOB,
        GpuMode.SHARED: GPU,
    }
    assert "prolog's device cgroup" in isolation(GpuMode.MIG, FENCED_V1).detail


@pytest.mark.parametrize(
    ("fences", "why"),
    [
        (
            NodeFences(task_cgroup=True, constrain_devices=True, cgroup="v2", mig_fence=False),
            "cgroup v2, where a job's device rules are Slurm's alone",
        ),
        (
            NodeFences(task_cgroup=True, constrain_devices=True, cgroup="v1", mig_fence=False),
            "no cgroup v1 devices controller at paths.job_cgroup_root",
        ),
        (
            NodeFences(task_cgroup=True, constrain_devices=False, cgroup="v1", mig_fence=True),
            "ConstrainDevices=yes",
        ),
    ],
)
def test_without_the_fence_mig_keeps_out_other_users_only(fences: NodeFences, why: str) -> None:
    got = isolation(GpuMode.MIG, fences)
    assert got.level == USER
    assert "nothing but MIG's memory and compute partitioning" in got.detail
    assert got.detail.endswith(why)


def test_on_cgroup_v2_slurm_still_fences_whole_gpus_and_shares() -> None:
    v2 = NodeFences(task_cgroup=True, constrain_devices=True, cgroup="v2", mig_fence=False)
    assert isolation(GpuMode.PASSTHROUGH, v2).level == JOB
    assert isolation(GpuMode.SHARED, v2).level == GPU


def test_without_task_cgroup_nothing_is_fenced_and_the_line_says_why() -> None:
    bare = NodeFences(task_cgroup=False, constrain_devices=True, cgroup="v1", mig_fence=True)
    for mode in (GpuMode.PASSTHROUGH, GpuMode.SHARED, GpuMode.MIG_STATIC):
        got = isolation(mode, bare)
        assert got.level == NONE
        assert "TaskPlugin has no task/cgroup" in got.detail
    assert isolation(GpuMode.MIG, bare).level == USER


def test_one_line_per_mode_in_the_order_the_gpus_come() -> None:
    modes = [GpuMode.MIG, GpuMode.MIG, GpuMode.PASSTHROUGH, GpuMode.MIG]
    lines = [i.line() for i in node_isolation(modes, FENCED_V1)]
    assert [ln.split(":")[0] for ln in lines] == ["mig", "passthrough"]
    assert lines[1].startswith("passthrough: job (the device cgroup")


def test_a_shared_gpu_under_mps_says_who_holds_the_limits() -> None:
    plain = isolation(GpuMode.SHARED, FENCED_V1).detail
    held = isolation(GpuMode.SHARED, FENCED_V1, mps=True).detail
    assert "with no limit" in plain
    assert "MPS holds each user's server there to the user's shares" in held
    assert "one user's server at a time" in held
