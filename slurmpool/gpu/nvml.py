"""The NVML backend: :class:`GpuBackend` over a pynvml-compatible module.

``NvmlBackend(nvml)`` receives the module (the real ``pynvml``, or the
simulator's :class:`slurmpool.sim.nvml.SimNvml`); this file never imports
either, and it is the only code in slurmpool that calls NVML.  Everything
it needs (functions, ``NVMLError_*`` classes, ctypes structures, constants)
is taken from that module, so the same code runs on a GPU node and in tests.

Notes on real NVML that shape the code:

- Profiles are looked up by NVML profile INDEX and used by the profile ID
  NVML returns (``.id``), never by a catalogue id.
- GPU instances are enumerated per profile (``nvmlDeviceGetGpuInstances``
  needs the profile id and an array sized by ``instanceCount``).
- MIG device handles (and so MIG UUIDs) come from
  ``nvmlDeviceGetMigDeviceHandleByIndex``, matched to instances by their
  GI/CI ids: ``nvmlComputeInstanceGetInfo(ci).device`` is the parent GPU.
- On MIG-enabled GPUs utilisation is not supported; per-instance processes
  and memory are read on the MIG device handles.
"""

from __future__ import annotations

import contextlib  # pynvml imports it anyway
import ctypes
import os

from slurmpool.catalogue import CatalogueError, default_catalogue
from slurmpool.driver.compute import compute_mode_name
from slurmpool.driver.mig_minors import MIG_MINORS_PATH
from slurmpool.gpu.backend import (
    BackendUnavailable,
    GpuBackendError,
    GpuInfo,
    InUseError,
    InvalidRequestError,
    MemoryInfo,
    MigInstance,
    MigMinorLookup,
    NoPermissionError,
    NoRoomError,
    NotSupportedError,
    ProcessInfo,
    SmSample,
    cpulist,
)
from slurmpool.placement import Placement

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

    from slurmpool.catalogue import Catalogue, GpuModel

_MIB = 1024 * 1024
_NA_UINT = 0xFFFFFFFF
# Full-size compute-instance profile index by GI compute slices (nvml.h
# NVML_COMPUTE_INSTANCE_PROFILE_<N>_SLICE).
_FULL_CI_INDEX = {1: 0, 2: 1, 3: 2, 4: 3, 7: 4, 8: 5, 6: 6}


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def _opt_id(value: int) -> int | None:
    return None if value == _NA_UINT else int(value)


