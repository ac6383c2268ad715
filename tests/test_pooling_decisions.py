"""Pure pooling decisions: request parsing, MIG profiles, shares, MPS limits, passthrough
checks, AdminComment composition, exports."""

from __future__ import annotations

from pathlib import Path

import pytest
from pooling_env import allocation

from slurmpool import records
from slurmpool.catalogue import Catalogue
from slurmpool.configgen.nodeconfig import PoolingPolicy, parse_node_config
from slurmpool.gpu.backend import GpuInfo
from slurmpool.gpu.select import sim_state_dir
from slurmpool.modes import GpuMode
from slurmpool.placement import GpuOccupancy, PlacedInstance, Placement
from slurmpool.pooling import passthrough
from slurmpool.pooling.exports import exports
from slurmpool.pooling.jobfile import JobFileError, export_line, job_file
from slurmpool.pooling.mig import plan_instances
from slurmpool.pooling.request import (
    RequestError,
    job_gpus,
    mig_profiles,
    split_shards,
    vgpu_claimed_in_extra,
)
from slurmpool.pooling.requeue import clean
from slurmpool.pooling.shared import free_shares, mps_env

A100 = "A100-SXM4-80GB"
TABLE = {
    1: "1g.10gb",
    2: "2g.20gb",
    3: "3g.40gb",
    4: "4g.40gb",
    5: "7g.80gb",
    6: "7g.80gb",
    7: "7g.80gb",
}


@pytest.mark.parametrize(
    ("extra", "want"),
    [
        ("slurmpool:vgpu=2", 2),
        (" slurmpool:vgpu=14\n", 14),
        ("SlurmPool : VGPU = 7", 7),
        ("mine slurmpool:vgpu=3,x", 3),
        ("slurmpool:vgpu=$(id)", None),
        ("slurmpool:vgpu=", None),
        ("user's own extra", None),
        ("", None),
        (None, None),
    ],
    ids=[
        "plain",
        "whitespace",
        "case-spacing",
        "inside",
        "subst",
        "empty",
        "other",
        "blank",
        "unset",
    ],
)
def test_vgpu_claimed_in_extra(extra: str | None, want: int | None) -> None:
    assert vgpu_claimed_in_extra(extra) == want


@pytest.mark.parametrize(
    ("count", "want"),
    [
        (1, ("1g.10gb",)),
        (2, ("2g.20gb",)),
        (4, ("4g.40gb",)),
        (5, ("7g.80gb",)),
        (7, ("7g.80gb",)),
        (14, ("7g.80gb", "7g.80gb")),
        (21, ("7g.80gb",) * 3),
    ],
)
def test_mig_profiles(count: int, want: tuple[str, ...]) -> None:
    assert mig_profiles(count, 7, TABLE.get) == want


@pytest.mark.parametrize("count", [0, 9, 15])
def test_mig_profiles_refused(count: int) -> None:
    with pytest.raises(RequestError):
        mig_profiles(count, 7, TABLE.get)


def _node_class(gpus: list[tuple[str, int]]):  # type: ignore[no-untyped-def]
    data = {
        "schema": 1,
        "cluster": "t",
        "gpu_backend": "nvml",
        "accounting": False,
        "slurm_version": "22.05",
        "paths": {},
        "hooks": {},
        "profiles": {},
        "node_classes": [
            {
                "name": "c",
                "hostlist": "n1",
                "vgpu_unit": None,
                "units_per_gpu": 7,
                "vgpu_count": 0,
                "gpus": [
                    {
                        "index": i,
                        "minor": i,
                        "model": A100,
                        "mode": mode,
                        "shares": 1,
                        "mps": False,
                        "vfio": False,
                        "layout": ["1g.10gb"] * n if mode == "mig-static" else [],
                        "slurm_type": "a100",
                    }
                    for i, (mode, n) in enumerate(gpus)
                ],
            }
        ],
    }
    cls = parse_node_config(data).node_class("n1")
    assert cls is not None
    return cls


