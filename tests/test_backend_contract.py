"""The GpuBackend contract, run on every backend available.

The simulator always; the real NVML only where ``nvmlInit()`` succeeds.  The
read-only part runs on both; everything that changes a GPU (MIG mode,
instances) runs on the simulator only, never on real hardware.
"""

from __future__ import annotations

import ctypes
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from slurmpool.catalogue import default_catalogue
from slurmpool.gpu.backend import (
    BackendUnavailable,
    GpuInfo,
    InUseError,
    InvalidRequestError,
    MigInstance,
    NoPermissionError,
    NoRoomError,
    NotSupportedError,
)
from slurmpool.gpu.interface import GpuBackend
from slurmpool.gpu.nvml import NvmlBackend
from slurmpool.gpu.select import BackendSpecError, open_backend
from slurmpool.placement import Placement
from slurmpool.sim.node import SimGpuSpec, create_node, reset_gpu
from slurmpool.sim.nvml import SimNvml
from slurmpool.sim.processes import attach_process


def _real_nvml_reason() -> str | None:
    try:
        import pynvml

        pynvml.nvmlInit()
    except Exception as e:
        return f"real NVML unavailable: {type(e).__name__}: {e}"
    pynvml.nvmlShutdown()
    return None


@pytest.fixture(params=["sim", "nvml"])
def backend(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[GpuBackend]:
    if request.param == "nvml":
        reason = _real_nvml_reason()
        if reason:
            pytest.skip(reason)
        with open_backend("nvml") as b:
            yield b
        return
    create_node(
        tmp_path / "state",
        tmp_path / "dev",
        [("A100-SXM4-80GB", True), ("H100-SXM5-80GB", False), ("T4-16GB", False)],
    )
    with open_backend(f"sim:{tmp_path / 'state'}") as b:
        b.create_instance(0, "3g.40gb", Placement(4, 4))
        yield b


@pytest.fixture
def sim(tmp_path: Path) -> Iterator[tuple[Path, NvmlBackend]]:
    create_node(
        tmp_path / "state",
        tmp_path / "dev",
        [("A100-SXM4-80GB", True), ("A100-SXM4-80GB", False), ("H100-SXM5-80GB", True)],
    )
    with open_backend(f"sim:{tmp_path / 'state'}") as b:
        yield tmp_path / "state", b


# -- read-only contract (simulator and real NVML) ----------------------------------------


def test_gpus_are_described(backend: GpuBackend) -> None:
    gpus = backend.gpus()
    assert gpus
    assert isinstance(backend.driver_version(), str) and backend.driver_version()
    for i, g in enumerate(gpus):
        assert isinstance(g, GpuInfo)
        assert g.index == i
        assert g.uuid.startswith("GPU-")
        assert 0 <= g.memory_used_mib <= g.memory_total_mib
        assert g.mig_capable or not (g.mig_current or g.mig_pending)
        assert g.pci_bus_id and g.pci_device_id > 0
        assert g.minor >= 0
        assert backend.gpu(i) == g or backend.gpu(i).uuid == g.uuid
        if g.model is not None:
            assert default_catalogue().find(g.model) is not None
    assert len({g.uuid for g in gpus}) == len(gpus)


def test_instances_are_consistent(backend: GpuBackend) -> None:
    for g in backend.gpus():
        instances = backend.instances(g.index)
        if not g.mig_current:
            assert instances == []
        model = default_catalogue().find(g.model) if g.model else None
        for m in instances:
            assert isinstance(m, MigInstance)
            assert m.gpu_index == g.index
            if m.ci_id is not None:
                assert m.uuid is not None and m.uuid.startswith("MIG-")
            p = model.mig.profile(m.profile) if model is not None and model.mig else None
            if p is not None:
                assert (m.placement.start, m.placement.size) in p.placements
            assert m.memory_total_mib > 0
            mem = backend.instance_memory(g.index, m.gi_id)
            assert mem.total_mib == m.memory_total_mib


def test_usage_queries(backend: GpuBackend) -> None:
    for g in backend.gpus():
        util = backend.utilization(g.index)
        if g.mig_current:
            assert util is None
        else:
            assert util is not None and 0 <= util <= 100
        mem = backend.memory(g.index)
        assert mem.total_mib == g.memory_total_mib
        for p in backend.processes(g.index):
            assert p.pid > 0
        power = backend.power_mw(g.index)
        assert power is None or power > 0
        sample = backend.sm_sample(g.index)
        if sample is not None:
            backend.free_sm_sample(sample)
        ecc = backend.ecc_errors(g.index)
        assert ecc is None or (
            set(ecc) <= {"ecc_corrected", "ecc_uncorrected"}
            and all(n >= 0 for n in ecc.values())
            and ecc
        )


def test_the_simulator_reports_no_ecc_counters(sim: tuple[Path, NvmlBackend]) -> None:
    """The simulator has no ECC counters: "not available", never a made-up zero."""
    _, backend = sim
    assert [backend.ecc_errors(g.index) for g in backend.gpus()] == [None] * len(backend.gpus())


def test_unknown_gpu_index_is_an_invalid_request(backend: GpuBackend) -> None:
    with pytest.raises(InvalidRequestError, match="no GPU 99"):
        backend.gpu(99)


# -- changes (simulator only) ----------------------------------------------------------------


def test_create_and_destroy_round_trip(sim: tuple[Path, NvmlBackend]) -> None:
    _state, b = sim
    m = b.create_instance(0, "1g", Placement(6, 1))
    assert (m.profile, m.gi_id, m.ci_id, m.placement) == ("1g.10gb", 7, 0, Placement(6, 1))
    assert (m.gi_minor, m.ci_minor) == (3 + 9 * 7, 3 + 9 * 7 + 1)
    assert m.memory_total_mib == 10240  # simulator estimate: the catalogue does not know it
    assert b.instances(0) == [m]
    assert b.destroy_instance(0, m.gi_id) is True
    assert b.destroy_instance(0, m.gi_id) is False
    assert b.instances(0) == []


def test_no_room_and_illegal_requests(sim: tuple[Path, NvmlBackend]) -> None:
    _state, b = sim
    b.create_instance(0, "4g.40gb", Placement(0, 4))
    with pytest.raises(NoRoomError, match=r"no room for 3g\.40gb at 0:4"):
        b.create_instance(0, "3g.40gb", Placement(0, 4))
    with pytest.raises(InvalidRequestError, match="legal placements"):
        b.create_instance(0, "3g.40gb", Placement(2, 4))
    with pytest.raises(InvalidRequestError, match="unknown MIG profile"):
        b.create_instance(0, "5g.50gb", Placement(0, 4))
    with pytest.raises(NotSupportedError, match="not in MIG mode"):
        b.create_instance(1, "1g", Placement(0, 1))


def test_destroy_while_in_use_names_the_pids(sim: tuple[Path, NvmlBackend]) -> None:
    state, b = sim
    m = b.create_instance(0, "2g", Placement(2, 2))
    attach_process(state, 0, m.gi_id, m.ci_id, pid=os.getpid(), used_mib=100, util=10)
    with pytest.raises(InUseError) as e:
        b.destroy_instance(0, m.gi_id)
    assert e.value.pids == (os.getpid(),)
    assert b.processes(0, m.gi_id)[0].pid == os.getpid()
    assert b.instance_memory(0, m.gi_id).used_mib == 100


def test_destroy_resumes_a_half_destroyed_instance(sim: tuple[Path, NvmlBackend]) -> None:
    state, b = sim
    m = b.create_instance(0, "3g", Placement(0, 4))
    assert m.ci_id is not None
    nv = SimNvml(state)  # an epilog that stopped after destroying the compute instance
    nv.nvmlInit()
    h = nv.nvmlDeviceGetHandleByIndex(0)
    gi = nv.nvmlDeviceGetGpuInstanceById(h, m.gi_id)
    ci = nv.nvmlGpuInstanceGetComputeInstanceById(gi, m.ci_id)
    nv.nvmlComputeInstanceDestroy(ci)
    [half] = b.instances(0)
    assert (half.gi_id, half.ci_id, half.uuid) == (m.gi_id, None, None)
    assert b.destroy_instance(0, m.gi_id) is True
    assert b.instances(0) == []


def test_set_mig_mode(sim: tuple[Path, NvmlBackend]) -> None:
    state, b = sim
    assert b.set_mig_mode(1, True) is False  # Ampere: pending until a reset
    g = b.gpu(1)
    assert (g.mig_current, g.mig_pending) == (False, True)
    reset_gpu(state, 1)
    assert b.gpu(1).mig_current is True
    b.create_instance(1, "7g", Placement(0, 8))
    with pytest.raises(InUseError):
        b.set_mig_mode(1, False)
    b.destroy_instance(1, 0)
    assert b.set_mig_mode(2, False) is True  # Hopper: immediate
    assert b.set_mig_mode(2, False) is True


def test_no_permission(tmp_path: Path) -> None:
    create_node(tmp_path / "s", tmp_path / "d", [("A100-SXM4-80GB", True)], admin_uids=[4242])
    with open_backend(f"sim:{tmp_path / 's'}") as b, pytest.raises(NoPermissionError):
        b.create_instance(0, "1g", Placement(0, 1))


def test_gpm_sm_utilisation_per_instance(sim: tuple[Path, NvmlBackend]) -> None:
    state, b = sim
    m = b.create_instance(2, "3g.40gb", Placement(4, 4))
    attach_process(state, 2, m.gi_id, m.ci_id, pid=os.getpid(), used_mib=10, util=80)
    first = b.sm_sample(2, m.gi_id)
    assert first is not None
    time.sleep(0.05)
    second = b.sm_sample(2, m.gi_id)
    assert second is not None
    assert b.sm_utilization(first, second) == pytest.approx(80.0, abs=1.0)
    b.free_sm_sample(first)
    b.free_sm_sample(second)
    assert b.sm_sample(0, None) is None  # Ampere: no GPM


def test_model_not_in_catalogue(tmp_path: Path) -> None:
    odd = SimGpuSpec("A100-SXM4-80GB", True, nvml_name="NVIDIA Mystery", pci_device_id=0x12345678)
    create_node(tmp_path / "s", tmp_path / "d", [odd])
    with open_backend(f"sim:{tmp_path / 's'}") as b:
        assert b.gpu(0).model is None
        with pytest.raises(InvalidRequestError, match="not in the GPU catalogue"):
            b.create_instance(0, "1g", Placement(0, 1))


def test_handles_survive_ctypes_arrays(sim: tuple[Path, NvmlBackend]) -> None:
    # Callers keep handles in ctypes arrays, as with the real library.
    state, b = sim
    b.create_instance(0, "1g", Placement(0, 1))
    nv = SimNvml(state)
    nv.nvmlInit()
    h = nv.nvmlDeviceGetHandleByIndex(0)
    array = (nv.c_nvmlGpuInstance_t * 7)()
    count = ctypes.c_uint()
    nv.nvmlDeviceGetGpuInstances(h, 19, array, ctypes.byref(count))
    assert count.value == 1
    assert nv.nvmlGpuInstanceGetInfo(array[0]).placement.start == 0


# -- opening backends -------------------------------------------------------------------------


def test_open_backend_errors(tmp_path: Path) -> None:
    with pytest.raises(BackendSpecError, match="expected 'nvml' or 'sim:<state dir>'"):
        open_backend("cuda")
    with pytest.raises(BackendSpecError, match="needs a state directory"):
        open_backend("sim:")
    with pytest.raises(BackendUnavailable, match="sim init"):
        open_backend(f"sim:{tmp_path / 'none'}")


def test_real_nvml_without_driver_is_unavailable() -> None:
    if _real_nvml_reason() is None:
        pytest.skip("a real NVIDIA driver is present")
    with pytest.raises(BackendUnavailable, match="no NVIDIA driver/GPU found"):
        open_backend("nvml")


# What the job hooks reach of the GPU layer; Slurm starts a fresh interpreter per hook.
HOOK_PATH_MODULES = (
    "slurmpool.gpu.backend",
    "slurmpool.gpu.nvml",
    "slurmpool.gpu.select",
    "slurmpool.sim.nvml",
    "slurmpool.sim.state",
    "slurmpool.catalogue",
    "slurmpool.placement",
    "slurmpool.state.store",
)


def _modules_after_import(modules: tuple[str, ...]) -> set[str]:
    """``sys.modules`` after importing ``modules`` as the hook wrapper runs Python (-I -S)."""
    import pynvml

    paths = [str(Path(__file__).resolve().parent.parent), os.path.dirname(pynvml.__file__)]
    code = (
        f"import sys; sys.path[:0] = {paths!r}\n"
        + "".join(f"import {m}\n" for m in modules)
        + "print(' '.join(sys.modules))"
    )
    out = subprocess.run(
        [sys.executable, "-I", "-S", "-c", code], capture_output=True, text=True, check=False
    )
    assert out.returncode == 0, out.stderr
    return set(out.stdout.split())


def test_hook_path_imports_no_startup_heavy_module() -> None:
    loaded = _modules_after_import(HOOK_PATH_MODULES)
    heavy = ("dataclasses", "typing", "pathlib", "inspect")
    assert [m for m in heavy if m in loaded] == []


def test_backend_module_does_not_load_the_rest_of_the_package() -> None:
    loaded = _modules_after_import(("slurmpool.gpu.backend",))
    others = ("slurmpool.gpu.nvml", "slurmpool.gpu.select", "slurmpool.gpu.interface")
    assert [m for m in others if m in loaded] == []


def test_backend_modules_stay_cheap_to_import() -> None:
    code = (
        "import sys, slurmpool.gpu, slurmpool.sim.workload; "
        "bad = [m for m in ('pynvml', 'click', 'jinja2', 'yaml') if m in sys.modules]; "
        "print(bad); sys.exit(1 if bad else 0)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert out.returncode == 0, out.stdout + out.stderr
