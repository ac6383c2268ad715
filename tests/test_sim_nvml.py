"""The NVML simulator, called the way pynvml is called: rules and error cases."""

from __future__ import annotations

import ctypes
import os
import time
from pathlib import Path
from typing import Any

import pynvml
import pytest

from slurmpool.sim.node import create_node, reset_gpu
from slurmpool.sim.nvml import SimNvml
from slurmpool.sim.processes import attach_process


@pytest.fixture
def node(tmp_path: Path) -> Path:
    create_node(
        tmp_path / "state",
        tmp_path / "dev",
        [
            ("A100-SXM4-80GB", True),  # 0: Ampere, MIG on
            ("A100-SXM4-80GB", False),  # 1: Ampere, MIG off
            ("H100-SXM5-80GB", False),  # 2: Hopper, MIG off
            ("T4-16GB", False),  # 3: no MIG
            ("GB200-186GB", True),  # 4: some profile ids unknown
            ("A30-24GB", True),  # 5: 4 memory slices
        ],
    )
    return tmp_path / "state"


@pytest.fixture
def nv(node: Path) -> Any:
    sim = SimNvml(node)
    sim.nvmlInit()
    yield sim
    sim.nvmlShutdown()


def profile_id(nv: Any, h: Any, index: int) -> int:
    return int(nv.nvmlDeviceGetGpuInstanceProfileInfo(h, index).id)


def create(nv: Any, h: Any, index: int, start: int, size: int) -> Any:
    pl = nv.c_nvmlGpuInstancePlacement_t()
    pl.start, pl.size = start, size
    return nv.nvmlDeviceCreateGpuInstanceWithPlacement(
        h, profile_id(nv, h, index), ctypes.byref(pl)
    )


def gi_info(nv: Any, gi: Any) -> tuple[int, int, int]:
    info = nv.nvmlGpuInstanceGetInfo(gi)
    return int(info.id), int(info.placement.start), int(info.placement.size)


def full_ci(nv: Any, gi: Any, ci_index: int) -> Any:
    info = nv.nvmlGpuInstanceGetComputeInstanceProfileInfo(
        gi, ci_index, nv.NVML_COMPUTE_INSTANCE_ENGINE_PROFILE_SHARED
    )
    return nv.nvmlGpuInstanceCreateComputeInstance(gi, info.id)


# -- module shape ---------------------------------------------------------------


def test_forwards_pynvml_constants_structs_and_exception_classes(nv: Any) -> None:
    assert nv.NVMLError is pynvml.NVMLError
    assert nv.NVMLError_InUse is pynvml.NVMLError_InUse
    assert nv.c_nvmlGpuInstancePlacement_t is pynvml.c_nvmlGpuInstancePlacement_t
    assert nv.NVML_DEVICE_MIG_ENABLE == 1


def test_unimplemented_nvml_function_never_reaches_a_driver(nv: Any) -> None:
    with pytest.raises(pynvml.NVMLError_FunctionNotFound):
        nv.nvmlDeviceGetFanSpeed(nv.nvmlDeviceGetHandleByIndex(0))


def test_calls_before_init_and_after_shutdown_are_uninitialized(node: Path) -> None:
    sim = SimNvml(node)
    with pytest.raises(pynvml.NVMLError_Uninitialized):
        sim.nvmlDeviceGetCount()
    sim.nvmlInit()
    assert sim.nvmlDeviceGetCount() == 6
    sim.nvmlShutdown()
    with pytest.raises(pynvml.NVMLError_Uninitialized):
        sim.nvmlDeviceGetHandleByIndex(0)
    with pytest.raises(pynvml.NVMLError_Uninitialized):
        sim.nvmlShutdown()


def test_init_without_a_node_is_driver_not_loaded(tmp_path: Path) -> None:
    with pytest.raises(pynvml.NVMLError_DriverNotLoaded):
        SimNvml(tmp_path / "nothing").nvmlInit()


# -- devices -------------------------------------------------------------------


