"""One sampling pass over a node's GPUs, attributed to Slurm jobs.

:class:`Sampler` reads through a :class:`~slurmpool.gpu.interface.GpuBackend` only; what
it is told about jobs (an :class:`~.attribution.Attribution` and a PID
resolver) is passed in, so a pass is testable on the simulator without Slurm.

Per whole GPU: utilisation (NVML), memory used, power, energy.  Per MIG
instance: memory used and, where GPM exists (Hopper and later), SM
utilisation between this pass and the previous one; elsewhere utilisation
is None ("not available"), never zero.  Static facts (GPU list, models,
MIG mode, GPM support) are re-read every ``refresh_every`` passes.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field

from slurmpool.gpu.backend import GpuBackendError, GpuInfo, MigInstance, SmSample
from slurmpool.gpu.interface import GpuBackend
from slurmpool.modes import GpuMode
from slurmpool.monitor.attribution import Attribution, JobRef, PidResolver
from slurmpool.state.samples import KIND_GPU, KIND_MIG, KIND_SHARE, DeviceSample

SOURCE_NVML = "nvml"
SOURCE_GPM = "gpm"
GPM_MIN_GAP_S = 0.1


@dataclass(frozen=True, slots=True)
class ProcessUse:
    pid: int
    gpu: int
    gi: int | None
    mem_mib: int | None
    job: JobRef | None


@dataclass(slots=True)
class Snapshot:
    """What one pass saw: device rows (also what goes to the store) and processes."""

    t: float
    node: str
    gpus: list[GpuInfo]
    samples: list[DeviceSample]
    processes: list[ProcessUse]
    duration_s: float = 0.0
    errors: list[str] = field(default_factory=list)


def profile_slices(profile: str) -> int | None:
    """``"2g.20gb"`` -> 2 (compute slices of a MIG profile), None if not of that form."""
    head = profile.split(".", 1)[0]
    if head.endswith("g") and head[:-1].isdigit():
        return int(head[:-1])
    return None


class Sampler:
    """Samples ``backend`` for node ``node``.

    ``modes`` maps GPU index to the policy's mode (``passthrough``, ``mig``,
    ``mig-static``, ``shared``) where known; it decides whether a whole
    GPU's jobs hold it exclusively or share it.  ``total_slices`` maps a
    catalogue model to its compute slices (7 for A100/H100, 4 for A30).
    """

    def __init__(
        self,
        backend: GpuBackend,
        node: str,
        *,
        modes: dict[int, GpuMode] | None = None,
        total_slices: Callable[[str | None], int | None] | None = None,
        pids: PidResolver | None = None,
        refresh_every: int = 60,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.backend = backend
        self.node = node
        self.modes = dict(modes or {})
        self._slices_of = total_slices or _catalogue_slices
        self._slices: dict[str | None, int | None] = {}
        self.pids = pids
        self.refresh_every = max(1, refresh_every)
        self.clock = clock
        self._gpus: list[GpuInfo] = []
        self._passes = 0
        self._gpm_ok: dict[int, bool] = {}
        self._gpm_prev: dict[tuple[int, int, str | None], tuple[SmSample, float]] = {}

    # -- static facts ----------------------------------------------------------

    def gpus(self) -> list[GpuInfo]:
        if not self._gpus or self._passes % self.refresh_every == 0:
            self._gpus = self.backend.gpus()
            self._gpm_ok.clear()
        return self._gpus

    def close(self) -> None:
        for sample, _t in self._gpm_prev.values():
            self.backend.free_sm_sample(sample)
        self._gpm_prev.clear()

    # -- GPM -------------------------------------------------------------------

    def prime(self) -> None:
        """Take a first GPM sample of every MIG instance (utilisation needs two)."""
        for g in self.gpus():
            if g.mig_current:
                for inst in self._instances(g, []):
                    self._gpm(g.index, inst, self.clock())

    def _gpm(self, gpu: int, inst: MigInstance, now: float) -> float | None:
        if self._gpm_ok.get(gpu) is False:
            return None
        key = (gpu, inst.gi_id, inst.uuid)
        try:
            sample = self.backend.sm_sample(gpu, inst.gi_id)
        except GpuBackendError:
            sample = None
        if sample is None:
            self._gpm_ok[gpu] = False
            return None
        self._gpm_ok[gpu] = True
        prev = self._gpm_prev.get(key)
        if prev is not None and now - prev[1] < GPM_MIN_GAP_S:
            self.backend.free_sm_sample(sample)
            return None
        self._gpm_prev[key] = (sample, now)
        if prev is None:
            return None
        try:
            value = self.backend.sm_utilization(prev[0], sample)
        except GpuBackendError:
            value = None
        finally:
            self.backend.free_sm_sample(prev[0])
        return None if value is None else max(0.0, min(100.0, value))

    def _forget_gpm(self, live: set[tuple[int, int, str | None]]) -> None:
        for key in [k for k in self._gpm_prev if k not in live]:
            sample, _t = self._gpm_prev.pop(key)
            self.backend.free_sm_sample(sample)

    # -- a pass ----------------------------------------------------------------

    def _instances(self, g: GpuInfo, errors: list[str]) -> list[MigInstance]:
        try:
            return [i for i in self.backend.instances(g.index) if i.ci_id is not None]
        except GpuBackendError as e:
            errors.append(f"GPU {g.index}: instances: {e}")
            return []

    def sample(self, attribution: Attribution | None = None) -> Snapshot:
        """One pass: every GPU and instance, attributed with ``attribution``."""
        att = attribution or Attribution()
        t0 = time.perf_counter()
        now = self.clock()
        errors: list[str] = []
        gpus = self.gpus()
        self._passes += 1
        rows: list[DeviceSample] = []
        procs: list[ProcessUse] = []
        live_gpm: set[tuple[int, int, str | None]] = set()
        for g in gpus:
            try:
                self._sample_gpu(g, att, now, rows, procs, live_gpm, errors)
            except GpuBackendError as e:
                errors.append(f"GPU {g.index}: {e}")
                self._gpus = []  # re-read the GPU list next pass
        self._forget_gpm(live_gpm)
        return Snapshot(now, self.node, gpus, rows, procs, time.perf_counter() - t0, errors)

    def _resolve(self, pid: int) -> JobRef | None:
        return self.pids.resolve(pid) if self.pids is not None else None

    def _sample_gpu(
        self,
        g: GpuInfo,
        att: Attribution,
        now: float,
        rows: list[DeviceSample],
        procs: list[ProcessUse],
        live_gpm: set[tuple[int, int, str | None]],
        errors: list[str],
    ) -> None:
        b = self.backend
        mem = b.memory(g.index)
        power = b.power_mw(g.index)
        energy = b.energy_mj(g.index)
        processes = b.processes(g.index)
        if g.mig_current:
            if g.model not in self._slices:
                self._slices[g.model] = self._slices_of(g.model)
            total = self._slices[g.model]
            by_gi: dict[int, list[ProcessUse]] = {}
            for p in processes:
                use = ProcessUse(p.pid, g.index, p.gi_id, p.used_memory_mib, None)
                by_gi.setdefault(p.gi_id if p.gi_id is not None else -1, []).append(use)
            rows.append(
                DeviceSample(
                    t=now,
                    gpu_index=g.index,
                    gi_id=None,
                    kind=KIND_GPU,
                    model=g.model,
                    util=None,
                    mem_used_mib=mem.used_mib,
                    mem_total_mib=mem.total_mib,
                    power_mw=power,
                    energy_mj=energy,
                    nprocs=len(processes),
                    uuid=g.uuid,
                )
            )
            for inst in self._instances(g, errors):
                live_gpm.add((g.index, inst.gi_id, inst.uuid))
                util = self._gpm(g.index, inst, now)
                on_it = by_gi.get(inst.gi_id, [])
                job = att.instances.get((g.index, inst.gi_id))
                if job is None:  # a static instance Slurm handed out: ask its processes
                    job = next((r for r in (self._resolve(p.pid) for p in on_it) if r), None)
                procs.extend(ProcessUse(p.pid, p.gpu, p.gi, p.mem_mib, job) for p in on_it)
                rows.append(
                    DeviceSample(
                        t=now,
                        gpu_index=g.index,
                        gi_id=inst.gi_id,
                        kind=KIND_MIG,
                        job_id=job.job_id if job else None,
                        user=job.user if job else None,
                        account=job.account if job else None,
                        model=g.model,
                        profile=inst.profile,
                        slices=profile_slices(inst.profile),
                        total_slices=total,
                        util=util,
                        util_source=SOURCE_GPM if util is not None else None,
                        mem_used_mib=inst.memory_used_mib,
                        mem_total_mib=inst.memory_total_mib,
                        nprocs=len(on_it),
                        uuid=inst.uuid,
                    )
                )
            return
        util = b.utilization(g.index)
        source = SOURCE_NVML if util is not None else None
        uses = [
            ProcessUse(p.pid, g.index, None, p.used_memory_mib, self._resolve(p.pid))
            for p in processes
        ]
        procs.extend(uses)
        jobs: dict[str, JobRef] = {j.job_id: j for j in att.gpus.get(g.index, [])}
        for u in uses:
            if u.job is not None and u.job.job_id not in jobs:
                jobs[u.job.job_id] = u.job
        shared = self.modes.get(g.index) is GpuMode.SHARED or len(jobs) > 1

        def row(kind: str, job: JobRef | None, used: int | None, n: int) -> DeviceSample:
            return DeviceSample(
                t=now,
                gpu_index=g.index,
                gi_id=None,
                kind=kind,
                job_id=job.job_id if job else None,
                user=job.user if job else None,
                account=job.account if job else None,
                model=g.model,
                util=float(util) if util is not None else None,
                util_source=source,
                mem_used_mib=used,
                mem_total_mib=mem.total_mib,
                power_mw=power,
                energy_mj=energy,
                nprocs=n,
                uuid=g.uuid,
            )

        if not jobs:
            rows.append(row(KIND_GPU, None, mem.used_mib, len(uses)))
            return
        for job in jobs.values():
            mine = [u for u in uses if u.job is not None and u.job.job_id == job.job_id]
            if shared:
                rows.append(row(KIND_SHARE, job, sum(u.mem_mib or 0 for u in mine), len(mine)))
            else:
                rows.append(row(KIND_GPU, job, mem.used_mib, len(uses)))


def _catalogue_slices(model: str | None) -> int | None:
    if model is None:
        return None
    from slurmpool.catalogue import default_catalogue

    try:
        geo = default_catalogue().get(model).mig
    except Exception:
        return None
    return geo.compute_slices if geo is not None else None