def test_slurm_job_gpus_index_the_gpu_gres_entries() -> None:
    # Measured on 22.05: the sandbox's only whole GPU (/dev/nvidia2) arrives as "0".
    cls = _node_class([("mig", 0), ("mig", 0), ("passthrough", 0)])
    assert [g.index for g in job_gpus("0", cls)] == [2]
    # By type in Gres= order (the lowest GPU with the type first), then GPU order:
    # a100 = GPUs 0 and 2, then a100_1g.10gb = GPU 1's two instances.
    cls = _node_class([("passthrough", 0), ("mig-static", 2), ("passthrough", 0)])
    assert [g.index for g in job_gpus("0,1", cls)] == [0, 2]
    assert job_gpus("3", cls) == []  # an instance of the fixed layout
    with pytest.raises(RequestError, match="not one of"):
        job_gpus("7", cls)
    with pytest.raises(RequestError):
        job_gpus("0;id", cls)
    # Shared GPUs are gpu entries too (each with its shards), typed a100_shared.
    cls = _node_class([("shared", 0), ("passthrough", 0), ("shared", 0)])
    assert [g.index for g in job_gpus("0", cls)] == [0]
    assert [g.index for g in job_gpus("1", cls)] == [2]
    assert [g.index for g in job_gpus("2", cls)] == [1]


def test_shards_come_from_the_one_shared_gpu_named() -> None:
    cls = _node_class([("shared", 0), ("shared", 0), ("passthrough", 0)])
    whole, shard = split_shards(job_gpus("1", cls), 3)
    assert (whole, shard and shard.index) == ([], 1)
    whole, shard = split_shards(job_gpus("2,0", cls), 1)
    assert ([g.index for g in whole], shard and shard.index) == ([2], 0)
    # No shards: a shared GPU named was given whole (gpu:1 landing on it).
    whole, shard = split_shards(job_gpus("0,2", cls), 0)
    assert ([g.index for g in whole], shard) == ([2, 0], None)
    with pytest.raises(
        RequestError, match="exactly one shared GPU; SLURM_JOB_GPUS names shared GPUs 0, 1"
    ):
        split_shards(job_gpus("0,1", cls), 2)
    with pytest.raises(RequestError, match="names shared GPUs none"):
        split_shards(job_gpus("2", cls), 2)


def test_plan_whole_gpus_takes_distinct_gpus(catalogue: Catalogue) -> None:
    m = catalogue.get(A100)
    gpus = [GpuOccupancy(0, m), GpuOccupancy(1, m)]
    chosen = plan_instances(gpus, ["7g", "7g"])
    assert chosen is not None and sorted(c.gpu_index for c in chosen) == [0, 1]
    one = [GpuOccupancy(0, m, (PlacedInstance("1g.10gb", Placement(6, 1)),)), GpuOccupancy(1, m)]
    assert plan_instances(one, ["7g", "7g"]) is None


def test_plan_fragmented_4g_has_no_room(catalogue: Catalogue) -> None:
    m = catalogue.get(A100)
    held = (PlacedInstance("1g.10gb", Placement(0, 1)), PlacedInstance("1g.10gb", Placement(4, 1)))
    gpus = [GpuOccupancy(0, m, held), GpuOccupancy(1, m, held)]
    assert plan_instances(gpus, ["4g"]) is None
    assert plan_instances(gpus, ["2g"]) is not None


def test_free_shares_count_live_shared_records() -> None:
    used = [
        allocation(gpu_index=0, shares=1),
        allocation(gpu_index=1, shares=3),
        allocation(gpu_index=0, shares=2),
        allocation(mode=GpuMode.MIG, gpu_index=2, shares=None),
    ]
    assert free_shares([(0, 4), (1, 4), (2, 4)], used) == {0: 1, 1: 1, 2: 4}


def test_mps_env_is_proportional() -> None:
    assert mps_env(1, 4, 48000) == {
        "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE": "25",
        "CUDA_MPS_PINNED_DEVICE_MEM_LIMIT": "0=12000M",
    }
    assert mps_env(3, 3, 24000)["CUDA_MPS_ACTIVE_THREAD_PERCENTAGE"] == "100"
    with pytest.raises(ValueError):
        mps_env(5, 4, 1000)