def test_device_identity(nv: Any) -> None:
    h = nv.nvmlDeviceGetHandleByIndex(0)
    assert nv.nvmlDeviceGetName(h) == "NVIDIA A100-SXM4-80GB"
    uuid = nv.nvmlDeviceGetUUID(h)
    assert uuid.startswith("GPU-")
    assert nv.nvmlDeviceGetIndex(nv.nvmlDeviceGetHandleByUUID(uuid)) == 0
    assert nv.nvmlDeviceGetMinorNumber(nv.nvmlDeviceGetHandleByIndex(3)) == 3
    pci = nv.nvmlDeviceGetPciInfo(h)
    assert pci.pciDeviceId == 0x20B210DE
    assert pci.busId == "00000000:07:00.0"
    assert nv.nvmlDeviceGetIndex(nv.nvmlDeviceGetHandleByPciBusId("00000000:07:00.0")) == 0
    assert nv.nvmlSystemGetDriverVersion() == "550.54.15"
    assert nv.nvmlDeviceGetArchitecture(nv.nvmlDeviceGetHandleByIndex(2)) == (
        pynvml.NVML_DEVICE_ARCH_HOPPER
    )


def test_uuids_are_stable_per_gpu_and_distinct(node: Path, tmp_path: Path) -> None:
    sim = SimNvml(node)
    sim.nvmlInit()
    uuids = [sim.nvmlDeviceGetUUID(sim.nvmlDeviceGetHandleByIndex(i)) for i in range(6)]
    assert len(set(uuids)) == 6
    create_node(node, tmp_path / "dev", [("A100-SXM4-80GB", True)], force=True)
    assert sim.nvmlDeviceGetUUID(sim.nvmlDeviceGetHandleByIndex(0)) == uuids[0]


def _carve_1g(sim: SimNvml) -> tuple[str, str, Any]:
    """(GPU UUID, UUID of a 1g instance carved on GPU 0, the instance) of ``sim``'s node."""
    h = sim.nvmlDeviceGetHandleByIndex(0)
    gi = create(sim, h, 0, 0, 1)
    ci = sim.nvmlGpuInstanceCreateComputeInstance(gi, 0)
    mig = sim.nvmlDeviceGetMigDeviceHandleByIndex(h, 0)
    return sim.nvmlDeviceGetUUID(h), sim.nvmlDeviceGetUUID(mig), (gi, ci)


def test_uuids_are_unique_per_node_and_per_carve(tmp_path: Path) -> None:
    """Real UUIDs are unique across a cluster: two nodes whose state lies at the same
    path (as each sandbox node sees its own) differ by name, and so do the instances
    carved on them; the same slot carved again on one node gets a new UUID."""
    seen = []
    for name in ("sbx1", "sbx2"):
        create_node(
            tmp_path / "s", tmp_path / "d", ["A100-SXM4-80GB:mig"], node_name=name, force=True
        )
        sim = SimNvml(tmp_path / "s")
        sim.nvmlInit()
        gpu, mig, (gi, ci) = _carve_1g(sim)
        sim.nvmlComputeInstanceDestroy(ci)
        sim.nvmlGpuInstanceDestroy(gi)
        again = _carve_1g(sim)
        assert again[0] == gpu and again[1] != mig
        seen += [gpu, mig, again[1]]
        sim.nvmlShutdown()
    assert len(set(seen)) == len(seen)


def test_bad_handles_and_indices(nv: Any) -> None:
    with pytest.raises(pynvml.NVMLError_InvalidArgument):
        nv.nvmlDeviceGetHandleByIndex(6)
    with pytest.raises(pynvml.NVMLError_NotFound):
        nv.nvmlDeviceGetHandleByUUID("GPU-00000000-0000-0000-0000-000000000000")
    with pytest.raises(pynvml.NVMLError_InvalidArgument):
        nv.nvmlDeviceGetName(None)


def test_numa_and_cpu_affinity_are_deterministic(nv: Any) -> None:
    nodes = [nv.nvmlDeviceGetNumaNodeId(nv.nvmlDeviceGetHandleByIndex(i)) for i in range(6)]
    assert nodes == [0, 0, 0, 1, 1, 1]
    words = nv.nvmlDeviceGetCpuAffinity(nv.nvmlDeviceGetHandleByIndex(5), 1)
    assert words[0] == 0xFFFF << 16


