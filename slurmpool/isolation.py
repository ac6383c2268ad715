"""What keeps the jobs on one node apart, per GPU mode: the isolation it enforces.

From what the node runs (Slurm's task plugin, cgroup.conf, the cgroup version,
and the devices controller below ``paths.job_cgroup_root``) to one line per
mode, which ``doctor`` prints and the README's Isolation section states:

* ``passthrough``, ``mig-static``: Slurm's device cgroup, when ConstrainDevices
  holds, lets a job open only the GPU (or instance) files it was given;
* ``shared``: the same, per GPU; jobs sharing one GPU are time-sliced;
* ``mig``: the capability files, owned by the job's user, keep other users
  out; on cgroup v1 the prolog's devices cgroup keeps the user's other jobs
  out too; without it, only MIG's own partitioning stands between them.

Pure: the facts come in as a :class:`NodeFences`.
"""

from __future__ import annotations

from slurmpool.modes import GpuMode
from slurmpool.records import record

# What a job can open beyond its own slice, from most to least fenced.
JOB = "job"  # only what it was given
GPU = "gpu"  # only its GPU, shared with the other jobs on it
USER = "user"  # also what other jobs of its user hold
NONE = "none"  # every GPU of the node


@record(frozen=True, slots=True)
class NodeFences:
    """What the node runs that fences devices."""

    task_cgroup: bool  # slurm.conf's TaskPlugin includes task/cgroup
    constrain_devices: bool  # cgroup.conf has ConstrainDevices=yes
    cgroup: str  # "v1" or "v2": the hierarchy Slurm's cgroup plugin uses
    mig_fence: bool  # the v1 devices controller holds paths.job_cgroup_root

    @property
    def devices(self) -> bool:
        """Slurm's device cgroup holds each job to its GRES files."""
        return self.task_cgroup and self.constrain_devices

    def why_not_devices(self) -> str:
        if not self.task_cgroup:
            return "slurm.conf's TaskPlugin has no task/cgroup"
        return "cgroup.conf does not set ConstrainDevices=yes"


@record(frozen=True, slots=True)
class Isolation:
    mode: GpuMode
    level: str  # JOB, GPU, USER or NONE
    detail: str

    def line(self) -> str:
        return f"{self.mode}: {self.level} ({self.detail})"


def isolation(mode: GpuMode, node: NodeFences, mps: bool = False) -> Isolation:
    """How far a job on a GPU of ``mode`` is fenced from what other jobs hold
    (``mps``: its shared GPUs run an MPS control daemon that holds the limits)."""
    if mode is GpuMode.MIG:
        return _mig(node)
    if not node.devices:
        return Isolation(mode, NONE, f"any job can open every GPU: {node.why_not_devices()}")
    if mode is GpuMode.SHARED:
        within = (
            "MPS holds each user's server there to the user's shares; one user's server at a time"
            if mps
            else "which it time-slices with the other jobs there, with no limit"
        )
        return Isolation(
            mode, GPU, f"the device cgroup: a job opens only the GPU its shares are on; {within}"
        )
    what = "MIG instances" if mode is GpuMode.MIG_STATIC else "GPUs"
    return Isolation(mode, JOB, f"the device cgroup: a job opens only the {what} Slurm gave it")


def _mig(node: NodeFences) -> Isolation:
    if node.devices and node.cgroup == "v1" and node.mig_fence:
        return Isolation(
            GpuMode.MIG,
            JOB,
            "the prolog's device cgroup: a job opens only its own MIG instance's "
            "capability devices; MIG partitions memory and compute",
        )
    if not node.devices:
        why = node.why_not_devices()
    elif node.cgroup != "v1":
        why = "cgroup v2, where a job's device rules are Slurm's alone"
    else:
        why = "no cgroup v1 devices controller at paths.job_cgroup_root"
    return Isolation(
        GpuMode.MIG,
        USER,
        "capability files owned by the job's user keep other users out; two jobs of "
        f"one user are kept apart by nothing but MIG's memory and compute partitioning: {why}",
    )


def node_isolation(modes: list[GpuMode], node: NodeFences, mps: bool = False) -> list[Isolation]:
    """One line per mode, in the order given, each mode once."""
    return [isolation(m, node, mps) for m in dict.fromkeys(modes)]
