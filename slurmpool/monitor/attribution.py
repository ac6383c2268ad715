"""Which Slurm job a GPU device or a GPU process belongs to.

- MIG instances and shares: the hooks' allocation records in the node store
  (job, user, uid per GPU/instance) are the truth.
- Whole GPUs (passthrough): the job of the processes running on them, from
  their job cgroup or the root slurmstepd they descend from
  (:mod:`slurmpool.procjob`), never from what a process says of itself (its
  ``SLURM_JOB_ID`` is the user's to set).
- Accounts: one ``squeue`` call per new job, cached.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from slurmpool.modes import GpuMode
from slurmpool.procjob import job_from_cgroup, job_from_stepd, real_uid_and_parent
from slurmpool.slurm.runner import Runner, SlurmCommandError
from slurmpool.state.store import Allocation


@dataclass(frozen=True, slots=True)
class JobRef:
    job_id: str
    user: str | None = None
    uid: int | None = None
    account: str | None = None


@dataclass(slots=True)
class Attribution:
    """Jobs by device: ``instances[(gpu, gi)]`` for MIG, ``gpus[gpu]`` for whole GPUs/shares."""

    instances: dict[tuple[int, int], JobRef] = field(default_factory=dict)
    gpus: dict[int, list[JobRef]] = field(default_factory=dict)
    shares: dict[tuple[int, str], int] = field(default_factory=dict)  # (gpu, job) -> shares

    def job_ids(self) -> set[str]:
        out = {j.job_id for j in self.instances.values()}
        out.update(j.job_id for refs in self.gpus.values() for j in refs)
        return out


def from_allocations(allocations: Iterable[Allocation]) -> Attribution:
    """The attribution the live allocation records give (intent rows are skipped)."""
    att = Attribution()
    for a in allocations:
        if a.state not in ("active", "releasing"):
            continue
        ref = JobRef(a.job_id, a.user, a.uid)
        if a.mode is GpuMode.MIG and a.gi_id is not None:
            att.instances[(a.gpu_index, a.gi_id)] = ref
        else:
            refs = att.gpus.setdefault(a.gpu_index, [])
            if all(r.job_id != ref.job_id for r in refs):
                refs.append(ref)
            if a.mode is GpuMode.SHARED and a.shares:
                att.shares[(a.gpu_index, a.job_id)] = a.shares
    return att


class PidResolver:
    """Finds the Slurm job of a process (see the module docstring); cached per process."""

    def __init__(self, proc_root: str = "/proc", max_depth: int = 8) -> None:
        self.proc_root = Path(proc_root)
        self.max_depth = max_depth
        self._cache: dict[tuple[int, float], JobRef | None] = {}

    def resolve(self, pid: int) -> JobRef | None:
        import psutil

        try:
            proc = psutil.Process(pid)
            key = (pid, proc.create_time())
        except (psutil.Error, OSError):
            return None
        if key in self._cache:
            return self._cache[key]
        ref = self._resolve(proc)
        if len(self._cache) > 10_000:
            self._cache.clear()
        self._cache[key] = ref
        return ref

    def _resolve(self, proc: Any) -> JobRef | None:
        proc_root = str(self.proc_root)
        try:
            text = (self.proc_root / str(proc.pid) / "cgroup").read_text()
        except OSError:
            text = ""
        found = job_from_cgroup(text)
        if found is not None:
            job_id, uid = found
            return JobRef(job_id, _username(proc), uid)
        job = job_from_stepd(proc.pid, proc_root, self.max_depth)
        if job is None:
            return None
        status = real_uid_and_parent(proc.pid, proc_root)
        return JobRef(job, _username(proc), status[0] if status else None)


def _username(proc: Any) -> str | None:
    try:
        return str(proc.username())
    except Exception:
        return None


class AccountResolver:
    """Job id -> account, one ``squeue`` call for all the jobs not seen before.

    Jobs squeue does not know (ended) are retried at most every ``retry_s``.
    """

    def __init__(
        self, runner: Runner | None, retry_s: float = 30.0, clock: Callable[[], float] = time.time
    ) -> None:
        self.runner = runner
        self.retry_s = retry_s
        self.clock = clock
        self._known: dict[str, str] = {}
        self._missed: dict[str, float] = {}

    def seed(self, job_id: str, account: str) -> None:
        self._known[job_id] = account

    def accounts(self, job_ids: Sequence[str] | set[str]) -> dict[str, str]:
        now = self.clock()
        ask = [
            j
            for j in job_ids
            if j not in self._known and now - self._missed.get(j, -1e18) >= self.retry_s
        ]
        if ask and self.runner is not None:
            try:
                res = self.runner.run(
                    "squeue",
                    "-h",
                    "-o",
                    "%i|%a",
                    "-j",
                    ",".join(sorted(ask)),
                    timeout=10,
                    check=False,
                )
                for line in res.stdout.splitlines():
                    jid, sep, account = line.strip().partition("|")
                    if sep and jid:
                        self._known[jid] = account
            except SlurmCommandError:
                pass
            for j in ask:
                if j not in self._known:
                    self._missed[j] = now
        return {j: self._known[j] for j in job_ids if j in self._known}
