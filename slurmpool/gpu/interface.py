"""The :class:`GpuBackend` protocol: what slurmpool needs from a node's GPUs.

A module of its own so that the job hooks, which import
:mod:`slurmpool.gpu.backend` on every job, do not import :mod:`typing` for a
class that only type checkers use.
"""

from __future__ import annotations

from typing import Protocol

TYPE_CHECKING = False
if TYPE_CHECKING:
    from slurmpool.gpu.backend import GpuInfo, MemoryInfo, MigInstance, ProcessInfo, SmSample
    from slurmpool.placement import Placement


class GpuBackend(Protocol):
    """The GPUs of one node."""

    @property
    def name(self) -> str:
        """The spec this backend was opened with, e.g. ``nvml`` or ``sim:/path``."""
        ...

    def close(self) -> None: ...

    def driver_version(self) -> str: ...

    def gpus(self) -> list[GpuInfo]: ...

    def gpu(self, index: int) -> GpuInfo: ...

    def instances(self, gpu_index: int) -> list[MigInstance]:
        """The MIG instances of a GPU (empty when MIG is off), by GI id."""
        ...

    def create_instance(self, gpu_index: int, profile: str, placement: Placement) -> MigInstance:
        """Create a GPU instance at ``placement`` and its full-size compute instance.

        ``profile`` is a catalogue profile name (``3g.40gb``) or size
        (``3g``).  Raises :class:`NoRoomError` when the placement overlaps
        an existing instance.  A half-created instance is destroyed again.
        """
        ...

    def destroy_instance(self, gpu_index: int, gi_id: int) -> bool:
        """Destroy the compute instances, then the GPU instance ``gi_id``.

        Resumable: a GPU instance whose compute instances are already gone
        is destroyed; one that is gone already returns False.  Raises
        :class:`InUseError` while processes run on it.
        """
        ...

    def set_mig_mode(self, gpu_index: int, enabled: bool) -> bool:
        """Set the MIG mode; True if it applied now, False if it waits for a GPU reset."""
        ...

    def compute_mode(self, gpu_index: int) -> int:
        """The GPU's compute mode (NVML's value, :mod:`slurmpool.driver.compute`)."""
        ...

    def set_compute_mode(self, gpu_index: int, mode: int) -> None:
        """Set the compute mode (root's); it binds the contexts created afterwards."""
        ...

    def processes(self, gpu_index: int, gi_id: int | None = None) -> list[ProcessInfo]:
        """Compute processes on a GPU, or on one of its GPU instances."""
        ...

    def utilization(self, gpu_index: int) -> int | None:
        """GPU utilisation in percent; None where NVML does not report it (MIG mode)."""
        ...

    def memory(self, gpu_index: int) -> MemoryInfo: ...

    def instance_memory(self, gpu_index: int, gi_id: int) -> MemoryInfo: ...

    def power_mw(self, gpu_index: int) -> int | None: ...

    def energy_mj(self, gpu_index: int) -> int | None: ...

    def ecc_errors(self, gpu_index: int) -> dict[str, int] | None:
        """Volatile ECC error counts (``ecc_corrected``, ``ecc_uncorrected``) since the
        driver loaded; None where the GPU or driver reports none."""
        ...

    def sm_sample(self, gpu_index: int, gi_id: int | None = None) -> SmSample | None:
        """A GPM sample, or None where GPM is not supported (before Hopper)."""
        ...

    def sm_utilization(self, first: SmSample, second: SmSample) -> float | None:
        """SM utilisation in percent between two samples of the same device."""
        ...

    def free_sm_sample(self, sample: SmSample) -> None: ...