def test_memory_utilisation_power_and_energy_follow_processes(nv: Any, node: Path) -> None:
    h = nv.nvmlDeviceGetHandleByIndex(1)
    assert nv.nvmlDeviceGetMemoryInfo(h).total == 81920 * 1024 * 1024
    assert nv.nvmlDeviceGetUtilizationRates(h).gpu == 0
    idle = nv.nvmlDeviceGetPowerUsage(h)
    e0 = nv.nvmlDeviceGetTotalEnergyConsumption(h)
    attach_process(node, 1, pid=os.getpid(), used_mib=1000, util=70)
    attach_process(node, 1, pid=os.getppid(), used_mib=500, util=50)
    mem = nv.nvmlDeviceGetMemoryInfo(h)
    assert mem.used == 1500 * 1024 * 1024
    assert mem.free == mem.total - mem.used
    assert nv.nvmlDeviceGetUtilizationRates(h).gpu == 100  # 70 + 50, capped
    assert nv.nvmlDeviceGetPowerUsage(h) > idle
    time.sleep(0.01)
    assert nv.nvmlDeviceGetTotalEnergyConsumption(h) > e0
    procs = nv.nvmlDeviceGetComputeRunningProcesses(h)
    assert sorted(p.pid for p in procs) == sorted([os.getpid(), os.getppid()])
    assert {p.usedGpuMemory for p in procs} == {1000 * 1024 * 1024, 500 * 1024 * 1024}


def test_utilisation_not_supported_on_mig_enabled_gpu(nv: Any) -> None:
    with pytest.raises(pynvml.NVMLError_NotSupported):
        nv.nvmlDeviceGetUtilizationRates(nv.nvmlDeviceGetHandleByIndex(0))


# -- MIG mode --------------------------------------------------------------------


def test_mig_mode_not_supported_without_mig(nv: Any) -> None:
    with pytest.raises(pynvml.NVMLError_NotSupported):
        nv.nvmlDeviceGetMigMode(nv.nvmlDeviceGetHandleByIndex(3))
    with pytest.raises(pynvml.NVMLError_NotSupported):
        nv.nvmlDeviceSetMigMode(nv.nvmlDeviceGetHandleByIndex(3), 1)


def test_ampere_mig_mode_is_pending_until_reset(nv: Any, node: Path) -> None:
    h = nv.nvmlDeviceGetHandleByIndex(1)
    assert nv.nvmlDeviceGetMigMode(h) == [0, 0]
    assert nv.nvmlDeviceSetMigMode(h, 1) == pynvml.NVML_ERROR_RESET_REQUIRED
    assert nv.nvmlDeviceGetMigMode(h) == [0, 1]
    with pytest.raises(pynvml.NVMLError_NotSupported):  # not in MIG mode yet
        nv.nvmlDeviceGetGpuInstanceProfileInfo(h, 0)
    reset_gpu(node, 1)
    assert nv.nvmlDeviceGetMigMode(h) == [1, 1]
    assert profile_id(nv, h, 0) == 19


def test_hopper_mig_mode_applies_immediately(nv: Any) -> None:
    h = nv.nvmlDeviceGetHandleByIndex(2)
    assert nv.nvmlDeviceSetMigMode(h, 1) == pynvml.NVML_SUCCESS
    assert nv.nvmlDeviceGetMigMode(h) == [1, 1]


def test_mig_mode_change_refused_while_in_use(nv: Any, node: Path) -> None:
    attach_process(node, 2, pid=os.getpid(), used_mib=10, util=1)
    with pytest.raises(pynvml.NVMLError_InUse):
        nv.nvmlDeviceSetMigMode(nv.nvmlDeviceGetHandleByIndex(2), 1)
    h0 = nv.nvmlDeviceGetHandleByIndex(0)
    create(nv, h0, 0, 0, 1)
    with pytest.raises(pynvml.NVMLError_InUse):
        nv.nvmlDeviceSetMigMode(h0, 0)


