"""The GPU backend interface: what slurmpool needs from a node's GPUs.

Everything above this layer (discovery, hooks, monitor) talks to a
:class:`GpuBackend` and its dataclasses and errors, never to NVML.  The one
implementation is :class:`slurmpool.gpu.nvml.NvmlBackend`, which runs on
the real pynvml or on the simulator; :func:`slurmpool.gpu.select.open_backend`
builds it from a spec string.

Also here: :class:`MigMinorLookup`, the backend's lazy reading of the
driver's ``mig-minors`` table (:mod:`slurmpool.driver.mig_minors`), which maps
MIG capabilities to ``/dev/nvidia-caps/nvidia-cap<n>`` minors.

Standard library only: the job hooks import this on every job start.  The
:class:`GpuBackend` protocol lives in :mod:`slurmpool.gpu.interface` (it
needs :mod:`typing`).
"""

from __future__ import annotations

from slurmpool.driver.mig_minors import table_line
from slurmpool.records import field, record

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Iterable

    from slurmpool.placement import Placement

# -- errors -------------------------------------------------------------------


class GpuBackendError(Exception):
    """A GPU operation failed.  ``code`` is the NVML return code where there is one."""

    def __init__(self, message: str, code: int | None = None) -> None:
        super().__init__(message)
        self.code = code


class BackendUnavailable(GpuBackendError):
    """No driver, no GPU, or the backend could not be initialised."""


class NoRoomError(GpuBackendError):
    """The GPU has no room for the instance (NVML ``INSUFFICIENT_RESOURCES``)."""


class InUseError(GpuBackendError):
    """The device is busy (NVML ``IN_USE``): processes or child instances exist."""

    def __init__(self, message: str, code: int | None = None, pids: tuple[int, ...] = ()) -> None:
        super().__init__(message, code)
        self.pids = pids


class NotSupportedError(GpuBackendError):
    """The GPU or driver does not support the operation (NVML ``NOT_SUPPORTED``)."""


class NoPermissionError(GpuBackendError):
    """The caller may not do this (NVML ``NO_PERMISSION``; MIG changes need root)."""


class InvalidRequestError(GpuBackendError):
    """The request itself is wrong: unknown GPU or profile, illegal placement."""


# -- data -----------------------------------------------------------------------


@record(frozen=True, slots=True)
class GpuInfo:
    """One physical GPU.  ``model`` is the catalogue name, None if the catalogue lacks it.

    ``mig_current``/``mig_pending`` are the current and pending MIG modes
    (a change waits for a GPU reset when they differ).
    """

    index: int
    uuid: str
    name: str
    model: str | None
    memory_total_mib: int
    memory_used_mib: int
    mig_capable: bool
    mig_current: bool
    mig_pending: bool
    minor: int
    pci_bus_id: str
    pci_device_id: int
    numa_node: int | None
    cpu_affinity: str | None


@record(frozen=True, slots=True)
class MigInstance:
    """One MIG instance: a GPU instance and (normally) its compute instance.

    ``ci_id``/``uuid``/``ci_minor`` are None for a GPU instance without a
    compute instance (a half-created or half-destroyed instance).
    ``gi_minor``/``ci_minor`` are the capability device minors
    (``nvidia-cap<n>``), None when the ``mig-minors`` table is unavailable.
    """

    gpu_index: int
    profile: str
    profile_id: int
    placement: Placement
    gi_id: int
    ci_id: int | None
    uuid: str | None
    gi_minor: int | None
    ci_minor: int | None
    memory_total_mib: int
    memory_used_mib: int


@record(frozen=True, slots=True)
class ProcessInfo:
    pid: int
    used_memory_mib: int | None
    gi_id: int | None = None
    ci_id: int | None = None


@record(frozen=True, slots=True)
class MemoryInfo:
    total_mib: int
    used_mib: int


@record(slots=True)
class SmSample:
    """A GPM sample of a GPU or one GPU instance (Hopper and later).

    Take two with :meth:`GpuBackend.sm_sample` at least 100 ms apart, then
    :meth:`GpuBackend.sm_utilization`; release each with
    :meth:`GpuBackend.free_sm_sample`.
    """

    gpu_index: int
    gi_id: int | None
    handle: object = field(repr=False)


# -- mig-minors ----------------------------------------------------------------


class MigMinorLookup:
    """The ``mig-minors`` table, each capability looked up when first asked for.

    The driver's table has ~4,000 lines and a hook needs the minors of a few
    instances: parsing it all costs more than the rest of a hook's NVML work.
    A lookup finds the capability's own line (the last one, as the parser
    does); a malformed line raises :class:`GpuBackendError` when it is looked up.
    """

    __slots__ = ("_found", "_source", "_text")

    def __init__(self, text: str, source: str = "mig-minors") -> None:
        self._text = "\n" + text
        self._source = source
        self._found: dict[str, int | None] = {}

    def gi_minor(self, gpu_minor: int, gi_id: int) -> int | None:
        return self._minor(f"gpu{gpu_minor}/gi{gi_id}/access")

    def ci_minor(self, gpu_minor: int, gi_id: int, ci_id: int) -> int | None:
        return self._minor(f"gpu{gpu_minor}/gi{gi_id}/ci{ci_id}/access")

    def _minor(self, name: str) -> int | None:
        if name in self._found:
            return self._found[name]
        text = self._text
        start = max(text.rfind(f"\n{name} "), text.rfind(f"\n{name}\t"))
        minor = None
        if start >= 0:
            end = text.find("\n", start + 1)
            line = text[start + 1 : end if end >= 0 else len(text)]
            lineno = text.count("\n", 0, start + 1)
            try:
                minor = table_line(line, self._source, lineno)[1]
            except ValueError as e:
                raise GpuBackendError(str(e)) from None
        self._found[name] = minor
        return minor


# -- helpers -------------------------------------------------------------------


def cpulist(cpus: Iterable[int]) -> str:
    """``{0,1,2,3,8}`` -> ``"0-3,8"`` (the kernel's cpulist format)."""
    ranges: list[str] = []
    ordered = sorted(set(cpus))
    i = 0
    while i < len(ordered):
        j = i
        while j + 1 < len(ordered) and ordered[j + 1] == ordered[j] + 1:
            j += 1
        ranges.append(str(ordered[i]) if i == j else f"{ordered[i]}-{ordered[j]}")
        i = j + 1
    return ",".join(ranges)
