"""GPU access for slurmpool: the backend interface and how to open one.

``open_backend("nvml")`` for the real driver, ``open_backend("sim:DIR")`` for
a simulated node.  Cheap to import (no pynvml until a real backend is opened).
"""

from slurmpool.gpu.backend import (
    BackendUnavailable,
    GpuBackend,
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
from slurmpool.gpu.nvml import NvmlBackend
from slurmpool.gpu.select import BackendSpecError, open_backend

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
