"""A pynvml-compatible NVML simulator.

:class:`SimNvml` is a drop-in for the ``pynvml`` module (nvidia-ml-py) for
everything slurmpool calls: same function names, arguments and return
shapes (ctypes structures from pynvml itself, ``[current, pending]`` lists,
friendly objects for processes), and pynvml's own exception classes
(``NVMLError_InUse``...), so :class:`slurmpool.gpu.nvml.NvmlBackend` runs
the same code on a real GPU and here.  Constants, structures and exception
classes are forwarded from pynvml; an NVML function the simulator does not
implement raises ``NVMLError_FunctionNotFound`` instead of reaching a real
driver.

Handles are ctypes pointers of pynvml's handle types whose address encodes
what they name (a GPU index, or the serial number of a GPU instance,
compute instance or GPM sample).  They are never dereferenced; callers can
store them in ctypes arrays as with the real library.  A handle to a
destroyed instance is stale: using it raises ``NVMLError_InvalidArgument``.

Rules enforced, as on real hardware (``MIG_FACTS.md``):

- MIG mode: ``nvmlDeviceSetMigMode`` sets the pending mode and refuses
  (``IN_USE``) while processes or GPU instances exist.  On Hopper and
  Blackwell the change applies at once (activation status ``SUCCESS``); on
  Ampere it applies on a GPU reset (:func:`slurmpool.sim.node.reset_gpu`,
  ``slurmpool sim reset``) and the activation status is
  ``NVML_ERROR_RESET_REQUIRED``.
- Profiles come from the catalogue; a profile absent on the board, or whose
  profile id the catalogue does not know, is ``NOT_SUPPORTED`` (ids are
  never invented).  Compute-instance profile ids equal their index, as in
  ``nvidia-smi mig -lcip`` output; where the catalogue has no CI profiles
  for a GI size, only the full-size CI profile is offered.
- A GPU instance overlapping another's memory slices, or beyond the
  profile's instance count, is ``INSUFFICIENT_RESOURCES``; a placement not in
  the profile's list is ``INVALID_ARGUMENT``.  ``nvmlDeviceCreateGpuInstance``
  picks placements like the driver does: 1-memory-slice instances fill
  even slots from the top (6, 4, 2, 0, then 5, 3, 1), others first-fit, which
  reproduces the documented ``-cgi 19,19,14,9`` failure.
- GPU instance ids are swizzIds by memory size (full 0, half 1-2, quarter
  3-6, eighth 7-14; lowest free), not by position.
- Destroy a compute instance before its GPU instance; either is ``IN_USE``
  while processes run on it (and a GPU instance while it has compute
  instances).
- Utilisation is ``NOT_SUPPORTED`` on MIG-enabled GPUs and MIG devices.
  GPM (SM utilisation per GPU instance) is supported on Hopper and
  Blackwell only.
- Memory of a MIG device is its profile's ``memory_mib``; where the
  catalogue does not know it, the simulator uses the board's memory times
  the instance's share of memory slices (an estimate, marked
  ``memory_estimated`` in the state).

MIG administration needs one of the node's admin uids (root by default),
else ``NO_PERMISSION``.  MIG device UUIDs are new for every compute instance
created.  ``nvmlComputeInstanceGetInfo(ci).device`` is the parent GPU, as in
``nvml.h``; the MIG device handle comes from
``nvmlDeviceGetMigDeviceHandleByIndex``.
"""

from __future__ import annotations

import ctypes
import os
import time
from contextlib import contextmanager  # pynvml imports it anyway

from slurmpool.catalogue import ComputeInstanceProfile, PartialCatalogue
from slurmpool.driver.compute import COMPUTE_MODES
from slurmpool.driver.pynvml_import import preload_pynvml
from slurmpool.sim import capabilities
from slurmpool.sim.faults import strike
from slurmpool.sim.state import (
    IMMEDIATE_MIG_MODE,
    SimError,
    StateStore,
    energy_mj,
    fold,
    gi_busy,
    gpu_busy,
    gpu_util,
    new_acc,
    power_mw,
)

preload_pynvml()  # the same pynvml as on a real node, loaded the same (light) way
import pynvml  # noqa: E402

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable, Iterator
    from typing import Any

    from slurmpool.catalogue import Catalogue, GpuInstanceProfile, GpuModel
    from slurmpool.sim.state import State

_MIB = 1024 * 1024
_NA_UINT = 0xFFFFFFFF

# Handle kinds, stored in bits 40.. of the handle's address.
_DEVICE, _GI, _CI, _MIG, _GPM = 0x51, 0x52, 0x53, 0x54, 0x55

_ARCH = {
    "volta": pynvml.NVML_DEVICE_ARCH_VOLTA,
    "turing": pynvml.NVML_DEVICE_ARCH_TURING,
    "ampere": pynvml.NVML_DEVICE_ARCH_AMPERE,
    "ada": pynvml.NVML_DEVICE_ARCH_ADA,
    "hopper": pynvml.NVML_DEVICE_ARCH_HOPPER,
    "blackwell": pynvml.NVML_DEVICE_ARCH_BLACKWELL,
}
_COMPUTE_CAPABILITY = {
    "volta": (7, 0),
    "turing": (7, 5),
    "ampere": (8, 0),
    "ada": (8, 9),
    "hopper": (9, 0),
    "blackwell": (10, 0),
}
_GPM_ARCHS = frozenset({"hopper", "blackwell"})
# Full-size compute-instance profile index by compute slices.
_CI_INDEX_BY_SLICES = {1: 0, 2: 1, 3: 2, 4: 3, 7: 4, 8: 5, 6: 6}
# swizzId ranges by the instance's share of the board's memory slices.
_GI_ID_RANGES = {1: range(0, 1), 2: range(1, 3), 4: range(3, 7), 8: range(7, 15)}
# pynvml helpers that are pure Python and safe to forward.
_FORWARDED_HELPERS = frozenset(
    {"nvmlExceptionClass", "nvmlStructToFriendlyObject", "nvmlFriendlyObjectToStruct"}
)


