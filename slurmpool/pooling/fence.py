"""A job's devices cgroup denies every MIG capability device but its own (cgroup v1).

Slurm's ConstrainDevices fences only GRES with ``File=``.  A ``mig`` pool's
``vgpu`` is a count, so Slurm leaves every capability device of the node open to
every job, and the files' owner (the job's user) is the only guard: a second job
of the same user could open the first's instance.  On cgroup v1 the prolog
closes that gap: it creates the job's devices cgroup before slurmstepd does and
denies, one by one, every capability minor of the node's ``mig`` GPUs but the
job's own.  slurmstepd puts the job's steps under that cgroup, and steps inherit
its rules.

Measured on Slurm 22.05 with cgroup/v1:
- the prolog runs before slurmstepd creates ``uid_<uid>/job_<id>``; slurmstepd
  reuses a cgroup that already exists and keeps its deny rules;
- under the devices controller's default allow, an ``allow`` of one minor below a
  denied ``c <major>:*`` is accepted and changes nothing, so a wildcard deny
  cannot leave the job's own minors open: each other minor is denied alone;
- ``devices.list`` shows ``a *:* rwm`` whatever the deny rules: only an open()
  tells (EPERM).

cgroup v2 has no such file: Slurm attaches its own eBPF device program to the
job, and nothing can be added to it; there the fence is unavailable and
``doctor`` says what still keeps two jobs of one user apart.
"""

from __future__ import annotations

import errno
import os
import stat

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Iterable

    from slurmpool.driver.mig_minors import MigMinors
    from slurmpool.pooling.node import Job, Node

# The node-name placeholder in ``paths.job_cgroup_root`` (Slurm builds with
# several slurmd per host name their cgroup ``slurm_<node>``).
NODE_PLACEHOLDER = "%n"
DENY_FILE = "devices.deny"


class FenceError(OSError):
    """The job's devices cgroup could not be made or written."""


def cgroup_root(template: str, node: str) -> str:
    """Slurm's cgroup v1 devices directory for ``node``'s jobs."""
    return template.replace(NODE_PLACEHOLDER, node)


def job_cgroup(template: str, node: str, uid: int, job_id: str) -> str:
    """The job's devices cgroup, as slurmstepd names it."""
    if not job_id.isdigit():
        raise FenceError(errno.EINVAL, f"job id {job_id!r} is not a number")
    return os.path.join(cgroup_root(template, node), f"uid_{int(uid)}", f"job_{job_id}")


def cgroup_of(node: Node, job: Job) -> str | None:
    """The job's devices cgroup where the hooks fence it; None on a node without
    ``mig`` GPUs or without the v1 devices controller under ``paths.job_cgroup_root``
    (cgroup v2: doctor reports what isolates jobs there)."""
    from slurmpool.modes import GpuMode

    if not node.gpus(GpuMode.MIG):
        return None
    template = node.config.path("job_cgroup_root")
    if not controller_mounted(template, node.name):
        return None
    return job_cgroup(template, node.name, job.uid, job.job_id)


def controller_mounted(template: str, node: str) -> bool:
    """Whether the cgroup v1 devices controller is mounted where the root lives
    (its parent directory has ``devices.deny``)."""
    parent = os.path.dirname(cgroup_root(template, node).rstrip("/"))
    return os.path.exists(os.path.join(parent, DENY_FILE))


def capability_minors(table: MigMinors, gpu_minors: Iterable[int]) -> set[int]:
    """Every GPU-instance and compute-instance capability minor of these GPUs,
    whether or not the instance exists (a later job may carve it)."""
    wanted = set(gpu_minors)
    return {minor for (gpu, _gi, _ci), minor in table.caps.items() if gpu in wanted}


def caps_major(devices_root: str, minor: int) -> int | None:
    """The capability devices' major number (dynamic on real nodes), from one
    capability node; None where the nodes are not character devices."""
    from slurmpool.pooling.caps import cap_path

    try:
        st = os.stat(cap_path(devices_root, minor), follow_symlinks=False)
    except FileNotFoundError:
        return None
    return os.major(st.st_rdev) if stat.S_ISCHR(st.st_mode) else None


def deny_rules(major: int, minors: Iterable[int]) -> list[str]:
    """One devices.deny rule per minor: ``c <major>:<minor> rwm``."""
    return [f"c {major}:{m} rwm" for m in sorted(minors)]


def apply(cgroup: str, rules: Iterable[str]) -> int:
    """Create ``cgroup`` (and its parents) if needed and write each rule to its
    ``devices.deny``; returns how many were written.  One write per rule: the
    kernel reads one rule per write."""
    try:
        os.makedirs(cgroup, mode=0o755, exist_ok=True)
        fd = os.open(os.path.join(cgroup, DENY_FILE), os.O_WRONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError as e:
        raise FenceError(e.errno, f"cannot open {cgroup}/{DENY_FILE}: {e.strerror}") from None
    n = 0
    try:
        for rule in rules:
            try:
                os.write(fd, rule.encode())
            except OSError as e:
                raise FenceError(e.errno, f"{cgroup}/{DENY_FILE}: {rule!r}: {e.strerror}") from None
            n += 1
    finally:
        os.close(fd)
    return n


def remove(cgroup: str) -> bool:
    """Remove the job's cgroup if slurmstepd left it (a job that never ran a step);
    False where it is gone already or still in use."""
    try:
        os.rmdir(cgroup)
    except OSError as e:
        if e.errno in (errno.ENOENT, errno.EBUSY, errno.ENOTEMPTY):
            return False
        raise FenceError(e.errno, f"cannot remove {cgroup}: {e.strerror}") from None
    return True
