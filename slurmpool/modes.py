"""The GPU modes: the one vocabulary of the policy, the node config, the hooks'
allocation records, accounting and the reports.

A mode is what slurmpool does with one GPU of a node:

* ``passthrough``: the whole GPU goes to one job (``gpu`` GRES, with ``File=``);
* ``mig``: MIG instances carved per job from the ``vgpu`` count;
* ``mig-static``: a fixed MIG layout made once, its instances typed ``gpu`` GRES;
* ``shared``: time-sliced shares of a GPU without MIG, from the ``vgpu`` count.

Members are ``str`` subclasses, so they compare equal to, and serialise as, the
words in policy files, node configs and the state store.
"""

from __future__ import annotations

from enum import Enum


class _Word(str, Enum):
    """An enum whose members are their words: ``f"{m}"`` and ``str(m)`` give the value."""

    def __str__(self) -> str:
        return str(self.value)

    def __format__(self, spec: str) -> str:
        return format(self.value, spec)


class DeviceKind(_Word):
    """What a job holds of a GPU, in samples, GPU summaries and reports."""

    GPU = "gpu"  # the whole GPU
    MIG = "mig"  # a MIG instance
    SHARE = "share"  # a time-sliced share


class GpuMode(_Word):
    PASSTHROUGH = "passthrough"
    MIG = "mig"
    MIG_STATIC = "mig-static"
    SHARED = "shared"

    @property
    def pooled(self) -> bool:
        """Its GPUs are counted in the node's ``vgpu`` GRES and handed out per job."""
        return self in (GpuMode.MIG, GpuMode.SHARED)

    @property
    def mig_enabled(self) -> bool:
        """Its GPUs run with MIG mode on."""
        return self in (GpuMode.MIG, GpuMode.MIG_STATIC)

    @property
    def device_kind(self) -> DeviceKind:
        """What a job holds on a GPU of this mode."""
        return _DEVICE_KIND[self]


_DEVICE_KIND = {
    GpuMode.PASSTHROUGH: DeviceKind.GPU,
    GpuMode.MIG: DeviceKind.MIG,
    GpuMode.MIG_STATIC: DeviceKind.MIG,
    GpuMode.SHARED: DeviceKind.SHARE,
}

MODES: tuple[str, ...] = tuple(m.value for m in GpuMode)
# Modes a job's allocation record can have: mig-static instances are Slurm's own
# typed gpu GRES, bound like whole GPUs.
ALLOCATED_MODES = (GpuMode.MIG, GpuMode.PASSTHROUGH, GpuMode.SHARED)
