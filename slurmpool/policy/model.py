"""The validated policy as typed, immutable data.

Model names are canonical catalogue names and profile names are full
catalogue names (``3g.40gb``), so consumers never re-resolve aliases.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property
from typing import Literal

from slurmpool.hostlist import HostList
from slurmpool.modes import GpuMode

VgpuUnit = Literal["compute-slice", "share"]


@dataclass(frozen=True, slots=True)
class GpuSpec:
    """One GPU of every node of a group."""

    index: int
    model: str
    mode: GpuMode
    vfio: bool = False
    layout: tuple[str, ...] = ()  # mig-static only
    shares: int = 1  # shared only
    mps: bool = False  # shared only
    cores: str | None = None
    slurm_type: str = ""  # gpu type for passthrough ("a100"); prefix for mig-static types

    @property
    def pooled(self) -> bool:
        return self.mode.pooled


@dataclass(frozen=True)
class NodeGroup:
    name: str
    nodes: str  # hostlist expression as written
    cpus: int
    real_memory_mib: int
    gpus: tuple[GpuSpec, ...]  # sorted by index, indices 0..n-1
    slurm_node_options: tuple[tuple[str, str], ...] = ()
    # Pool geometry; None/0 when the group pools no GPU.
    vgpu_unit: VgpuUnit | None = None
    units_per_gpu: int = 0

    @cached_property
    def hostlist(self) -> HostList:
        return HostList(self.nodes)

    @property
    def pooled_gpus(self) -> tuple[GpuSpec, ...]:
        return tuple(g for g in self.gpus if g.pooled)

    @property
    def publishes_fit(self) -> bool:
        """The group pools MIG GPUs in compute slices: its nodes have fit counts
        (:mod:`slurmpool.fit`) and a fit anchor."""
        return self.vgpu_unit == "compute-slice" and bool(self.pooled_gpus)

    @property
    def vgpu_count(self) -> int:
        """The node's ``vgpu`` GRES count."""
        return self.units_per_gpu * len(self.pooled_gpus)

    @property
    def pool_model(self) -> str | None:
        pooled = self.pooled_gpus
        return pooled[0].model if pooled else None


@dataclass(frozen=True, slots=True)
class Partition:
    name: str
    node_groups: tuple[str, ...]  # every group with a node in the partition
    nodes: str  # hostlist expression for PartitionName Nodes=
    default: bool = False
    options: tuple[tuple[str, str], ...] = ()


@dataclass(frozen=True, slots=True)
class Paths:
    state_dir: str
    hooks_dir: str
    devices_root: str
    mig_minors: str
    slurm_config_dir: str
    run_dir: str
    sysfs_root: str
    vfio_dev_dir: str
    proc_root: str
    job_cgroup_root: str
    mps_control: str


@dataclass(frozen=True, slots=True)
class HookLimits:
    prolog_timeout_s: int
    task_prolog_timeout_s: int
    epilog_timeout_s: int
    epilog_slurmctld_timeout_s: int


@dataclass(frozen=True, slots=True)
class Pooling:
    stray_processes: str  # kill | refuse
    allow_disable_mig: bool
    destroy_retry_s: int
    kill_grace_s: int


@dataclass(frozen=True)
class Policy:
    version: str
    cluster: str
    gpu_backend: str  # "nvml" or "sim:<dir>"
    accounting: bool
    slurm_version: str | None  # None: the installed Slurm's, detected when generating
    cgroup_plugin: str
    paths: Paths
    hooks: HookLimits
    pooling: Pooling
    node_groups: tuple[NodeGroup, ...]
    partitions: tuple[Partition, ...]
    source: str = "<policy>"

    def group(self, name: str) -> NodeGroup:
        for g in self.node_groups:
            if g.name == name:
                return g
        raise KeyError(name)

    @property
    def default_partition(self) -> Partition | None:
        return next((p for p in self.partitions if p.default), None)