def test_exports_per_mode() -> None:
    mig = allocation(mode=GpuMode.MIG, profile="2g.20gb", mig_uuid="MIG-x", shares=None)
    assert exports([mig]) == [
        "export CUDA_VISIBLE_DEVICES=MIG-x",
        "export SLURMPOOL_GPU_UUID=GPU-a",
        "export SLURMPOOL_MODE=mig",
        "export SLURMPOOL_PROFILE=2g.20gb",
    ]
    share = allocation(shares=1, details={"total_shares": 4, "mps": True, "memory_mib": 48000})
    lines = exports([share])
    assert "export CUDA_MPS_ACTIVE_THREAD_PERCENTAGE=25" in lines
    assert "export CUDA_MPS_PINNED_DEVICE_MEM_LIMIT=0=12000M" in lines
    no_mps = records.replace(share, details={"total_shares": 4, "mps": False, "memory_mib": 1})
    assert not any("MPS" in line for line in exports([no_mps]))
    assert exports([]) == []


def test_a_simulated_node_tells_its_jobs_where_its_gpus_are() -> None:
    mig = allocation(mode=GpuMode.MIG, profile="1g.10gb", mig_uuid="MIG-y", shares=None)
    lines = exports([mig], sim_state_dir("sim:/srv/node/sim"))
    assert lines[-1] == "export SLURMPOOL_SIM_STATE=/srv/node/sim"
    assert exports([], "/srv/node/sim") == []  # a job without GPUs gets nothing
    assert sim_state_dir("nvml") is None and sim_state_dir(None) is None
    assert sim_state_dir("sim:") is None


@pytest.mark.parametrize(
    ("name", "value"),
    [
        ("CUDA_VISIBLE_DEVICES", "MIG-a; rm -rf /"),
        ("X", "$(id)"),
        ("X", "a\nexport Y=1"),
        ("a b", "1"),
    ],
)
def test_export_lines_refuse_hostile_values(name: str, value: str) -> None:
    with pytest.raises(JobFileError):
        export_line(name, value)


def test_job_file_refuses_odd_job_ids(tmp_path) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(JobFileError):
        job_file(tmp_path, "../etc/passwd")
    assert Path(job_file(tmp_path, "12_3")).name == "12_3.env"


def test_clean_flattens_hostile_text() -> None:
    assert clean("a\nb\tc\x00d") == "a b c d"
    assert len(clean("x" * 1000)) == 200


def _info(**kw: object) -> GpuInfo:
    base = dict(
        index=2,
        uuid="GPU-2",
        name="A100",
        model=A100,
        memory_total_mib=80000,
        memory_used_mib=0,
        mig_capable=True,
        mig_current=False,
        mig_pending=False,
        minor=2,
        pci_bus_id="00000000:47:00.0",
        pci_device_id=0,
        numa_node=0,
        cpu_affinity=None,
    )
    base.update(kw)
    return GpuInfo(**base)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("info", "pids", "policy", "action"),
    [
        ({}, [], {}, passthrough.OK),
        ({}, [42], {}, passthrough.KILL),
        ({}, [42], {"stray_processes": "refuse"}, passthrough.REFUSE),
        ({"mig_current": True, "mig_pending": True}, [], {}, passthrough.BROKEN),
        (
            {"mig_current": True, "mig_pending": True},
            [],
            {"allow_disable_mig": True},
            passthrough.DISABLE_MIG,
        ),
        (
            {"mig_current": True, "mig_pending": True},
            [7],
            {"allow_disable_mig": True},
            passthrough.REFUSE,
        ),
        ({"mig_current": True}, [], {"allow_disable_mig": True}, passthrough.BROKEN),
        ({"mig_pending": True}, [], {}, passthrough.OK),
    ],
    ids=[
        "idle",
        "stray-kill",
        "stray-refuse",
        "mig-on",
        "mig-disable",
        "mig-busy",
        "reset-pending",
        "enable-pending",
    ],
)
def test_passthrough_decisions(info: dict, pids: list, policy: dict, action: str) -> None:  # type: ignore[type-arg]
    d = passthrough.decide(_info(**info), pids, 0, PoolingPolicy(**policy))
    assert d.action == action