def test_mig_administration_needs_an_admin_uid(tmp_path: Path) -> None:
    create_node(tmp_path / "s", tmp_path / "d", [("A100-SXM4-80GB", True)], admin_uids=[4242])
    sim = SimNvml(tmp_path / "s")
    sim.nvmlInit()
    h = sim.nvmlDeviceGetHandleByIndex(0)
    with pytest.raises(pynvml.NVMLError_NoPermission):
        create(sim, h, 0, 0, 1)
    with pytest.raises(pynvml.NVMLError_NoPermission):
        sim.nvmlDeviceSetMigMode(h, 0)


def test_compute_mode_is_roots_to_set(nv: Any, tmp_path: Path) -> None:
    h = nv.nvmlDeviceGetHandleByIndex(1)
    assert nv.nvmlDeviceGetComputeMode(h) == pynvml.NVML_COMPUTEMODE_DEFAULT
    nv.nvmlDeviceSetComputeMode(h, pynvml.NVML_COMPUTEMODE_EXCLUSIVE_PROCESS)
    assert nv.nvmlDeviceGetComputeMode(h) == pynvml.NVML_COMPUTEMODE_EXCLUSIVE_PROCESS
    assert nv.nvmlDeviceGetComputeMode(nv.nvmlDeviceGetHandleByIndex(0)) == 0  # its own
    with pytest.raises(pynvml.NVMLError_NotSupported):
        nv.nvmlDeviceSetComputeMode(h, pynvml.NVML_COMPUTEMODE_EXCLUSIVE_THREAD)
    with pytest.raises(pynvml.NVMLError_InvalidArgument):
        nv.nvmlDeviceSetComputeMode(h, 7)
    create_node(tmp_path / "s", tmp_path / "d", [("A100-SXM4-80GB", False)], admin_uids=[4242])
    sim = SimNvml(tmp_path / "s")
    sim.nvmlInit()
    with pytest.raises(pynvml.NVMLError_NoPermission):
        sim.nvmlDeviceSetComputeMode(sim.nvmlDeviceGetHandleByIndex(0), 3)


# -- GPU instance profiles and placements ------------------------------------------


def test_profile_info_matches_catalogue(nv: Any) -> None:
    h = nv.nvmlDeviceGetHandleByIndex(0)
    info = nv.nvmlDeviceGetGpuInstanceProfileInfo(h, pynvml.NVML_GPU_INSTANCE_PROFILE_3_SLICE)
    assert (info.id, info.sliceCount, info.instanceCount) == (9, 3, 2)
    assert info.name == "MIG 3g.40gb"
    v1 = nv.nvmlDeviceGetGpuInstanceProfileInfo(h, 0, 1)
    assert (v1.id, v1.memorySizeMB) == (19, 10240)  # catalogue memory unknown: 1/8 of 80 GiB
    h30 = nv.nvmlDeviceGetHandleByIndex(5)
    assert profile_id(nv, h30, pynvml.NVML_GPU_INSTANCE_PROFILE_2_SLICE) == 5  # A30 differs


def test_profile_absent_or_with_unknown_id_is_not_supported(nv: Any) -> None:
    h = nv.nvmlDeviceGetHandleByIndex(0)
    with pytest.raises(pynvml.NVMLError_NotSupported):
        nv.nvmlDeviceGetGpuInstanceProfileInfo(h, pynvml.NVML_GPU_INSTANCE_PROFILE_6_SLICE)
    gb = nv.nvmlDeviceGetHandleByIndex(4)
    assert profile_id(nv, gb, 0) == 19
    with pytest.raises(pynvml.NVMLError_NotSupported):  # GB200 3g: id unknown in the catalogue
        nv.nvmlDeviceGetGpuInstanceProfileInfo(gb, pynvml.NVML_GPU_INSTANCE_PROFILE_3_SLICE)
    with pytest.raises(pynvml.NVMLError_InvalidArgument):
        nv.nvmlDeviceGetGpuInstanceProfileInfo(h, 99)