def _uuid5(namespace: str, name: str) -> str:
    """``str(uuid.uuid5(uuid.UUID(namespace), name))`` (RFC 4122 version 5), without
    importing :mod:`uuid` on the hooks' path."""
    try:
        # CPython's built-in SHA-1: hashlib would load OpenSSL (~4 ms) for one digest.
        from _sha1 import sha1  # type: ignore[import-not-found]
    except ImportError:  # other interpreters, or a build without it
        from hashlib import sha1

    ns = bytes.fromhex(namespace.replace("-", ""))
    if len(ns) != 16:
        raise ValueError(f"not a UUID: {namespace!r}")
    b = bytearray(sha1(ns + name.encode()).digest()[:16])
    b[6] = (b[6] & 0x0F) | 0x50
    b[8] = (b[8] & 0x3F) | 0x80
    h = b.hex()
    return f"{h[:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:]}"


def _fail(code: int) -> pynvml.NVMLError:
    return pynvml.NVMLError(code)


def _handle(kind: int, payload: int, ctype: Any) -> Any:
    return ctypes.cast(ctypes.c_void_p((kind << 40) | payload), ctype)


def _decode(handle: Any) -> tuple[int, int]:
    try:
        value = ctypes.cast(handle, ctypes.c_void_p).value
    except (TypeError, ctypes.ArgumentError):
        raise _fail(pynvml.NVML_ERROR_INVALID_ARGUMENT) from None
    if not value:
        raise _fail(pynvml.NVML_ERROR_INVALID_ARGUMENT)
    return value >> 40, value & ((1 << 40) - 1)


def _deref(ref: Any) -> Any:
    """The object behind ``byref(x)``, ``pointer(x)`` or ``x`` itself."""
    if hasattr(ref, "_obj"):
        return ref._obj
    if hasattr(ref, "contents"):
        return ref.contents
    return ref


def _set_count(count_ref: Any, n: int) -> None:
    target = _deref(count_ref)
    if not hasattr(target, "value"):
        raise _fail(pynvml.NVML_ERROR_INVALID_ARGUMENT)
    target.value = n


def _fill(
    array_ref: Any, items: list[Any], count_ref: Any, put: Callable[[Any, int, Any], None]
) -> None:
    """Fill a caller's ctypes array like NVML: ``None`` asks for the count only."""
    _set_count(count_ref, len(items))
    if array_ref is None:
        return
    array = _deref(array_ref)
    if len(array) < len(items):
        raise _fail(pynvml.NVML_ERROR_INSUFFICIENT_SIZE)
    for i, item in enumerate(items):
        put(array, i, item)


def _mask(start: int, size: int) -> int:
    return ((1 << size) - 1) << start


def _occupied(gpu: State) -> int:
    occ = 0
    for gi in gpu["gis"]:
        occ |= _mask(gi["start"], gi["size"])
    return occ


