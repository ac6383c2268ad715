"""GPU access for slurmpool: the backend interface and how to open one.

``open_backend("nvml")`` for the real driver, ``open_backend("sim:DIR")`` for
a simulated node.  Cheap to import (no pynvml until a real backend is opened).

The names below are imported from their submodules on first use: the job
hooks import :mod:`slurmpool.gpu.backend` on every job, and that must not
load the rest of the package (nor :mod:`typing`, for :class:`GpuBackend`).
"""

from slurmpool.lazy import lazy_exports

TYPE_CHECKING = False
if TYPE_CHECKING:
    from slurmpool.gpu.backend import (
        BackendUnavailable,
        GpuBackendError,
        GpuInfo,
        InUseError,
        InvalidRequestError,
        MemoryInfo,
        MigInstance,
        MigMinors,
        NoPermissionError,
        NoRoomError,
        NotSupportedError,
        ProcessInfo,
        SmSample,
        parse_mig_minors,
    )
    from slurmpool.gpu.interface import GpuBackend
    from slurmpool.gpu.nvml import NvmlBackend
    from slurmpool.gpu.select import BackendSpecError, open_backend

# Where each name lives.
_LAZY = {
    "BackendSpecError": "select",
    "BackendUnavailable": "backend",
    "GpuBackend": "interface",
    "GpuBackendError": "backend",
    "GpuInfo": "backend",
    "InUseError": "backend",
    "InvalidRequestError": "backend",
    "MemoryInfo": "backend",
    "MigInstance": "backend",
    "MigMinors": "backend",
    "NoPermissionError": "backend",
    "NoRoomError": "backend",
    "NotSupportedError": "backend",
    "NvmlBackend": "nvml",
    "ProcessInfo": "backend",
    "SmSample": "backend",
    "open_backend": "select",
    "parse_mig_minors": "backend",
}

__all__ = [
    "BackendSpecError",
    "BackendUnavailable",
    "GpuBackend",
    "GpuBackendError",
    "GpuInfo",
    "InUseError",
    "InvalidRequestError",
    "MemoryInfo",
    "MigInstance",
    "MigMinors",
    "NoPermissionError",
    "NoRoomError",
    "NotSupportedError",
    "NvmlBackend",
    "ProcessInfo",
    "SmSample",
    "open_backend",
    "parse_mig_minors",
]


__getattr__, __dir__ = lazy_exports(__name__, _LAZY)