def test_possible_placements_lists_all_occupied_or_not(nv: Any) -> None:
    h = nv.nvmlDeviceGetHandleByIndex(0)
    pid = profile_id(nv, h, 1)  # 2g
    count = ctypes.c_uint()
    nv.nvmlDeviceGetGpuInstancePossiblePlacements(h, pid, None, ctypes.byref(count))
    assert count.value == 3
    create(nv, h, 1, 2, 2)
    array = (pynvml.c_nvmlGpuInstancePlacement_t * count.value)()
    nv.nvmlDeviceGetGpuInstancePossiblePlacements(h, pid, array, ctypes.byref(count))
    assert [(array[i].start, array[i].size) for i in range(count.value)] == [(0, 2), (2, 2), (4, 2)]
    with pytest.raises(pynvml.NVMLError_InsufficientSize):
        small = (pynvml.c_nvmlGpuInstancePlacement_t * 1)()
        nv.nvmlDeviceGetGpuInstancePossiblePlacements(h, pid, small, ctypes.byref(count))
    assert nv.nvmlDeviceGetGpuInstanceRemainingCapacity(h, pid) == 2
    assert nv.nvmlDeviceGetGpuInstanceRemainingCapacity(h, profile_id(nv, h, 4)) == 0  # 7g


# -- creating GPU instances -------------------------------------------------------


def test_overlap_is_insufficient_resources(nv: Any) -> None:
    h = nv.nvmlDeviceGetHandleByIndex(0)
    create(nv, h, 2, 4, 4)  # 3g at 4
    with pytest.raises(pynvml.NVMLError_InsufficientResources):
        create(nv, h, 0, 5, 1)  # 1g at 5 overlaps
    with pytest.raises(pynvml.NVMLError_InsufficientResources):
        create(nv, h, 4, 0, 8)  # 7g overlaps
    create(nv, h, 3, 0, 4)  # 4g + 3g is possible


def test_illegal_placement_is_invalid_argument(nv: Any) -> None:
    h = nv.nvmlDeviceGetHandleByIndex(0)
    with pytest.raises(pynvml.NVMLError_InvalidArgument):
        create(nv, h, 2, 2, 4)  # 3g only starts at 0 or 4
    with pytest.raises(pynvml.NVMLError_InvalidArgument):
        create(nv, h, 0, 7, 1)  # no 1g in slot 7
    pl = pynvml.c_nvmlGpuInstancePlacement_t(0, 1)
    with pytest.raises(pynvml.NVMLError_InvalidArgument):
        nv.nvmlDeviceCreateGpuInstanceWithPlacement(h, 12345, ctypes.byref(pl))


def test_max_count_is_insufficient_resources(nv: Any) -> None:
    h = nv.nvmlDeviceGetHandleByIndex(0)
    create(nv, h, 7, 0, 1)  # 1g+me, max 1
    with pytest.raises(pynvml.NVMLError_InsufficientResources):
        create(nv, h, 7, 3, 1)


def test_gi_ids_are_swizz_ids_by_size_not_position(nv: Any) -> None:
    h = nv.nvmlDeviceGetHandleByIndex(0)
    a = gi_info(nv, create(nv, h, 0, 6, 1))
    b = gi_info(nv, create(nv, h, 0, 0, 1))
    c = gi_info(nv, create(nv, h, 1, 2, 2))
    d = gi_info(nv, create(nv, h, 0, 1, 1))
    assert [x[0] for x in (a, b, c, d)] == [7, 8, 3, 9]
    nv.nvmlGpuInstanceDestroy(nv.nvmlDeviceGetGpuInstanceById(h, 8))
    assert gi_info(nv, create(nv, h, 0, 5, 1))[0] == 8  # lowest free in range


def test_gi_id_ranges_full_half_quarter(nv: Any, node: Path) -> None:
    h = nv.nvmlDeviceGetHandleByIndex(0)
    assert gi_info(nv, create(nv, h, 2, 4, 4))[0] == 1  # half
    assert gi_info(nv, create(nv, h, 2, 0, 4))[0] == 2
    reset_gpu(node, 0)
    assert gi_info(nv, create(nv, h, 4, 0, 8))[0] == 0  # full
    h30 = nv.nvmlDeviceGetHandleByIndex(5)
    assert gi_info(nv, create(nv, h30, 0, 3, 1))[0] == 3  # A30: 1 of 4 slices is a quarter