def _gi_id_range(memory_slices: int, total: int) -> range:
    share = max(1, total // max(1, memory_slices))
    while share not in _GI_ID_RANGES and share < 8:
        share += 1
    return _GI_ID_RANGES.get(share, _GI_ID_RANGES[8])


def _ci_slices(ci: ComputeInstanceProfile, gi_slices: int) -> int:
    digits = ci.name.rstrip("cg")
    return int(digits) if digits.isdigit() else gi_slices


def _cpu_mask(cpulist: str) -> set[int]:
    cpus: set[int] = set()
    for part in cpulist.split(","):
        lo, _, hi = part.partition("-")
        cpus.update(range(int(lo), int(hi or lo) + 1))
    return cpus


class SimNvml:
    """The simulated NVML library of one simulated node (see the module docstring)."""

    def __init__(self, state_dir: str | os.PathLike[str]) -> None:
        self.state_dir = os.fspath(state_dir)
        self._store = StateStore(state_dir)
        self._init_count = 0
        self._catalogue: Catalogue | None = None
        self._gpm: dict[int, tuple[tuple[int, ...], float, float] | None] = {}
        self._gpm_next = 1

    def __repr__(self) -> str:
        return f"SimNvml({self.state_dir!r})"

    def __getattr__(self, name: str) -> Any:
        # Constants, structures and NVMLError_* classes come from pynvml; NVML
        # functions the simulator lacks must never reach a real driver.
        if name.startswith("nvml") and name not in _FORWARDED_HELPERS:

            def missing(*args: Any, **kwargs: Any) -> Any:
                raise _fail(pynvml.NVML_ERROR_FUNCTION_NOT_FOUND)

            missing.__name__ = name
            return missing
        return getattr(pynvml, name)

    @property
    def mig_minors_path(self) -> str | None:
        """Where this node's ``mig-minors`` file is (None if the node does not exist)."""
        try:
            return str(self._store.read()["mig_minors_path"])
        except SimError:
            return None

    # -- internals -------------------------------------------------------------

    def _state(self) -> State:
        if self._init_count <= 0:
            raise _fail(pynvml.NVML_ERROR_UNINITIALIZED)
        try:
            return self._store.read()
        except SimError:
            raise _fail(pynvml.NVML_ERROR_GPU_IS_LOST) from None

    @contextmanager
    def _admin(self) -> Iterator[State]:
        """A state transaction for MIG administration (admin uids only)."""
        st = self._state()
        if os.geteuid() not in st["admin_uids"]:
            raise _fail(pynvml.NVML_ERROR_NO_PERMISSION)
        with self._store.transaction() as fresh:
            before = capabilities.wanted_access(fresh)
            yield fresh
            # The driver's capability access files follow its instances.
            capabilities.update_access_files(before, fresh)

    def _models(self) -> Catalogue:
        if self._catalogue is None:
            st = self._store.read()
            # Only this node's models' files: the rest load if a lookup needs them.
            self._catalogue = PartialCatalogue(
                [g["model"] for g in st["gpus"]], st.get("catalogue_dir") or None
            )
        return self._catalogue

    def _model(self, gpu: State) -> GpuModel:
        return self._models().get(gpu["model"])

    def _gpu(
        self, st: State, handle: Any, mig_code: int = pynvml.NVML_ERROR_INVALID_ARGUMENT
    ) -> State:
        """The GPU of a device handle; ``mig_code`` is raised for a MIG device handle."""
        kind, payload = _decode(handle)
        if kind == _MIG:
            self._find_ci(st, payload)
            raise _fail(mig_code)
        if kind != _DEVICE or payload >= len(st["gpus"]):
            raise _fail(pynvml.NVML_ERROR_INVALID_ARGUMENT)
        gpu: State = st["gpus"][payload]
        return gpu

    def _device(self, st: State, handle: Any) -> tuple[State, State | None, State | None]:
        """``(gpu, gi, ci)`` of a GPU handle (gi, ci None) or a MIG device handle."""
        kind, payload = _decode(handle)
        if kind == _MIG:
            return self._find_ci(st, payload)
        return self._gpu(st, handle), None, None

    def _mig_gpu(self, st: State, handle: Any) -> State:
        """A GPU handle whose GPU is in MIG mode, else NOT_SUPPORTED."""
        gpu = self._gpu(st, handle)
        if not gpu["mig_current"]:
            raise _fail(pynvml.NVML_ERROR_NOT_SUPPORTED)
        return gpu

    def _find_gi(self, st: State, serial: int) -> tuple[State, State]:
        for gpu in st["gpus"]:
            for gi in gpu["gis"]:
                if gi["serial"] == serial:
                    return gpu, gi
        raise _fail(pynvml.NVML_ERROR_INVALID_ARGUMENT)

    def _find_ci(self, st: State, serial: int) -> tuple[State, State, State]:
        for gpu in st["gpus"]:
            for gi in gpu["gis"]:
                for ci in gi["cis"]:
                    if ci["serial"] == serial:
                        return gpu, gi, ci
        raise _fail(pynvml.NVML_ERROR_INVALID_ARGUMENT)

    def _gi_handle_arg(self, st: State, handle: Any) -> tuple[State, State]:
        kind, payload = _decode(handle)
        if kind != _GI:
            raise _fail(pynvml.NVML_ERROR_INVALID_ARGUMENT)
        return self._find_gi(st, payload)

    def _ci_handle_arg(self, st: State, handle: Any) -> tuple[State, State, State]:
        kind, payload = _decode(handle)
        if kind != _CI:
            raise _fail(pynvml.NVML_ERROR_INVALID_ARGUMENT)
        return self._find_ci(st, payload)

    def _gi_profile(
        self, gpu: State, *, index: int | None = None, pid: int | None = None
    ) -> GpuInstanceProfile:
        geo = self._model(gpu).mig
        if geo is None:
            raise _fail(pynvml.NVML_ERROR_NOT_SUPPORTED)
        for p in geo.gi_profiles:
            if p.profile_id is None:
                continue  # the catalogue does not know its id: never invent one
            if (index is not None and p.nvml_profile_index == index) or (
                pid is not None and p.profile_id == pid
            ):
                return p
        raise _fail(pynvml.NVML_ERROR_NOT_SUPPORTED)

    def _gi_profile_by_id(self, gpu: State, profile_id: int) -> GpuInstanceProfile:
        try:
            return self._gi_profile(gpu, pid=profile_id)
        except pynvml.NVMLError_NotSupported:
            raise _fail(pynvml.NVML_ERROR_INVALID_ARGUMENT) from None

    def _gi_memory(self, gpu: State, p: GpuInstanceProfile) -> tuple[int, bool]:
        """Memory of a GPU instance in MiB and whether it is a simulator estimate."""
        if p.memory_mib is not None:
            return p.memory_mib, False
        return gpu["memory_mib"] * p.memory_slices // gpu["memory_slices"], True

    def _ci_profiles(self, gpu: State, gi: State) -> list[ComputeInstanceProfile]:
        geo = self._model(gpu).require_mig()
        key = f"{gi['slices']}g"
        if geo.ci_profiles and key in geo.ci_profiles:
            return list(geo.ci_profiles[key])
        # Every GI supports one compute instance spanning all of it.
        index = _CI_INDEX_BY_SLICES.get(gi["slices"])
        if index is None:
            return []
        return [ComputeInstanceProfile(f"{gi['slices']}c", index, 1, True)]

    def _ci_profile(
        self, gpu: State, gi: State, *, index: int | None = None, pid: int | None = None
    ) -> ComputeInstanceProfile:
        for c in self._ci_profiles(gpu, gi):
            # CI profile ids equal their index (nvidia-smi mig -lcip).
            if c.nvml_profile_index in (index, pid):
                return c
        raise _fail(pynvml.NVML_ERROR_NOT_SUPPORTED)

    def _serial(self, st: State) -> int:
        n: int = st["next_serial"]
        st["next_serial"] = n + 1
        return n

    def _mig_devices(self, gpu: State) -> list[tuple[State, State]]:
        return [
            (gi, ci)
            for gi in sorted(gpu["gis"], key=lambda g: g["id"])
            for ci in sorted(gi["cis"], key=lambda c: c["id"])
        ]

    def _processes_on(self, gpu: State, gi: State | None, ci: State | None) -> list[State]:
        if gi is None:
            return list(gpu["processes"])
        return [
            p
            for p in gpu["processes"]
            if p["gi"] == gi["id"] and (ci is None or p["ci"] == ci["id"])
        ]

    # -- init --------------------------------------------------------------------

    def nvmlInit(self) -> None:
        self.nvmlInitWithFlags(0)

    def nvmlInitWithFlags(self, flags: int) -> None:
        if not self._store.exists():
            raise _fail(pynvml.NVML_ERROR_DRIVER_NOT_LOADED)
        self._init_count += 1

    def nvmlShutdown(self) -> None:
        if self._init_count <= 0:
            raise _fail(pynvml.NVML_ERROR_UNINITIALIZED)
        self._init_count -= 1

    def nvmlErrorString(self, result: int) -> str:
        return str(pynvml.NVMLError._errcode_to_string.get(result, f"NVML error {result}"))

    # -- system ------------------------------------------------------------------

    def nvmlSystemGetDriverVersion(self) -> str:
        return str(self._state()["driver_version"])

    def nvmlSystemGetNVMLVersion(self) -> str:
        st = self._state()
        return f"{st['cuda_version'] // 1000}.{st['driver_version']}"

    def nvmlSystemGetCudaDriverVersion(self) -> int:
        return int(self._state()["cuda_version"])

    nvmlSystemGetCudaDriverVersion_v2 = nvmlSystemGetCudaDriverVersion

    # -- devices -----------------------------------------------------------------

    def nvmlDeviceGetCount(self) -> int:
        return len(self._state()["gpus"])

    def nvmlDeviceGetHandleByIndex(self, index: int) -> Any:
        st = self._state()
        if not isinstance(index, int) or not 0 <= index < len(st["gpus"]):
            raise _fail(pynvml.NVML_ERROR_INVALID_ARGUMENT)
        return _handle(_DEVICE, index, pynvml.c_nvmlDevice_t)

    def nvmlDeviceGetHandleByUUID(self, uuid_: str | bytes) -> Any:
        text = uuid_.decode() if isinstance(uuid_, bytes) else uuid_
        for gpu in self._state()["gpus"]:
            if gpu["uuid"] == text:
                return _handle(_DEVICE, gpu["index"], pynvml.c_nvmlDevice_t)
            for _gi, ci in self._mig_devices(gpu):
                if ci["uuid"] == text:
                    return _handle(_MIG, ci["serial"], pynvml.c_nvmlDevice_t)
        raise _fail(pynvml.NVML_ERROR_NOT_FOUND)

    def nvmlDeviceGetHandleByPciBusId(self, bus_id: str | bytes) -> Any:
        text = (bus_id.decode() if isinstance(bus_id, bytes) else bus_id).upper()
        for gpu in self._state()["gpus"]:
            if text in (f"{0:08X}:{gpu['bus']:02X}:00.0", f"{0:04X}:{gpu['bus']:02X}:00.0"):
                return _handle(_DEVICE, gpu["index"], pynvml.c_nvmlDevice_t)
        raise _fail(pynvml.NVML_ERROR_NOT_FOUND)

    def nvmlDeviceGetName(self, handle: Any) -> str:
        gpu, gi, ci = self._device(self._state(), handle)
        if gi is None or ci is None:
            return str(gpu["name"])
        prefix = "" if ci["slices"] == gi["slices"] else f"{ci['slices']}c."
        return f"{gpu['name']} MIG {prefix}{gi['profile']}"

    def nvmlDeviceGetUUID(self, handle: Any) -> str:
        gpu, _gi, ci = self._device(self._state(), handle)
        return str(ci["uuid"] if ci is not None else gpu["uuid"])

    def nvmlDeviceGetSerial(self, handle: Any) -> str:
        return str(self._gpu(self._state(), handle, pynvml.NVML_ERROR_NOT_SUPPORTED)["serial"])

    def nvmlDeviceGetIndex(self, handle: Any) -> int:
        return int(self._gpu(self._state(), handle, pynvml.NVML_ERROR_NOT_SUPPORTED)["index"])

    def nvmlDeviceGetMinorNumber(self, handle: Any) -> int:
        return int(self._gpu(self._state(), handle, pynvml.NVML_ERROR_NOT_SUPPORTED)["minor"])

    def nvmlDeviceGetPciInfo(self, handle: Any) -> Any:
        gpu, _gi, _ci = self._device(self._state(), handle)
        info = pynvml.nvmlPciInfo_t()
        info.busIdLegacy = f"{0:04X}:{gpu['bus']:02X}:00.0".encode()
        info.busId = f"{0:08X}:{gpu['bus']:02X}:00.0".encode()
        info.domain = 0
        info.bus = gpu["bus"]
        info.device = 0
        info.pciDeviceId = gpu["pci_device_id"]
        info.pciSubSystemId = 0
        return info

    nvmlDeviceGetPciInfo_v3 = nvmlDeviceGetPciInfo

    def nvmlDeviceGetArchitecture(self, handle: Any) -> int:
        gpu, _gi, _ci = self._device(self._state(), handle)
        return int(_ARCH.get(gpu["arch"], pynvml.NVML_DEVICE_ARCH_UNKNOWN))

    def nvmlDeviceGetCudaComputeCapability(self, handle: Any) -> tuple[int, int]:
        gpu, _gi, _ci = self._device(self._state(), handle)
        return _COMPUTE_CAPABILITY.get(gpu["arch"], (0, 0))

    def nvmlDeviceGetNumaNodeId(self, handle: Any) -> int:
        return int(self._gpu(self._state(), handle, pynvml.NVML_ERROR_NOT_SUPPORTED)["numa_node"])

    def nvmlDeviceGetCpuAffinity(self, handle: Any, cpuSetSize: int) -> Any:
        gpu = self._gpu(self._state(), handle, pynvml.NVML_ERROR_NOT_SUPPORTED)
        words = (ctypes.c_ulonglong * cpuSetSize)()
        for cpu in _cpu_mask(gpu["cpus"]):
            if cpu // 64 < cpuSetSize:
                words[cpu // 64] |= 1 << (cpu % 64)
        return words

    def nvmlDeviceGetCpuAffinityWithinScope(self, handle: Any, cpuSetSize: int, scope: int) -> Any:
        return self.nvmlDeviceGetCpuAffinity(handle, cpuSetSize)

    def nvmlDeviceGetMemoryAffinity(self, handle: Any, nodeSetSize: int, scope: int) -> Any:
        gpu = self._gpu(self._state(), handle, pynvml.NVML_ERROR_NOT_SUPPORTED)
        words = (ctypes.c_ulonglong * nodeSetSize)()
        node = gpu["numa_node"]
        if node // 64 < nodeSetSize:
            words[node // 64] = 1 << (node % 64)
        return words

    def nvmlDeviceGetMemoryInfo(self, handle: Any, version: int | None = None) -> Any:
        gpu, gi, _ci = self._device(self._state(), handle)
        if gi is None:
            total = gpu["memory_mib"]
            used = sum(p["used_mib"] for p in gpu["processes"])
        else:
            total = gi["memory_mib"]
            used = sum(p["used_mib"] for p in self._processes_on(gpu, gi, None))
        mem = pynvml.c_nvmlMemory_v2_t() if version else pynvml.c_nvmlMemory_t()
        if version:
            mem.version = version
        mem.total = total * _MIB
        mem.used = used * _MIB
        mem.free = (total - used) * _MIB
        return mem

    def nvmlDeviceGetUtilizationRates(self, handle: Any) -> Any:
        gpu = self._gpu(self._state(), handle, pynvml.NVML_ERROR_NOT_SUPPORTED)
        if gpu["mig_current"]:
            raise _fail(pynvml.NVML_ERROR_NOT_SUPPORTED)
        util = pynvml.c_nvmlUtilization_t()
        util.gpu = gpu_util(gpu)
        util.memory = util.gpu  # the simulator does not model memory bandwidth apart
        return util

    def nvmlDeviceGetComputeRunningProcesses(self, handle: Any) -> list[Any]:
        gpu, gi, ci = self._device(self._state(), handle)
        out = []
        for p in self._processes_on(gpu, gi, ci):
            info = pynvml.c_nvmlProcessInfo_v3_t()
            info.pid = p["pid"]
            info.usedGpuMemory = p["used_mib"] * _MIB
            info.gpuInstanceId = _NA_UINT if p["gi"] is None else p["gi"]
            info.computeInstanceId = _NA_UINT if p["ci"] is None else p["ci"]
            out.append(pynvml.nvmlStructToFriendlyObject(info))
        return out

    nvmlDeviceGetComputeRunningProcesses_v2 = nvmlDeviceGetComputeRunningProcesses
    nvmlDeviceGetComputeRunningProcesses_v3 = nvmlDeviceGetComputeRunningProcesses

    def nvmlDeviceGetGraphicsRunningProcesses(self, handle: Any) -> list[Any]:
        self._device(self._state(), handle)
        return []

    def nvmlDeviceGetPowerUsage(self, handle: Any) -> int:
        return power_mw(self._gpu(self._state(), handle, pynvml.NVML_ERROR_NOT_SUPPORTED))

    def nvmlDeviceGetTotalEnergyConsumption(self, handle: Any) -> int:
        gpu = self._gpu(self._state(), handle, pynvml.NVML_ERROR_NOT_SUPPORTED)
        return energy_mj(gpu, time.time())

    # -- MIG mode ----------------------------------------------------------------

    def nvmlDeviceGetMigMode(self, handle: Any) -> list[int]:
        gpu = self._gpu(self._state(), handle, pynvml.NVML_ERROR_NOT_SUPPORTED)
        if not gpu["mig_capable"]:
            raise _fail(pynvml.NVML_ERROR_NOT_SUPPORTED)
        return [int(gpu["mig_current"]), int(gpu["mig_pending"])]

    def nvmlDeviceGetComputeMode(self, handle: Any) -> int:
        gpu = self._gpu(self._state(), handle, pynvml.NVML_ERROR_INVALID_ARGUMENT)
        return int(gpu.get("compute_mode", pynvml.NVML_COMPUTEMODE_DEFAULT))

    def nvmlDeviceSetComputeMode(self, handle: Any, mode: int) -> None:
        """Root only, as nvml.h says; EXCLUSIVE_THREAD is no longer supported.  The mode
        binds contexts created from now on (:func:`slurmpool.sim.processes.attach_process`)."""
        st = self._state()
        gpu = self._gpu(st, handle, pynvml.NVML_ERROR_INVALID_ARGUMENT)
        if mode == pynvml.NVML_COMPUTEMODE_EXCLUSIVE_THREAD:
            raise _fail(pynvml.NVML_ERROR_NOT_SUPPORTED)
        if mode not in COMPUTE_MODES:
            raise _fail(pynvml.NVML_ERROR_INVALID_ARGUMENT)
        with self._admin() as st:
            st["gpus"][gpu["index"]]["compute_mode"] = int(mode)

    def nvmlDeviceSetMigMode(self, handle: Any, mode: int) -> int:
        st = self._state()
        gpu = self._gpu(st, handle, pynvml.NVML_ERROR_NOT_SUPPORTED)
        if not gpu["mig_capable"]:
            raise _fail(pynvml.NVML_ERROR_NOT_SUPPORTED)
        if mode not in (pynvml.NVML_DEVICE_MIG_DISABLE, pynvml.NVML_DEVICE_MIG_ENABLE):
            raise _fail(pynvml.NVML_ERROR_INVALID_ARGUMENT)
        with self._admin() as st:
            gpu = st["gpus"][gpu["index"]]
            want = bool(mode)
            if gpu["mig_current"] == want and gpu["mig_pending"] == want:
                return int(pynvml.NVML_SUCCESS)
            if gpu["processes"] or gpu["gis"]:
                raise _fail(pynvml.NVML_ERROR_IN_USE)
            fold(gpu, time.time())
            gpu["mig_pending"] = want
            if gpu["arch"] in IMMEDIATE_MIG_MODE or gpu["mig_current"] == want:
                gpu["mig_current"] = want
                return int(pynvml.NVML_SUCCESS)
            return int(pynvml.NVML_ERROR_RESET_REQUIRED)

    # -- GPU instance profiles -----------------------------------------------------

    def _gi_profile_info(self, gpu: State, p: GpuInstanceProfile, version: int) -> Any:
        if version == 2:
            info = pynvml.c_nvmlGpuInstanceProfileInfo_v2_t()
            info.name = f"MIG {p.name}".encode()
        elif version == 1:
            info = pynvml.c_nvmlGpuInstanceProfileInfo_t()
        else:
            raise _fail(pynvml.NVML_ERROR_FUNCTION_NOT_FOUND)
        info.id = p.profile_id
        info.isP2pSupported = 0
        info.sliceCount = p.slices
        info.instanceCount = p.max_count
        info.memorySizeMB = self._gi_memory(gpu, p)[0]
        return info

    def nvmlDeviceGetGpuInstanceProfileInfo(
        self, handle: Any, profile: int, version: int = 2
    ) -> Any:
        gpu = self._mig_gpu(self._state(), handle)
        if not 0 <= profile < pynvml.NVML_GPU_INSTANCE_PROFILE_COUNT:
            raise _fail(pynvml.NVML_ERROR_INVALID_ARGUMENT)
        return self._gi_profile_info(gpu, self._gi_profile(gpu, index=profile), version)

    nvmlDeviceGetGpuInstanceProfileInfoV = nvmlDeviceGetGpuInstanceProfileInfo

    def nvmlDeviceGetGpuInstanceProfileInfoById(self, handle: Any, profileId: int) -> Any:
        gpu = self._mig_gpu(self._state(), handle)
        return self._gi_profile_info(gpu, self._gi_profile(gpu, pid=profileId), 2)

    nvmlDeviceGetGpuInstanceProfileInfoByIdV = nvmlDeviceGetGpuInstanceProfileInfoById

    def nvmlDeviceGetGpuInstancePossiblePlacements(
        self, handle: Any, profileId: int, placementsRef: Any, countRef: Any
    ) -> int:
        gpu = self._mig_gpu(self._state(), handle)
        p = self._gi_profile_by_id(gpu, profileId)

        def put(array: Any, i: int, pl: tuple[int, int]) -> None:
            array[i].start, array[i].size = pl

        _fill(placementsRef, list(p.placements), countRef, put)
        return int(pynvml.NVML_SUCCESS)

    def nvmlDeviceGetGpuInstanceRemainingCapacity(self, handle: Any, profileId: int) -> int:
        gpu = self._mig_gpu(self._state(), handle)
        p = self._gi_profile_by_id(gpu, profileId)
        occ = _occupied(gpu)
        existing = sum(1 for gi in gpu["gis"] if gi["profile_id"] == p.profile_id)
        # A profile's placements never overlap each other, so free ones all fit at once.
        free = sum(1 for s, n in p.placements if not _mask(s, n) & occ)
        return max(0, min(free, p.max_count - existing))

    # -- GPU instances -------------------------------------------------------------

    def _create_gi(self, handle: Any, profile_id: int, placement: tuple[int, int] | None) -> Any:
        gpu = self._mig_gpu(self._state(), handle)
        p = self._gi_profile_by_id(gpu, profile_id)
        if placement is not None and placement not in p.placements:
            raise _fail(pynvml.NVML_ERROR_INVALID_ARGUMENT)
        with self._admin() as st:
            gpu = st["gpus"][gpu["index"]]
            if not gpu["mig_current"]:
                raise _fail(pynvml.NVML_ERROR_NOT_SUPPORTED)
            if sum(1 for gi in gpu["gis"] if gi["profile_id"] == p.profile_id) >= p.max_count:
                raise _fail(pynvml.NVML_ERROR_INSUFFICIENT_RESOURCES)
            occ = _occupied(gpu)
            if placement is None:
                placement = _driver_placement(p, occ)
            if placement is None or _mask(*placement) & occ:
                raise _fail(pynvml.NVML_ERROR_INSUFFICIENT_RESOURCES)
            used_ids = {gi["id"] for gi in gpu["gis"]}
            gi_id = next(
                (
                    i
                    for i in _gi_id_range(p.memory_slices, gpu["memory_slices"])
                    if i not in used_ids
                ),
                None,
            )
            if gi_id is None:
                raise _fail(pynvml.NVML_ERROR_INSUFFICIENT_RESOURCES)
            now = time.time()
            fold(gpu, now)
            memory, estimated = self._gi_memory(gpu, p)
            serial = self._serial(st)
            gpu["gis"].append(
                {
                    "serial": serial,
                    "id": gi_id,
                    "profile": p.name,
                    "profile_id": p.profile_id,
                    "start": placement[0],
                    "size": placement[1],
                    "slices": p.slices,
                    "memory_mib": memory,
                    "memory_estimated": estimated,
                    "cis": [],
                    "acc": new_acc(now),
                }
            )
        return _handle(_GI, serial, pynvml.c_nvmlGpuInstance_t)

    def nvmlDeviceCreateGpuInstanceWithPlacement(
        self, handle: Any, profileId: int, placement: Any
    ) -> Any:
        name = "nvmlDeviceCreateGpuInstanceWithPlacement"
        strike(self.state_dir, "before", name)
        pl = _deref(placement)
        try:
            start, size = int(pl.start), int(pl.size)
        except (AttributeError, TypeError):
            raise _fail(pynvml.NVML_ERROR_INVALID_ARGUMENT) from None
        gi = self._create_gi(handle, profileId, (start, size))
        strike(self.state_dir, "after", name)
        return gi

    def nvmlDeviceCreateGpuInstance(self, handle: Any, profileId: int) -> Any:
        return self._create_gi(handle, profileId, None)

    def nvmlDeviceGetGpuInstances(
        self, handle: Any, profileId: int, gpuInstancesRef: Any, countRef: Any
    ) -> int:
        gpu = self._mig_gpu(self._state(), handle)
        p = self._gi_profile_by_id(gpu, profileId)
        gis = sorted(
            (gi for gi in gpu["gis"] if gi["profile_id"] == p.profile_id), key=lambda g: g["id"]
        )

        def put(array: Any, i: int, gi: State) -> None:
            array[i] = _handle(_GI, gi["serial"], pynvml.c_nvmlGpuInstance_t)

        _fill(gpuInstancesRef, gis, countRef, put)
        return int(pynvml.NVML_SUCCESS)

    def nvmlDeviceGetGpuInstanceById(self, handle: Any, gpuInstanceId: int) -> Any:
        gpu = self._mig_gpu(self._state(), handle)
        for gi in gpu["gis"]:
            if gi["id"] == gpuInstanceId:
                return _handle(_GI, gi["serial"], pynvml.c_nvmlGpuInstance_t)
        raise _fail(pynvml.NVML_ERROR_NOT_FOUND)

    def nvmlGpuInstanceGetInfo(self, gpuInstance: Any) -> Any:
        gpu, gi = self._gi_handle_arg(self._state(), gpuInstance)
        info = pynvml.c_nvmlGpuInstanceInfo_t()
        info.device = _handle(_DEVICE, gpu["index"], pynvml.c_nvmlDevice_t)
        info.id = gi["id"]
        info.profileId = gi["profile_id"]
        info.placement.start = gi["start"]
        info.placement.size = gi["size"]
        return info

    def nvmlGpuInstanceDestroy(self, gpuInstance: Any) -> int:
        gpu, gi = self._gi_handle_arg(self._state(), gpuInstance)
        with self._admin() as st:
            gpu, gi = self._find_gi(st, gi["serial"])
            if gi["cis"] or self._processes_on(gpu, gi, None):
                raise _fail(pynvml.NVML_ERROR_IN_USE)
            fold(gpu, time.time())
            gpu["gis"] = [g for g in gpu["gis"] if g["serial"] != gi["serial"]]
        strike(self.state_dir, "after", "nvmlGpuInstanceDestroy")
        return int(pynvml.NVML_SUCCESS)

    # -- compute instances ---------------------------------------------------------

    def nvmlGpuInstanceGetComputeInstanceProfileInfo(
        self, gpuInstance: Any, profile: int, engProfile: int, version: int = 2
    ) -> Any:
        gpu, gi = self._gi_handle_arg(self._state(), gpuInstance)
        if engProfile != pynvml.NVML_COMPUTE_INSTANCE_ENGINE_PROFILE_SHARED or not (
            0 <= profile < pynvml.NVML_COMPUTE_INSTANCE_PROFILE_COUNT
        ):
            raise _fail(pynvml.NVML_ERROR_INVALID_ARGUMENT)
        c = self._ci_profile(gpu, gi, index=profile)
        if version == 2:
            info = pynvml.c_nvmlComputeInstanceProfileInfo_v2_t()
            slices = _ci_slices(c, gi["slices"])
            prefix = "" if slices == gi["slices"] else f"{slices}c."
            info.name = f"MIG {prefix}{gi['profile']}".encode()
        elif version == 1:
            info = pynvml.c_nvmlComputeInstanceProfileInfo_t()
        else:
            raise _fail(pynvml.NVML_ERROR_FUNCTION_NOT_FOUND)
        info.id = c.nvml_profile_index
        info.sliceCount = _ci_slices(c, gi["slices"])
        info.instanceCount = c.max_count
        return info

    nvmlGpuInstanceGetComputeInstanceProfileInfoV = nvmlGpuInstanceGetComputeInstanceProfileInfo

    def nvmlGpuInstanceGetComputeInstanceRemainingCapacity(
        self, gpuInstance: Any, profileId: int
    ) -> int:
        gpu, gi = self._gi_handle_arg(self._state(), gpuInstance)
        c = self._ci_profile(gpu, gi, pid=profileId)
        return len(_ci_free_starts(gi, c))

    def nvmlGpuInstanceCreateComputeInstance(self, gpuInstance: Any, profileId: int) -> Any:
        st = self._state()
        gpu, gi = self._gi_handle_arg(st, gpuInstance)
        try:
            c = self._ci_profile(gpu, gi, pid=profileId)
        except pynvml.NVMLError_NotSupported:
            raise _fail(pynvml.NVML_ERROR_INVALID_ARGUMENT) from None
        with self._admin() as st:
            gpu, gi = self._find_gi(st, gi["serial"])
            starts = _ci_free_starts(gi, c)
            if not starts:
                raise _fail(pynvml.NVML_ERROR_INSUFFICIENT_RESOURCES)
            used = {ci["id"] for ci in gi["cis"]}
            ci_id = next(i for i in range(8) if i not in used)
            serial = self._serial(st)
            gi["cis"].append(
                {
                    "serial": serial,
                    "id": ci_id,
                    "profile_id": c.nvml_profile_index,
                    "slices": _ci_slices(c, gi["slices"]),
                    "start": starts[0],
                    "uuid": "MIG-" + _uuid5(gpu["uuid"][4:], f"{gi['id']}/{ci_id}/{serial}"),
                }
            )
        strike(self.state_dir, "after", "nvmlGpuInstanceCreateComputeInstance")
        return _handle(_CI, serial, pynvml.c_nvmlComputeInstance_t)

    def nvmlGpuInstanceGetComputeInstances(
        self, gpuInstance: Any, profileId: int, computeInstancesRef: Any, countRef: Any
    ) -> int:
        gpu, gi = self._gi_handle_arg(self._state(), gpuInstance)
        try:
            c = self._ci_profile(gpu, gi, pid=profileId)
        except pynvml.NVMLError_NotSupported:
            raise _fail(pynvml.NVML_ERROR_INVALID_ARGUMENT) from None
        cis = sorted(
            (ci for ci in gi["cis"] if ci["profile_id"] == c.nvml_profile_index),
            key=lambda x: x["id"],
        )

        def put(array: Any, i: int, ci: State) -> None:
            array[i] = _handle(_CI, ci["serial"], pynvml.c_nvmlComputeInstance_t)

        _fill(computeInstancesRef, cis, countRef, put)
        return int(pynvml.NVML_SUCCESS)

    def nvmlGpuInstanceGetComputeInstanceById(
        self, gpuInstance: Any, computeInstanceId: int
    ) -> Any:
        _gpu, gi = self._gi_handle_arg(self._state(), gpuInstance)
        for ci in gi["cis"]:
            if ci["id"] == computeInstanceId:
                return _handle(_CI, ci["serial"], pynvml.c_nvmlComputeInstance_t)
        raise _fail(pynvml.NVML_ERROR_NOT_FOUND)

    def nvmlComputeInstanceGetInfo(self, computeInstance: Any) -> Any:
        gpu, gi, ci = self._ci_handle_arg(self._state(), computeInstance)
        info = pynvml.c_nvmlComputeInstanceInfo_t()
        info.device = _handle(_DEVICE, gpu["index"], pynvml.c_nvmlDevice_t)
        info.gpuInstance = _handle(_GI, gi["serial"], pynvml.c_nvmlGpuInstance_t)
        info.id = ci["id"]
        info.profileId = ci["profile_id"]
        info.placement.start = ci["start"]
        info.placement.size = ci["slices"]
        return info

    nvmlComputeInstanceGetInfo_v2 = nvmlComputeInstanceGetInfo

    def nvmlComputeInstanceDestroy(self, computeInstance: Any) -> int:
        strike(self.state_dir, "before", "nvmlComputeInstanceDestroy")
        _gpu, _gi, ci = self._ci_handle_arg(self._state(), computeInstance)
        with self._admin() as st:
            gpu, gi, ci = self._find_ci(st, ci["serial"])
            if self._processes_on(gpu, gi, ci):
                raise _fail(pynvml.NVML_ERROR_IN_USE)
            gi["cis"] = [c for c in gi["cis"] if c["serial"] != ci["serial"]]
        return int(pynvml.NVML_SUCCESS)

    # -- MIG device handles --------------------------------------------------------

    def nvmlDeviceIsMigDeviceHandle(self, handle: Any) -> Any:
        _gpu, gi, _ci = self._device(self._state(), handle)
        return ctypes.c_uint(gi is not None)

    def nvmlDeviceGetMaxMigDeviceCount(self, handle: Any) -> int:
        gpu = self._gpu(self._state(), handle, pynvml.NVML_ERROR_NOT_SUPPORTED)
        if not gpu["mig_capable"]:
            raise _fail(pynvml.NVML_ERROR_NOT_SUPPORTED)
        return int(gpu["compute_slices"])

    def nvmlDeviceGetMigDeviceHandleByIndex(self, handle: Any, index: int) -> Any:
        gpu = self._mig_gpu(self._state(), handle)
        if not 0 <= index < gpu["compute_slices"]:
            raise _fail(pynvml.NVML_ERROR_INVALID_ARGUMENT)
        devices = self._mig_devices(gpu)
        if index >= len(devices):
            raise _fail(pynvml.NVML_ERROR_NOT_FOUND)
        return _handle(_MIG, devices[index][1]["serial"], pynvml.c_nvmlDevice_t)

    def nvmlDeviceGetDeviceHandleFromMigDeviceHandle(self, migDevice: Any) -> Any:
        gpu, gi, _ci = self._device(self._state(), migDevice)
        if gi is None:
            raise _fail(pynvml.NVML_ERROR_NOT_SUPPORTED)
        return _handle(_DEVICE, gpu["index"], pynvml.c_nvmlDevice_t)

    def nvmlDeviceGetGpuInstanceId(self, handle: Any) -> int:
        _gpu, gi, _ci = self._device(self._state(), handle)
        if gi is None:
            raise _fail(pynvml.NVML_ERROR_NOT_SUPPORTED)
        return int(gi["id"])

    def nvmlDeviceGetComputeInstanceId(self, handle: Any) -> int:
        _gpu, _gi, ci = self._device(self._state(), handle)
        if ci is None:
            raise _fail(pynvml.NVML_ERROR_NOT_SUPPORTED)
        return int(ci["id"])

    # -- GPM (Hopper and later) ------------------------------------------------------

    def nvmlGpmQueryDeviceSupport(self, handle: Any) -> Any:
        gpu, _gi, _ci = self._device(self._state(), handle)
        support = pynvml.c_nvmlGpmSupport_t()
        support.version = pynvml.NVML_GPM_SUPPORT_VERSION
        support.isSupportedDevice = int(gpu["arch"] in _GPM_ARCHS)
        return support

    def nvmlGpmSampleAlloc(self) -> Any:
        self._state()
        n = self._gpm_next
        self._gpm_next += 1
        self._gpm[n] = None
        return _handle(_GPM, n, pynvml.c_nvmlGpmSample_t)

    def nvmlGpmSampleFree(self, gpmSample: Any) -> None:
        if self._gpm.pop(self._gpm_slot(gpmSample), False) is False:
            raise _fail(pynvml.NVML_ERROR_INVALID_ARGUMENT)

    def _gpm_slot(self, sample: Any) -> int:
        kind, payload = _decode(sample)
        if kind != _GPM or payload not in self._gpm:
            raise _fail(pynvml.NVML_ERROR_INVALID_ARGUMENT)
        return payload

    def nvmlGpmSampleGet(self, device: Any, gpmSample: Any) -> Any:
        gpu = self._gpu(self._state(), device, pynvml.NVML_ERROR_NOT_SUPPORTED)
        if gpu["arch"] not in _GPM_ARCHS:
            raise _fail(pynvml.NVML_ERROR_NOT_SUPPORTED)
        now = time.time()
        self._gpm[self._gpm_slot(gpmSample)] = ((gpu["index"],), now, gpu_busy(gpu, now))
        return gpmSample

    def nvmlGpmMigSampleGet(self, device: Any, gpuInstanceId: int, gpmSample: Any) -> Any:
        gpu = self._mig_gpu(self._state(), device)
        if gpu["arch"] not in _GPM_ARCHS:
            raise _fail(pynvml.NVML_ERROR_NOT_SUPPORTED)
        gi = next((g for g in gpu["gis"] if g["id"] == gpuInstanceId), None)
        if gi is None:
            raise _fail(pynvml.NVML_ERROR_NOT_FOUND)
        now = time.time()
        self._gpm[self._gpm_slot(gpmSample)] = (
            (gpu["index"], gi["serial"]),
            now,
            gi_busy(gpu, gi, now),
        )
        return gpmSample

    def nvmlGpmMetricsGet(self, metricsGet: Any) -> Any:
        self._state()
        mg = _deref(metricsGet)
        if mg.version != pynvml.NVML_GPM_METRICS_GET_VERSION:
            raise _fail(pynvml.NVML_ERROR_ARGUMENT_VERSION_MISMATCH)
        first = self._gpm.get(self._gpm_slot(mg.sample1))
        second = self._gpm.get(self._gpm_slot(mg.sample2))
        if first is None or second is None or first[0] != second[0] or second[1] <= first[1]:
            raise _fail(pynvml.NVML_ERROR_INVALID_ARGUMENT)
        busy = max(0.0, min(100.0, (second[2] - first[2]) / (second[1] - first[1])))
        for i in range(mg.numMetrics):
            metric = mg.metrics[i]
            if metric.metricId in (
                pynvml.NVML_GPM_METRIC_SM_UTIL,
                pynvml.NVML_GPM_METRIC_GRAPHICS_UTIL,
            ):
                metric.value = busy
                metric.nvmlReturn = pynvml.NVML_SUCCESS
            else:
                metric.value = 0.0
                metric.nvmlReturn = pynvml.NVML_ERROR_NOT_SUPPORTED
        return metricsGet


def _driver_placement(p: GpuInstanceProfile, occupied: int) -> tuple[int, int] | None:
    """Where the driver puts an instance created without a placement."""
    free = [pl for pl in p.placements if not _mask(*pl) & occupied]
    if not free:
        return None
    if p.memory_slices == 1:
        # Even slots from the top first, then odd ones: fragments the board
        # the way the driver does (two 1g at 6 and 4 block both 3g slots).
        return min(free, key=lambda pl: (pl[0] % 2, -pl[0]))
    return min(free)


def _ci_free_starts(gi: State, c: ComputeInstanceProfile) -> list[int]:
    """Free, aligned compute-slice starts for a new CI of profile ``c`` in ``gi``."""
    if sum(1 for ci in gi["cis"] if ci["profile_id"] == c.nvml_profile_index) >= c.max_count:
        return []
    size = _ci_slices(c, gi["slices"])
    taken = 0
    for ci in gi["cis"]:
        taken |= _mask(ci["start"], ci["slices"])
    return [s for s in range(0, gi["slices"] - size + 1, size) if not _mask(s, size) & taken]
