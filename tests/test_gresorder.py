"""The order Slurm numbers a node's gpu GRES in, and the Gres= that makes it so."""

from __future__ import annotations

from slurmpool.gresorder import GpuGres, GresGpu, gpu_gres_entries, gpu_gres_types
from slurmpool.modes import GpuMode

P, S, M, POOL = GpuMode.PASSTHROUGH, GpuMode.SHARED, GpuMode.MIG_STATIC, GpuMode.MIG


def test_types_follow_the_lowest_gpu_that_has_each() -> None:
    gpus = [
        GresGpu(3, P, "a100"),
        GresGpu(0, S, "a100"),
        GresGpu(1, M, "a100", ("3g.40gb", "1g.10gb", "3g.40gb")),
        GresGpu(2, POOL, "a100"),  # pooled by MIG: a vgpu count, no gpu entry
        GresGpu(4, S, "a100"),
    ]
    assert gpu_gres_types(gpus) == ["a100_shared", "a100_1g.10gb", "a100_3g.40gb", "a100"]
    assert gpu_gres_entries(gpus) == [
        GpuGres(0, "a100_shared", True),
        GpuGres(4, "a100_shared", True),
        GpuGres(1, "a100_1g.10gb", False),
        GpuGres(1, "a100_3g.40gb", False),
        GpuGres(1, "a100_3g.40gb", False),
        GpuGres(3, "a100", True),
    ]


def test_the_sandbox_order_is_gpu_order() -> None:
    # Measured on 22.05: examples/sandbox-shared.yaml's GPUs 0, 1 (shared) and 2 (whole).
    gpus = [GresGpu(i, S, "a100") for i in (0, 1)] + [GresGpu(2, P, "a100")]
    assert [e.gpu for e in gpu_gres_entries(gpus)] == [0, 1, 2]