def test_driver_chosen_placement_fragments_like_the_driver(nv: Any) -> None:
    # `nvidia-smi mig -cgi 19,19,14,9` fails: 1g at 6 and 4, 2g at 0, no room for 3g.
    h = nv.nvmlDeviceGetHandleByIndex(0)
    starts = [gi_info(nv, nv.nvmlDeviceCreateGpuInstance(h, pid))[1] for pid in (19, 19, 14)]
    assert starts == [6, 4, 0]
    with pytest.raises(pynvml.NVMLError_InsufficientResources):
        nv.nvmlDeviceCreateGpuInstance(h, 9)


def test_gpu_instances_enumeration(nv: Any) -> None:
    h = nv.nvmlDeviceGetHandleByIndex(0)
    create(nv, h, 0, 6, 1)
    create(nv, h, 0, 5, 1)
    info = nv.nvmlDeviceGetGpuInstanceProfileInfo(h, 0)
    array = (pynvml.c_nvmlGpuInstance_t * info.instanceCount)()
    count = ctypes.c_uint()
    nv.nvmlDeviceGetGpuInstances(h, info.id, array, ctypes.byref(count))
    assert sorted(gi_info(nv, array[i])[1] for i in range(count.value)) == [5, 6]
    assert gi_info(nv, nv.nvmlDeviceGetGpuInstanceById(h, 7))[1] == 6
    with pytest.raises(pynvml.NVMLError_NotFound):
        nv.nvmlDeviceGetGpuInstanceById(h, 1)
    gi_dev = nv.nvmlGpuInstanceGetInfo(array[0]).device
    assert nv.nvmlDeviceGetIndex(gi_dev) == 0


# -- compute instances and MIG devices ----------------------------------------------


def test_compute_instance_and_mig_device(nv: Any, node: Path) -> None:
    h = nv.nvmlDeviceGetHandleByIndex(0)
    gi = create(nv, h, 2, 4, 4)  # 3g.40gb
    ci_profile = nv.nvmlGpuInstanceGetComputeInstanceProfileInfo(
        gi, pynvml.NVML_COMPUTE_INSTANCE_PROFILE_3_SLICE, 0
    )
    assert (ci_profile.id, ci_profile.sliceCount) == (2, 3)
    ci = nv.nvmlGpuInstanceCreateComputeInstance(gi, ci_profile.id)
    info = nv.nvmlComputeInstanceGetInfo(ci)
    assert info.id == 0
    assert nv.nvmlDeviceGetIndex(info.device) == 0  # the parent GPU, as in nvml.h
    assert nv.nvmlGpuInstanceGetInfo(info.gpuInstance).id == 1

    assert nv.nvmlDeviceGetMaxMigDeviceCount(h) == 7
    mig = nv.nvmlDeviceGetMigDeviceHandleByIndex(h, 0)
    assert nv.nvmlDeviceIsMigDeviceHandle(mig)
    assert not nv.nvmlDeviceIsMigDeviceHandle(h)
    assert nv.nvmlDeviceGetGpuInstanceId(mig) == 1
    assert nv.nvmlDeviceGetComputeInstanceId(mig) == 0
    assert nv.nvmlDeviceGetIndex(nv.nvmlDeviceGetDeviceHandleFromMigDeviceHandle(mig)) == 0
    uuid = nv.nvmlDeviceGetUUID(mig)
    assert uuid.startswith("MIG-")
    assert nv.nvmlDeviceGetUUID(nv.nvmlDeviceGetHandleByUUID(uuid)) == uuid
    assert nv.nvmlDeviceGetName(mig) == "NVIDIA A100-SXM4-80GB MIG 3g.40gb"
    assert nv.nvmlDeviceGetMemoryInfo(mig).total == 40960 * 1024 * 1024
    with pytest.raises(pynvml.NVMLError_NotFound):
        nv.nvmlDeviceGetMigDeviceHandleByIndex(h, 1)
    with pytest.raises(pynvml.NVMLError_NotSupported):
        nv.nvmlDeviceGetGpuInstanceId(h)
    with pytest.raises(pynvml.NVMLError_NotSupported):
        nv.nvmlDeviceGetUtilizationRates(mig)

    attach_process(node, 0, 1, 0, pid=os.getpid(), used_mib=2000, util=40)
    procs = nv.nvmlDeviceGetComputeRunningProcesses(mig)
    assert [(p.pid, p.gpuInstanceId, p.computeInstanceId) for p in procs] == [(os.getpid(), 1, 0)]
    assert nv.nvmlDeviceGetMemoryInfo(mig).used == 2000 * 1024 * 1024