class NvmlBackend:
    """The GPUs of this node through NVML (see the module docstring).

    ``mig_minors_path`` is the driver's capability table
    (``/proc/driver/nvidia-caps/mig-minors``); ``None`` leaves capability
    minors unknown.
    """

    def __init__(
        self,
        nvml: Any,
        *,
        name: str = "nvml",
        mig_minors_path: str | os.PathLike[str] | None = MIG_MINORS_PATH,
        catalogue: Catalogue | None = None,
    ) -> None:
        self._nv = nvml
        self._name = name
        self._minors_path = os.fspath(mig_minors_path) if mig_minors_path is not None else None
        self._minors: MigMinorLookup | None = None
        self._minors_loaded = False
        self._catalogue = catalogue
        self._gi_profiles: dict[int, list[Any]] = {}
        self._open = False
        try:
            nvml.nvmlInit()
        except nvml.NVMLError as e:
            raise BackendUnavailable(
                f"no NVIDIA driver/GPU found: nvmlInit failed: {self._describe(e)}",
                getattr(e, "value", None),
            ) from None
        self._open = True
        self._count = self._call("counting GPUs", nvml.nvmlDeviceGetCount)
        if self._count == 0:
            self.close()
            raise BackendUnavailable("no NVIDIA GPU found: the driver reports 0 GPUs")

    # -- plumbing ----------------------------------------------------------------

    @property
    def name(self) -> str:
        return self._name

    def close(self) -> None:
        if self._open:
            self._open = False
            with contextlib.suppress(self._nv.NVMLError):
                self._nv.nvmlShutdown()

    def __enter__(self) -> NvmlBackend:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _describe(self, e: Exception) -> str:
        code = getattr(e, "value", None)
        label = type(e).__name__.replace("NVMLError_", "")
        return f"{label} (NVML error {code})" if code is not None else str(e)

    def _error(self, e: Exception, what: str) -> GpuBackendError:
        nv = self._nv
        code = getattr(e, "value", None)
        message = f"{what}: {self._describe(e)}"
        if code == nv.NVML_ERROR_INSUFFICIENT_RESOURCES:
            return NoRoomError(message, code)
        if code == nv.NVML_ERROR_IN_USE:
            return InUseError(message, code)
        if code == nv.NVML_ERROR_NOT_SUPPORTED:
            return NotSupportedError(message, code)
        if code == nv.NVML_ERROR_NO_PERMISSION:
            return NoPermissionError(message, code)
        if code in (nv.NVML_ERROR_INVALID_ARGUMENT, nv.NVML_ERROR_NOT_FOUND):
            return InvalidRequestError(message, code)
        if code in (
            nv.NVML_ERROR_UNINITIALIZED,
            nv.NVML_ERROR_DRIVER_NOT_LOADED,
            nv.NVML_ERROR_LIBRARY_NOT_FOUND,
            nv.NVML_ERROR_GPU_IS_LOST,
        ):
            return BackendUnavailable(message, code)
        return GpuBackendError(message, code)

    def _call(self, what: str, fn: Any, *args: Any) -> Any:
        try:
            return fn(*args)
        except self._nv.NVMLError as e:
            raise self._error(e, what) from None

    def _live(self, what: str, fn: Any, *args: Any) -> Any:
        """``fn(*args)`` on an instance handle a scan just got.

        Other jobs' hooks create and destroy instances while this one scans:
        a handle whose instance was destroyed meanwhile answers InvalidArgument
        or NotFound, which here means "gone" (:class:`_Vanished`), not a fault.
        """
        try:
            return fn(*args)
        except self._nv.NVMLError as e:
            if _gone(self._nv, e):
                raise _Vanished(what) from None
            raise self._error(e, what) from None

    def _try(self, fn: Any, *args: Any) -> Any:
        """``fn(*args)``, or None on any NVML error (for optional facts)."""
        try:
            return fn(*args)
        except self._nv.NVMLError:
            return None

    def _handle(self, index: int) -> Any:
        if not 0 <= index < self._count:
            raise InvalidRequestError(f"no GPU {index} on this node (it has {self._count})")
        return self._call(f"GPU {index}", self._nv.nvmlDeviceGetHandleByIndex, index)

    def _models(self) -> Catalogue:
        if self._catalogue is None:
            self._catalogue = default_catalogue()
        return self._catalogue

    def _model(self, handle: Any) -> GpuModel | None:
        name = _text(self._nv.nvmlDeviceGetName(handle))
        pci = self._nv.nvmlDeviceGetPciInfo(handle)
        return self._models().identify(name, int(pci.pciDeviceId))

    def _mig_minors(self) -> MigMinorLookup | None:
        if not self._minors_loaded:
            self._minors_loaded = True
            if self._minors_path is not None:
                try:
                    with open(self._minors_path) as f:
                        self._minors = MigMinorLookup(f.read(), self._minors_path)
                except OSError:
                    return None
        return self._minors

    # -- GPUs --------------------------------------------------------------------

    def driver_version(self) -> str:
        return _text(self._call("driver version", self._nv.nvmlSystemGetDriverVersion))

    def gpus(self) -> list[GpuInfo]:
        return [self.gpu(i) for i in range(self._count)]

    def gpu(self, index: int) -> GpuInfo:
        nv = self._nv
        h = self._handle(index)
        what = f"GPU {index}"
        name = _text(self._call(what, nv.nvmlDeviceGetName, h))
        pci = self._call(what, nv.nvmlDeviceGetPciInfo, h)
        mem = self._call(what, nv.nvmlDeviceGetMemoryInfo, h)
        mode = self._try(nv.nvmlDeviceGetMigMode, h)
        model = self._models().identify(name, int(pci.pciDeviceId))
        return GpuInfo(
            index=index,
            uuid=_text(self._call(what, nv.nvmlDeviceGetUUID, h)),
            name=name,
            model=model.name if model is not None else None,
            memory_total_mib=int(mem.total) // _MIB,
            memory_used_mib=int(mem.used) // _MIB,
            mig_capable=mode is not None,
            mig_current=bool(mode and mode[0]),
            mig_pending=bool(mode and mode[1]),
            minor=int(self._call(what, nv.nvmlDeviceGetMinorNumber, h)),
            pci_bus_id=_text(pci.busId),
            pci_device_id=int(pci.pciDeviceId),
            numa_node=self._numa_node(h),
            cpu_affinity=self._cpu_affinity(h),
        )

    def _numa_node(self, h: Any) -> int | None:
        nv = self._nv
        fn = getattr(nv, "nvmlDeviceGetNumaNodeId", None)
        node = self._try(fn, h) if fn is not None else None
        if node is not None and node >= 0:
            return int(node)
        words = self._try(nv.nvmlDeviceGetMemoryAffinity, h, 4, nv.NVML_AFFINITY_SCOPE_NODE)
        nodes = _bits(words) if words is not None else []
        return nodes[0] if nodes else None

    def _cpu_affinity(self, h: Any) -> str | None:
        size = max(16, -(-(os.cpu_count() or 1) // 64))
        words = self._try(self._nv.nvmlDeviceGetCpuAffinity, h, size)
        cpus = _bits(words) if words is not None else []
        return cpulist(cpus) if cpus else None

    def memory(self, gpu_index: int) -> MemoryInfo:
        mem = self._call(
            f"GPU {gpu_index}", self._nv.nvmlDeviceGetMemoryInfo, self._handle(gpu_index)
        )
        return MemoryInfo(int(mem.total) // _MIB, int(mem.used) // _MIB)

    def utilization(self, gpu_index: int) -> int | None:
        h = self._handle(gpu_index)
        try:
            return int(self._nv.nvmlDeviceGetUtilizationRates(h).gpu)
        except self._nv.NVMLError_NotSupported:
            return None
        except self._nv.NVMLError as e:
            raise self._error(e, f"utilisation of GPU {gpu_index}") from None

    def power_mw(self, gpu_index: int) -> int | None:
        value = self._try(self._nv.nvmlDeviceGetPowerUsage, self._handle(gpu_index))
        return int(value) if value is not None else None

    def energy_mj(self, gpu_index: int) -> int | None:
        fn = getattr(self._nv, "nvmlDeviceGetTotalEnergyConsumption", None)
        value = self._try(fn, self._handle(gpu_index)) if fn is not None else None
        return int(value) if value is not None else None

    def ecc_errors(self, gpu_index: int) -> dict[str, int] | None:
        """Volatile ECC error counts (corrected, uncorrected) since the driver loaded;
        None where ECC counters are not available."""
        nv = self._nv
        h = self._handle(gpu_index)
        fn = getattr(nv, "nvmlDeviceGetTotalEccErrors", None)
        if fn is None:
            return None
        volatile = getattr(nv, "NVML_VOLATILE_ECC", 0)
        corrected = self._try(fn, h, getattr(nv, "NVML_MEMORY_ERROR_TYPE_CORRECTED", 0), volatile)
        uncorrected = self._try(
            fn, h, getattr(nv, "NVML_MEMORY_ERROR_TYPE_UNCORRECTED", 1), volatile
        )
        if corrected is None and uncorrected is None:
            return None
        out = {}
        if corrected is not None:
            out["ecc_corrected"] = int(corrected)
        if uncorrected is not None:
            out["ecc_uncorrected"] = int(uncorrected)
        return out

    def set_mig_mode(self, gpu_index: int, enabled: bool) -> bool:
        nv = self._nv
        h = self._handle(gpu_index)
        mode = nv.NVML_DEVICE_MIG_ENABLE if enabled else nv.NVML_DEVICE_MIG_DISABLE
        what = f"setting MIG mode {'on' if enabled else 'off'} on GPU {gpu_index}"
        self._call(what, nv.nvmlDeviceSetMigMode, h, mode)
        self._gi_profiles.pop(gpu_index, None)
        current, _pending = self._call(what, nv.nvmlDeviceGetMigMode, h)
        return bool(current) == enabled

    def compute_mode(self, gpu_index: int) -> int:
        what = f"the compute mode of GPU {gpu_index}"
        return int(self._call(what, self._nv.nvmlDeviceGetComputeMode, self._handle(gpu_index)))

    def set_compute_mode(self, gpu_index: int, mode: int) -> None:
        what = f"setting compute mode {compute_mode_name(mode)} on GPU {gpu_index}"
        self._call(what, self._nv.nvmlDeviceSetComputeMode, self._handle(gpu_index), int(mode))

    # -- processes ---------------------------------------------------------------

    def processes(self, gpu_index: int, gi_id: int | None = None) -> list[ProcessInfo]:
        nv = self._nv
        h = self._handle(gpu_index)
        mode = self._try(nv.nvmlDeviceGetMigMode, h)
        what = f"processes on GPU {gpu_index}"
        if not (mode and mode[0]):
            if gi_id is not None:
                return []
            return [
                self._process(p, None, None)
                for p in self._call(what, nv.nvmlDeviceGetComputeRunningProcesses, h)
            ]
        out: list[ProcessInfo] = []
        for (g, c), mig in self._mig_devices(h).items():
            if gi_id is None or g == gi_id:
                try:
                    procs = self._live(what, nv.nvmlDeviceGetComputeRunningProcesses, mig)
                except _Vanished:
                    continue
                out.extend(self._process(p, g, c) for p in procs)
        return out

    def _process(self, p: Any, gi_id: int | None, ci_id: int | None) -> ProcessInfo:
        used = getattr(p, "usedGpuMemory", None)
        gi = _opt_id(getattr(p, "gpuInstanceId", _NA_UINT))
        ci = _opt_id(getattr(p, "computeInstanceId", _NA_UINT))
        return ProcessInfo(
            pid=int(p.pid),
            used_memory_mib=int(used) // _MIB if used is not None else None,
            gi_id=gi if gi is not None else gi_id,
            ci_id=ci if ci is not None else ci_id,
        )

    # -- MIG instances -------------------------------------------------------------

    def _profiles(self, gpu_index: int, h: Any) -> list[Any]:
        """GI profile infos supported by a MIG-enabled GPU (cached per GPU)."""
        cached = self._gi_profiles.get(gpu_index)
        if cached is not None:
            return cached
        nv = self._nv
        infos = []
        for index in range(int(getattr(nv, "NVML_GPU_INSTANCE_PROFILE_COUNT", 8))):
            info = self._try(nv.nvmlDeviceGetGpuInstanceProfileInfo, h, index)
            if info is not None:
                infos.append(info)
        self._gi_profiles[gpu_index] = infos
        return infos

    def _gpu_instances(self, gpu_index: int, h: Any) -> list[tuple[Any, Any]]:
        """``(gi handle, gi info)`` of every GPU instance, by GI id."""
        nv = self._nv
        out = []
        for info in self._profiles(gpu_index, h):
            array = (nv.c_nvmlGpuInstance_t * max(1, int(info.instanceCount)))()
            count = ctypes.c_uint(0)
            self._call(
                f"GPU instances of GPU {gpu_index}",
                nv.nvmlDeviceGetGpuInstances,
                h,
                info.id,
                array,
                ctypes.byref(count),
            )
            for i in range(count.value):
                gi = array[i]
                try:
                    out.append((gi, self._live("GPU instance info", nv.nvmlGpuInstanceGetInfo, gi)))
                except _Vanished:
                    continue
        return sorted(out, key=lambda x: int(x[1].id))

    def _compute_instances(self, gi: Any) -> list[tuple[Any, Any]]:
        """``(ci handle, ci info)`` of every compute instance of a GPU instance;
        :class:`_Vanished` when the GPU instance itself is gone."""
        nv = self._nv
        out = []
        shared = nv.NVML_COMPUTE_INSTANCE_ENGINE_PROFILE_SHARED
        for index in range(int(getattr(nv, "NVML_COMPUTE_INSTANCE_PROFILE_COUNT", 8))):
            info = self._try(nv.nvmlGpuInstanceGetComputeInstanceProfileInfo, gi, index, shared)
            if info is None:
                continue
            array = (nv.c_nvmlComputeInstance_t * max(1, int(info.instanceCount)))()
            count = ctypes.c_uint(0)
            self._live(
                "compute instances",
                nv.nvmlGpuInstanceGetComputeInstances,
                gi,
                info.id,
                array,
                ctypes.byref(count),
            )
            for i in range(count.value):
                ci = array[i]
                try:
                    info = self._live("compute instance info", nv.nvmlComputeInstanceGetInfo, ci)
                except _Vanished:
                    continue
                out.append((ci, info))
        return sorted(out, key=lambda x: int(x[1].id))

    def _mig_devices(self, h: Any) -> dict[tuple[int, int], Any]:
        """MIG device handles by ``(gi_id, ci_id)``."""
        nv = self._nv
        out = {}
        count = self._try(nv.nvmlDeviceGetMaxMigDeviceCount, h) or 0
        for i in range(int(count)):
            mig = self._try(nv.nvmlDeviceGetMigDeviceHandleByIndex, h, i)
            if mig is None:
                continue
            try:
                key = (
                    int(self._live("MIG device", nv.nvmlDeviceGetGpuInstanceId, mig)),
                    int(self._live("MIG device", nv.nvmlDeviceGetComputeInstanceId, mig)),
                )
            except _Vanished:
                continue
            out[key] = mig
        return out

    def _mig_enabled(self, h: Any) -> bool:
        mode = self._try(self._nv.nvmlDeviceGetMigMode, h)
        return bool(mode and mode[0])

    def instances(self, gpu_index: int) -> list[MigInstance]:
        h = self._handle(gpu_index)
        if not self._mig_enabled(h):
            return []
        ctx = _Context(self, gpu_index, h)
        out: list[MigInstance] = []
        for gi, gi_info in self._gpu_instances(gpu_index, h):
            try:
                out.extend(ctx.describe(gi, gi_info))
            except _Vanished:
                continue  # destroyed since the list was taken
        return out

    def _instance(self, gpu_index: int, gi_id: int, ci_id: int | None) -> MigInstance:
        h = self._handle(gpu_index)
        gi = self._call(
            f"GPU instance {gi_id} of GPU {gpu_index}",
            self._nv.nvmlDeviceGetGpuInstanceById,
            h,
            gi_id,
        )
        try:
            info = self._live("GPU instance info", self._nv.nvmlGpuInstanceGetInfo, gi)
            found = _Context(self, gpu_index, h).describe(gi, info)
        except _Vanished:
            found = []
        if not found:
            raise InvalidRequestError(f"GPU instance {gi_id} of GPU {gpu_index} is gone")
        return next((m for m in found if m.ci_id == ci_id), found[0])

    def instance_memory(self, gpu_index: int, gi_id: int) -> MemoryInfo:
        for inst in self.instances(gpu_index):
            if inst.gi_id == gi_id:
                return MemoryInfo(inst.memory_total_mib, inst.memory_used_mib)
        raise InvalidRequestError(f"GPU {gpu_index} has no GPU instance {gi_id}")

    def create_instance(self, gpu_index: int, profile: str, placement: Placement) -> MigInstance:
        nv = self._nv
        h = self._handle(gpu_index)
        model = self._model(h)
        if model is None or model.mig is None:
            name = _text(nv.nvmlDeviceGetName(h))
            why = "is not in the GPU catalogue" if model is None else "does not support MIG"
            raise InvalidRequestError(f"GPU {gpu_index} ({name}) {why}: cannot create {profile}")
        try:
            p = model.gi_profile(profile)
        except CatalogueError as e:
            raise InvalidRequestError(str(e)) from None
        if not self._mig_enabled(h):
            raise NotSupportedError(
                f"GPU {gpu_index} is not in MIG mode: cannot create {p.name} "
                "(enable MIG mode first)"
            )
        if (placement.start, placement.size) not in p.placements:
            legal = ", ".join(f"{s}:{n}" for s, n in p.placements)
            raise InvalidRequestError(
                f"placement {placement} is not legal for {p.name} on {model.name}; "
                f"legal placements (start:size): {legal}"
            )
        where = f"{p.name} at {placement} on GPU {gpu_index}"
        info = self._call(
            f"profile {p.name} on GPU {gpu_index}",
            nv.nvmlDeviceGetGpuInstanceProfileInfo,
            h,
            p.nvml_profile_index,
        )
        pl = nv.c_nvmlGpuInstancePlacement_t()
        pl.start, pl.size = placement.start, placement.size
        try:
            gi = nv.nvmlDeviceCreateGpuInstanceWithPlacement(h, info.id, ctypes.byref(pl))
        except nv.NVMLError as e:
            err = self._error(e, f"creating GPU instance {where}")
            if isinstance(err, NoRoomError):
                err = NoRoomError(
                    f"no room for {where}: it overlaps an existing instance", err.code
                )
            raise err from None
        try:
            ci_info = nv.nvmlGpuInstanceGetComputeInstanceProfileInfo(
                gi,
                self._default_ci_index(model, p.slices),
                nv.NVML_COMPUTE_INSTANCE_ENGINE_PROFILE_SHARED,
            )
            ci = nv.nvmlGpuInstanceCreateComputeInstance(gi, ci_info.id)
        except nv.NVMLError as e:
            err = self._error(e, f"creating the compute instance of {where}")
            self._try(nv.nvmlGpuInstanceDestroy, gi)  # do not leave half an instance
            raise err from None
        gi_id = int(self._call("GPU instance info", nv.nvmlGpuInstanceGetInfo, gi).id)
        ci_id = int(self._call("compute instance info", nv.nvmlComputeInstanceGetInfo, ci).id)
        return self._instance(gpu_index, gi_id, ci_id)

    @staticmethod
    def _default_ci_index(model: GpuModel, slices: int) -> int:
        cis = model.require_mig().ci_profiles
        if cis is not None:
            default = next((c for c in cis.get(f"{slices}g", ()) if c.default), None)
            if default is not None:
                return default.nvml_profile_index
        return _FULL_CI_INDEX.get(slices, 0)

    def destroy_instance(self, gpu_index: int, gi_id: int) -> bool:
        nv = self._nv
        h = self._handle(gpu_index)
        if not self._mig_enabled(h):
            return False
        try:
            gi = nv.nvmlDeviceGetGpuInstanceById(h, gi_id)
        except nv.NVMLError_NotFound:
            return False
        except nv.NVMLError as e:
            raise self._error(e, f"GPU instance {gi_id} of GPU {gpu_index}") from None
        try:
            cis = self._compute_instances(gi)
        except _Vanished:
            return False  # destroyed meanwhile by another hook
        for ci, ci_info in cis:
            try:
                nv.nvmlComputeInstanceDestroy(ci)
            except nv.NVMLError as e:
                if _gone(nv, e):
                    continue
                raise self._busy(
                    e, gpu_index, gi_id, f"compute instance {int(ci_info.id)}"
                ) from None
        try:
            nv.nvmlGpuInstanceDestroy(gi)
        except nv.NVMLError as e:
            if _gone(nv, e):
                return False
            raise self._busy(e, gpu_index, gi_id, "GPU instance") from None
        return True

    def _busy(self, e: Exception, gpu_index: int, gi_id: int, what: str) -> GpuBackendError:
        err = self._error(e, f"destroying {what} of GPU instance {gi_id} on GPU {gpu_index}")
        if isinstance(err, InUseError):
            try:
                pids = tuple(p.pid for p in self.processes(gpu_index, gi_id))
            except GpuBackendError:
                pids = ()
            detail = f" by pid {', '.join(map(str, pids))}" if pids else ""
            return InUseError(f"{err} (in use{detail})", err.code, pids)
        return err

    # -- GPM -----------------------------------------------------------------------

    def sm_sample(self, gpu_index: int, gi_id: int | None = None) -> SmSample | None:
        nv = self._nv
        h = self._handle(gpu_index)
        query = getattr(nv, "nvmlGpmQueryDeviceSupport", None)
        support = self._try(query, h) if query is not None else None
        if support is None or not support.isSupportedDevice:
            return None
        sample = self._call("allocating a GPM sample", nv.nvmlGpmSampleAlloc)
        try:
            if gi_id is None:
                nv.nvmlGpmSampleGet(h, sample)
            else:
                nv.nvmlGpmMigSampleGet(h, gi_id, sample)
        except nv.NVMLError as e:
            self._try(nv.nvmlGpmSampleFree, sample)
            if isinstance(e, nv.NVMLError_NotSupported):
                return None
            raise self._error(e, f"GPM sample of GPU {gpu_index}") from None
        return SmSample(gpu_index, gi_id, sample)

    def sm_utilization(self, first: SmSample, second: SmSample) -> float | None:
        nv = self._nv
        if (first.gpu_index, first.gi_id) != (second.gpu_index, second.gi_id):
            raise InvalidRequestError("GPM samples of different devices cannot be compared")
        mg = nv.c_nvmlGpmMetricsGet_t()
        mg.version = nv.NVML_GPM_METRICS_GET_VERSION
        mg.numMetrics = 1
        mg.sample1 = first.handle
        mg.sample2 = second.handle
        mg.metrics[0].metricId = nv.NVML_GPM_METRIC_SM_UTIL
        self._call("GPM metrics", nv.nvmlGpmMetricsGet, mg)
        if mg.metrics[0].nvmlReturn != nv.NVML_SUCCESS:
            return None
        return float(mg.metrics[0].value)

    def free_sm_sample(self, sample: SmSample) -> None:
        self._try(self._nv.nvmlGpmSampleFree, sample.handle)


class _Context:
    """Per-call lookups shared by the instances of one GPU."""

    def __init__(self, backend: NvmlBackend, gpu_index: int, h: Any) -> None:
        self.b = backend
        self.gpu_index = gpu_index
        self.h = h
        self.model = backend._model(h)
        self.minor = int(backend._nv.nvmlDeviceGetMinorNumber(h))
        self.minors = backend._mig_minors()
        self.mig = backend._mig_devices(h)
        self._relists = 0

    # MIG devices are listed by a dense index: a destroy by another hook during the
    # listing shifts the ones after it, so the list can miss a live instance.
    _MAX_RELISTS = 3

    def mig_device(self, gi_id: int, ci_id: int) -> Any:
        """The MIG device handle of a compute instance, None if it has none (any more)."""
        mig = self.mig.get((gi_id, ci_id))
        while mig is None and self._relists < self._MAX_RELISTS:
            self._relists += 1
            self.mig = self.b._mig_devices(self.h)
            mig = self.mig.get((gi_id, ci_id))
        return mig

    def profile_name(self, profile_id: int) -> str:
        if self.model is not None and self.model.mig is not None:
            for p in self.model.mig.gi_profiles:
                if p.profile_id == profile_id:
                    return p.name
        info = self.b._try(self.b._nv.nvmlDeviceGetGpuInstanceProfileInfoById, self.h, profile_id)
        name = _text(getattr(info, "name", b"")) if info is not None else ""
        return name.removeprefix("MIG ") or f"profile-{profile_id}"

    def profile_memory(self, profile_id: int) -> int:
        info = self.b._try(self.b._nv.nvmlDeviceGetGpuInstanceProfileInfoById, self.h, profile_id)
        return int(info.memorySizeMB) if info is not None else 0

    def describe(self, gi: Any, gi_info: Any) -> list[MigInstance]:
        nv = self.b._nv
        gi_id = int(gi_info.id)
        profile_id = int(gi_info.profileId)
        placement = Placement(int(gi_info.placement.start), int(gi_info.placement.size))
        gi_minor = self.minors.gi_minor(self.minor, gi_id) if self.minors else None
        cis = [int(info.id) for _ci, info in self.b._compute_instances(gi)]
        out = []
        ci_ids: list[int | None] = list(cis) or [None]
        for ci_id in ci_ids:
            mig = self.mig_device(gi_id, ci_id) if ci_id is not None else None
            if mig is not None:
                try:
                    mem = self.b._live("MIG device memory", nv.nvmlDeviceGetMemoryInfo, mig)
                    uuid: str | None = _text(self.b._live("MIG UUID", nv.nvmlDeviceGetUUID, mig))
                except _Vanished:
                    continue  # its compute instance was destroyed since the scan began
                total, used = int(mem.total) // _MIB, int(mem.used) // _MIB
            else:
                total, used, uuid = self.profile_memory(profile_id), 0, None
            out.append(
                MigInstance(
                    gpu_index=self.gpu_index,
                    profile=self.profile_name(profile_id),
                    profile_id=profile_id,
                    placement=placement,
                    gi_id=gi_id,
                    ci_id=ci_id,
                    uuid=uuid,
                    gi_minor=gi_minor,
                    ci_minor=self.minors.ci_minor(self.minor, gi_id, ci_id)
                    if self.minors and ci_id is not None
                    else None,
                    memory_total_mib=total,
                    memory_used_mib=used,
                )
            )
        return out


class _Vanished(Exception):
    """An instance a scan listed was destroyed before the scan got to it."""


def _gone(nv: Any, e: Exception) -> bool:
    """Whether an NVML error on an instance handle means the instance is gone."""
    return getattr(e, "value", None) in (nv.NVML_ERROR_INVALID_ARGUMENT, nv.NVML_ERROR_NOT_FOUND)


def _bits(words: Any) -> list[int]:
    """Set bit positions of a ctypes array of 64-bit words."""
    out = []
    for w, word in enumerate(words):
        value = int(word)
        b = 0
        while value:
            if value & 1:
                out.append(w * 64 + b)
            value >>= 1
            b += 1
    return out