def test_ci_profiles_fall_back_to_full_size_only(nv: Any) -> None:
    gb = nv.nvmlDeviceGetHandleByIndex(4)  # GB200: no CI profiles in the catalogue
    gi = create(nv, gb, 1, 0, 2)  # 2g
    info = nv.nvmlGpuInstanceGetComputeInstanceProfileInfo(gi, 1, 0)
    assert (info.id, info.sliceCount) == (1, 2)
    with pytest.raises(pynvml.NVMLError_NotSupported):
        nv.nvmlGpuInstanceGetComputeInstanceProfileInfo(gi, 0, 0)


def test_ci_max_count_and_overlap(nv: Any) -> None:
    h = nv.nvmlDeviceGetHandleByIndex(0)
    gi = create(nv, h, 2, 0, 4)  # 3g
    one = nv.nvmlGpuInstanceGetComputeInstanceProfileInfo(gi, 0, 0).id
    ids = [nv.nvmlComputeInstanceGetInfo(nv.nvmlGpuInstanceCreateComputeInstance(gi, one)).id]
    ids += [nv.nvmlComputeInstanceGetInfo(nv.nvmlGpuInstanceCreateComputeInstance(gi, one)).id]
    assert ids == [0, 1]
    full = nv.nvmlGpuInstanceGetComputeInstanceProfileInfo(gi, 2, 0).id
    with pytest.raises(pynvml.NVMLError_InsufficientResources):  # slices 0 and 1 are taken
        nv.nvmlGpuInstanceCreateComputeInstance(gi, full)
    with pytest.raises(pynvml.NVMLError_InvalidArgument):
        nv.nvmlGpuInstanceCreateComputeInstance(gi, 7)


def test_destroy_order_and_in_use(nv: Any, node: Path) -> None:
    h = nv.nvmlDeviceGetHandleByIndex(0)
    gi = create(nv, h, 0, 6, 1)
    ci = full_ci(nv, gi, 0)
    with pytest.raises(pynvml.NVMLError_InUse):  # CI first
        nv.nvmlGpuInstanceDestroy(gi)
    attach_process(node, 0, 7, 0, pid=os.getpid(), used_mib=1, util=1)
    with pytest.raises(pynvml.NVMLError_InUse):  # processes on it
        nv.nvmlComputeInstanceDestroy(ci)
    from slurmpool.sim.processes import detach_process

    detach_process(node, os.getpid())
    nv.nvmlComputeInstanceDestroy(ci)
    nv.nvmlGpuInstanceDestroy(gi)
    with pytest.raises(pynvml.NVMLError_InvalidArgument):  # stale handle
        nv.nvmlGpuInstanceGetInfo(gi)


def test_gi_destroy_with_process_on_it_is_in_use(nv: Any, node: Path) -> None:
    h = nv.nvmlDeviceGetHandleByIndex(0)
    gi = create(nv, h, 0, 6, 1)
    ci = full_ci(nv, gi, 0)
    attach_process(node, 0, 7, 0, pid=os.getpid(), used_mib=1, util=1)
    with pytest.raises(pynvml.NVMLError_InUse):
        nv.nvmlGpuInstanceDestroy(gi)
    with pytest.raises(pynvml.NVMLError_InUse):
        nv.nvmlComputeInstanceDestroy(ci)


def test_mig_uuids_are_new_per_instance(nv: Any) -> None:
    h = nv.nvmlDeviceGetHandleByIndex(0)
    seen = set()
    for _ in range(2):
        gi = create(nv, h, 0, 6, 1)
        ci = full_ci(nv, gi, 0)
        seen.add(nv.nvmlDeviceGetUUID(nv.nvmlDeviceGetMigDeviceHandleByIndex(h, 0)))
        nv.nvmlComputeInstanceDestroy(ci)
        nv.nvmlGpuInstanceDestroy(gi)
    assert len(seen) == 2


def test_reset_drops_instances_and_refuses_when_busy(nv: Any, node: Path) -> None:
    from slurmpool.sim.state import SimError

    h = nv.nvmlDeviceGetHandleByIndex(0)
    create(nv, h, 0, 6, 1)
    reset_gpu(node, 0)
    with pytest.raises(pynvml.NVMLError_NotFound):
        nv.nvmlDeviceGetGpuInstanceById(h, 7)
    attach_process(node, 1, pid=os.getpid(), used_mib=1, util=1)
    with pytest.raises(SimError, match="in use"):
        reset_gpu(node, 1)


# -- GPM ---------------------------------------------------------------------------


def _sm_util(nv: Any, s1: Any, s2: Any) -> float:
    mg = pynvml.c_nvmlGpmMetricsGet_t()
    mg.version = pynvml.NVML_GPM_METRICS_GET_VERSION
    mg.numMetrics = 1
    mg.sample1, mg.sample2 = s1, s2
    mg.metrics[0].metricId = pynvml.NVML_GPM_METRIC_SM_UTIL
    nv.nvmlGpmMetricsGet(mg)
    assert mg.metrics[0].nvmlReturn == pynvml.NVML_SUCCESS
    return float(mg.metrics[0].value)


def test_gpm_sm_utilisation_per_mig_instance_on_hopper(nv: Any, node: Path) -> None:
    h = nv.nvmlDeviceGetHandleByIndex(2)
    assert nv.nvmlGpmQueryDeviceSupport(h).isSupportedDevice == 1
    nv.nvmlDeviceSetMigMode(h, 1)
    gi = create(nv, h, 0, 6, 1)
    full_ci(nv, gi, 0)
    attach_process(node, 2, 7, 0, pid=os.getpid(), used_mib=100, util=60)
    s1, s2 = nv.nvmlGpmSampleAlloc(), nv.nvmlGpmSampleAlloc()
    nv.nvmlGpmMigSampleGet(h, 7, s1)
    time.sleep(0.05)
    nv.nvmlGpmMigSampleGet(h, 7, s2)
    assert _sm_util(nv, s1, s2) == pytest.approx(60.0, abs=0.5)
    nv.nvmlGpmSampleFree(s1)
    nv.nvmlGpmSampleFree(s2)


def test_gpm_not_supported_on_ampere(nv: Any) -> None:
    h = nv.nvmlDeviceGetHandleByIndex(0)
    assert nv.nvmlGpmQueryDeviceSupport(h).isSupportedDevice == 0
    with pytest.raises(pynvml.NVMLError_NotSupported):
        nv.nvmlGpmMigSampleGet(h, 0, nv.nvmlGpmSampleAlloc())


def test_dead_processes_are_pruned_on_read(nv: Any, node: Path) -> None:
    import subprocess
    import sys

    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    try:
        attach_process(node, 1, pid=child.pid, used_mib=100, util=10)
        h = nv.nvmlDeviceGetHandleByIndex(1)
        assert [p.pid for p in nv.nvmlDeviceGetComputeRunningProcesses(h)] == [child.pid]
    finally:
        child.kill()
        child.wait()
    assert nv.nvmlDeviceGetComputeRunningProcesses(h) == []


def test_instance_uuids_are_rfc4122_version_5() -> None:
    import uuid

    from slurmpool.sim.nvml import _uuid5

    ns = "6ba7b810-9dad-11d1-80b4-00c04fd430c8"
    for name in ("gpu0/gi1/ci0", "GPU-x/7/3", ""):
        assert _uuid5(ns, name) == str(uuid.uuid5(uuid.UUID(ns), name))
