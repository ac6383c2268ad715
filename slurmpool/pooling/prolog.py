"""The prolog: carve, bind or share the job's GPUs, or requeue it when there is no room.

Order (MIG): reconcile; then, in one write transaction, read what every GPU
holds, choose GPU and placement and record the intent; create GI then CI at
that placement; hand the capability files to the job's user; record the
allocation active; write the job's export file for the TaskProlog.

Whole or nothing: each record knows how many make up the job's allocation
(``details["parts"]``); a re-run prolog hands out what an earlier run made
only when all of it is active, and otherwise undoes it and starts over.

Decide under the node lock, act outside it, record under it: no wait on the
hardware happens while the lock is held (reconcile claims its work under the
lock and does it after; instances are created after their intent commits).

Exit 0 for every expected condition, including no room (requeue), a request
this node can never serve (requeue held, with the reason) and a busy node
(the lock not free within its share of the budget: requeue).  A requeue that
Slurm refuses leaves the job without GPUs, to fail on its own, and says so in
the log.  Only a broken node (NVML unreachable, a GPU lost, a broken install)
exits 1, which drains the node.
"""

from __future__ import annotations

from slurmpool.gpu.backend import BackendUnavailable, GpuBackendError, NoRoomError
from slurmpool.modes import GpuMode
from slurmpool.placement import engine_for
from slurmpool.placement import occupancy as occupancy_mask
from slurmpool.pooling import caps, jobfile, owner, passthrough, publish, vfio
from slurmpool.pooling.exports import exports
from slurmpool.pooling.mig import MigGpu, occupancy, plan_instances
from slurmpool.pooling.node import Broken
from slurmpool.pooling.procs import stop_processes
from slurmpool.pooling.reconcile import claim, reconcile, settle, stand_down_mps
from slurmpool.pooling.release import ReleaseError, kill_grace, undo
from slurmpool.pooling.request import (
    RequestError,
    job_gpus,
    mig_profiles,
    pool_gres,
    pooled_mode,
    split_shards,
    vgpu_claimed_in_extra,
)
from slurmpool.pooling.shared import free_shares
from slurmpool.pooling.text import clean
from slurmpool.records import record
from slurmpool.state.db import StateStoreError, StoreBusy
from slurmpool.state.store import ACTIVE, RELEASED, RUN, Allocation, NewAllocation

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable, Mapping, Sequence
    from typing import TypeAlias

    from slurmpool.configgen.nodeconfig import NodeGpu
    from slurmpool.driver.mig_minors import MigMinors
    from slurmpool.placement import GpuOccupancy
    from slurmpool.pooling.node import Job, Node

    # Slurm access is imported only when a call is made (off the common path).
    from slurmpool.pooling.slurmjob import SlurmJobs

    SlurmFactory: TypeAlias = Callable[[], SlurmJobs]


class NoRoom(Exception):
    """Not now: the job goes back to the queue."""


class NotHereNow(NoRoom):
    """Not now, and not here until a job on this node ends: the job is kept off the
    node until then (:mod:`slurmpool.pooling.exclude`)."""


class Fragmented(NotHereNow):
    """No room for the job's instances until a job on this node frees slices."""


class SharedGpuBusy(NotHereNow):
    """The shared GPU's MPS daemon is busy, refused, or did not answer in time."""


class NeverHere(Exception):
    """Not on this node, ever (a request job_submit.lua should have refused)."""


# The details key for how many records (of one mode) make up a job's allocation.
PARTS = "parts"


def complete(records: Sequence[Allocation]) -> bool:
    """Whether a job's live records are its whole allocation: every one active, and, per
    mode, as many as were planned (a prolog killed between two instances leaves fewer).
    Records from before the count was kept count as whole."""
    by_mode: dict[GpuMode, list[Allocation]] = {}
    for a in records:
        if a.state != ACTIVE:
            return False
        by_mode.setdefault(a.mode, []).append(a)
    return all(
        len(group) == int(group[0].details.get(PARTS, len(group))) for group in by_mode.values()
    )


@record
class _Request:
    count: int
    source: str


def run_prolog(
    node: Node, job: Job, env: Mapping[str, str], slurm: SlurmFactory, after_kill: bool = False
) -> int:
    """The prolog; returns its exit status.  ``slurm()`` gives the Slurm access when needed.

    ``after_kill``: an earlier run for this job died by a signal (the wrapper saw it);
    give back whatever it began and requeue the job.
    """
    try:
        rc = _after_kill(node, job, slurm) if after_kill else _prolog(node, job, env, slurm)
        _fence(node, job)
        return rc
    except StoreBusy as e:
        # Whatever this run began stays owned by it: once it exits, reconcile undoes it.
        node.log.event("node-busy", level="warning", job=job.job_id, error=clean(str(e), 300))
        return _requeue(node, job, slurm, f"node {node.name} busy: state store locked", False)
    except (Broken, BackendUnavailable, StateStoreError, caps.CapsError, vfio.VfioError) as e:
        node.log.event("broken-node", level="error", job=job.job_id, error=clean(str(e), 500))
        return 1
    finally:
        node.close()


def _read_request(node: Node, job: Job, env: Mapping[str, str], slurm: SlurmFactory) -> _Request:
    """This node's part of what slurmctld allocated to the job (never what the job says).

    Neither an unreachable slurmctld nor an untrustworthy answer drains the node: the
    job gets no GPU (its capability files stay root's), so it fails on its own, and the
    log says why.
    """
    if pooled_mode(node.cls) is None:
        return _Request(0, "none")
    from slurmpool.slurm.allocation import AllocationError, ForgedRecord
    from slurmpool.slurm.runner import SlurmCommandError

    try:
        alloc = slurm().allocation(job.job_id)
    except SlurmCommandError as e:
        node.log.event("request-unknown", level="error", job=job.job_id, error=clean(str(e), 300))
        return _Request(0, "unknown")
    except AllocationError as e:
        action = "forgery-attempt" if isinstance(e, ForgedRecord) else "request-unknown"
        node.log.event(
            action, level="error", job=job.job_id, user=job.user, error=clean(str(e), 300)
        )
        return _Request(0, "unknown")
    count = alloc.on(node.name).count(pool_gres(pooled_mode(node.cls)))
    claimed = vgpu_claimed_in_extra(env.get("SLURM_JOB_EXTRA"))
    if claimed is not None and claimed != count:
        # job_submit.lua scrubs users' tokens, so a disagreeing one got past it.
        node.log.event(
            "forgery-attempt",
            level="warning",
            job=job.job_id,
            user=job.user,
            claimed=claimed,
            allocated=count,
            field="SLURM_JOB_EXTRA",
        )
    return _Request(count, alloc.source)


def _prolog(node: Node, job: Job, env: Mapping[str, str], slurm: SlurmFactory) -> int:
    log = node.log
    try:
        gpus = job_gpus(env.get("SLURM_JOB_GPUS"), node.cls)
    except RequestError as e:
        raise Broken(str(e)) from None
    req = _read_request(node, job, env, slurm)
    if not gpus and req.count == 0:
        return 0  # a CPU-only job: nothing to do, nothing to log
    log.event(
        "request",
        job=job.job_id,
        user=job.user,
        vgpu=req.count,
        source=req.source,
        gpus=",".join(str(g.index) for g in gpus) or "-",
    )
    mode = pooled_mode(node.cls)
    shards = req.count if mode is GpuMode.SHARED else 0
    store = node.store()
    with store.transaction():
        todo = claim(node)
    if not todo.empty:
        for line in settle(node, todo):
            log.event("reconciled", job=job.job_id, detail=line)
    if mode is GpuMode.SHARED:
        for line in stand_down_mps(node):
            log.event("reconciled", job=job.job_id, detail=line)
    mine = store.for_job(job.job_id)
    if mine and complete(mine):
        # The prolog ran again for an allocated job: hand out the same again.
        _write_exports(node, job)
        log.event("already-allocated", job=job.job_id, allocations=len(mine))
        return 0
    if mine:
        _undo_job(node, job, "restarting the job's allocation")
    try:
        try:
            whole, shard_gpu = split_shards(gpus, shards)
        except RequestError as e:
            raise NeverHere(str(e)) from None
        if whole:
            _passthrough(node, job, whole)
        if req.count and mode is GpuMode.MIG:
            _mig(node, job, req.count)
        elif req.count and mode is GpuMode.SHARED:
            _shared(node, job, req.count, shard_gpu)
    except (NoRoom, NeverHere, NoRoomError) as e:  # NoRoomError: an unrecorded instance
        _undo_job(node, job, "requeued")
        hold, exclude = isinstance(e, NeverHere), isinstance(e, NotHereNow)
        rc = _requeue(node, job, slurm, str(e), hold=hold, exclude=exclude)
        if mode is GpuMode.MIG and publish.fit_pooled(node):
            # Slurm sent a job the node could not carve (what it was told is out of
            # date), or the job's instances were noted and are undone now.
            publish.publish_now(node, slurm)
        return rc
    except BaseException:
        _undo_job(node, job, "prolog failed")
        raise
    _write_exports(node, job)
    if req.count and mode is GpuMode.MIG and publish.fit_pooled(node):
        publish.send(node, slurm)
    return 0


def _after_kill(node: Node, job: Job, slurm: SlurmFactory) -> int:
    node.log.event("prolog-killed", level="warning", job=job.job_id, user=job.user)
    for line in reconcile(node):  # the dead run's intents: their owner is gone
        node.log.event("reconciled", job=job.job_id, detail=line)
    _undo_job(node, job, "prolog killed half-way")  # and what it had made active
    rc = _requeue(node, job, slurm, "the prolog was killed half-way")
    if publish.fit_pooled(node):
        # The dead run may have noted its instances, and sent nothing: note anew.
        publish.publish_now(node, slurm)
    return rc


def _requeue(
    node: Node,
    job: Job,
    slurm: SlurmFactory,
    reason: str,
    hold: bool = False,
    exclude: bool = False,
) -> int:
    """Send the job back to the queue (held when ``hold``) and, with ``exclude`` (no room
    here now), keep it off this node until the node frees slices; 0 whatever Slurm
    answers: a job Slurm would not requeue runs without GPUs here and fails on its own."""
    from slurmpool.pooling.requeue import requeue_job

    jobs = slurm()
    comment = _admin_comment(jobs, job)
    if not requeue_job(job, reason, jobs, node.store, node.log, comment, hold=hold):
        node.log.event(
            "not-requeued", level="error", job=job.job_id, detail="the job runs without GPUs"
        )
    elif exclude:
        from slurmpool.pooling.exclude import exclude_here

        exclude_here(node.name, job.job_id, jobs, node.store, node.log)
    return 0


def _admin_comment(slurm: SlurmJobs, job: Job) -> str | None:
    from slurmpool.slurm.runner import SlurmCommandError

    try:
        return slurm.admin_comment(job.job_id)
    except SlurmCommandError:
        return None


def _write_exports(node: Node, job: Job) -> None:
    from slurmpool.gpu.select import sim_state_dir

    allocs = node.store().for_job(job.job_id)
    lines = exports(allocs, sim_state_dir(node.config.gpu_backend))
    jobfile.write(node.run_dir, job.job_id, job.uid, lines)
    node.log.event("exports", job=job.job_id, exports=";".join(lines))


def _undo_job(node: Node, job: Job, why: str) -> None:
    """Undo whatever this prolog run (or an earlier one) allocated for the job."""
    store = node.store()
    for a in store.for_job(job.job_id):
        try:
            result = undo(node, a)
        except (ReleaseError, GpuBackendError, OSError) as e:
            node.log.event("undo-failed", level="error", job=job.job_id, alloc=a.id, error=str(e))
            continue
        with store.transaction():
            store.set_owner(a.id, None, None)
            store.set_state(a.id, RELEASED, note=f"{why}: {result.detail}")
        node.log.event("undone", job=job.job_id, alloc=a.id, why=why, detail=result.detail)
    jobfile.remove(node.run_dir, job.job_id)


def _fence(node: Node, job: Job) -> None:
    """Deny the job every MIG capability device of the node but its own, where the
    node's devices cgroup can say so (see :mod:`slurmpool.pooling.fence`).  Every
    job on a node with ``mig`` GPUs, CPU-only ones too: any job can open
    ``/dev/nvidiaN`` of a ``mig`` GPU, so the capability files are the only gate.

    A node that should fence and cannot is broken: the job's allocation is undone
    and the node drains, rather than run the job unfenced.
    """
    from slurmpool.pooling import fence

    try:
        cgroup = fence.cgroup_of(node, job)
        if cgroup is None:
            return
        gpus = node.gpus(GpuMode.MIG)
        minors = fence.capability_minors(_mig_minors(node), (g.minor for g in gpus))
        if not minors:
            raise Broken(
                f"{node.config.path('mig_minors')} lists no capability of GPU minors "
                f"{', '.join(str(g.minor) for g in gpus)}"
            )
        major = fence.caps_major(node.devices_root, min(minors))
        if major is None:
            return  # capability files that are not device nodes: nothing a cgroup can fence
        store = node.opened_store()
        own = {
            m
            for a in (store.for_job(job.job_id) if store is not None else ())
            if a.mode is GpuMode.MIG and a.state == ACTIVE
            for m in a.cap_minors
        }
        denied = fence.apply(cgroup, fence.deny_rules(major, minors - own))
    except fence.FenceError as e:
        _undo_job(node, job, "devices cgroup not written")
        raise Broken(f"cannot fence job {job.job_id}'s MIG capabilities: {e.strerror}") from None
    if own:
        node.log.event("fenced", job=job.job_id, denied=denied, own=",".join(map(str, sorted(own))))


def _mig_minors(node: Node) -> MigMinors:
    from slurmpool.driver.mig_minors import parse_mig_minors

    path = node.config.path("mig_minors")
    try:
        with open(path) as f:
            return parse_mig_minors(f.read(), path)
    except (OSError, ValueError) as e:
        raise Broken(f"cannot read the MIG capability table {path}: {e}") from None


# -- mig -----------------------------------------------------------------------


def _mig(node: Node, job: Job, count: int) -> None:
    gpus = node.gpus(GpuMode.MIG)
    cat = node.catalogue()
    if not gpus:
        raise NeverHere(f"vgpu:{count}: node {node.name} has no MIG-pooled GPUs")
    backend = node.backend()
    first = cat.get(gpus[0].model)
    try:
        names = mig_profiles(
            count, node.cls.units_per_gpu, lambda n: node.config.profile_for(first.name, n)
        )
    except RequestError as e:
        raise NeverHere(str(e)) from None
    sizes = [f"{first.gi_profile(n).slices}g" for n in names]
    migs: list[MigGpu] = []
    index_of: dict[int, int] = {}
    for g in gpus:
        i = node.nvml_index(g)
        info = backend.gpu(i)
        if not info.mig_current:
            raise Broken(f"GPU {g.index} ({info.uuid}) is pooled as mig but MIG is disabled")
        migs.append(MigGpu(g.index, cat.get(g.model), info.uuid))
        index_of[g.index] = i
    store = node.store()
    me = owner.current(node.proc_root)
    with store.transaction():
        instances = {m.index: backend.instances(index_of[m.index]) for m in migs}
        occ = occupancy(migs, store.live(), instances)
        choices = plan_instances(occ, sizes)
        if choices is None:
            used = ", ".join(f"GPU {o.index} {_slice_map(o)}" for o in occ)
            # Slices held by other jobs come back at their epilogs, which take the node
            # out of this job's ExcNodeList again; anything else (an instance no record
            # holds) is reconciled away by a later hook, so the job may come back at once.
            others = any(a.job_id != job.job_id for a in store.live())
            raise (Fragmented if others else NoRoom)(
                f"no GPU of {node.name} has room for {'+'.join(names)} "
                f"(memory slices in use, x = used: {used})"
            )
        planned = []
        for size, choice in zip(sizes, choices, strict=True):
            m = next(x for x in migs if x.index == choice.gpu_index)
            profile = engine_for(m.model).profile(size).name
            aid = store.add_intent(
                NewAllocation(
                    job_id=job.job_id,
                    user=job.user,
                    uid=job.uid,
                    mode=GpuMode.MIG,
                    gpu_index=m.index,
                    gpu_uuid=m.uuid,
                    profile=profile,
                    placement_start=choice.placement.start,
                    placement_size=choice.placement.size,
                    owner_pid=me.pid,
                    owner_start=me.start,
                    # The job's allocated count on this node; the instances carved for it.
                    details={"vgpu": count, PARTS: len(sizes), RUN: job.run},
                )
            )
            planned.append((aid, m, profile, choice))
        if publish.fit_pooled(node):
            publish.note(node, store, occupancy(migs, store.live(), instances))
    for aid, m, profile, choice in planned:
        inst = backend.create_instance(index_of[m.index], profile, choice.placement)
        node.log.event(
            "created",
            job=job.job_id,
            gpu=m.index,
            profile=profile,
            placement=str(choice.placement),
            gi=inst.gi_id,
            ci=inst.ci_id,
            uuid=inst.uuid,
        )
        if inst.uuid is None or inst.gi_minor is None or inst.ci_minor is None:
            raise Broken(
                f"GPU {m.index}: instance gi{inst.gi_id} has no MIG UUID or capability minors "
                "(is the mig-minors table readable?)"
            )
        minors = [inst.gi_minor, inst.ci_minor]
        caps.grant(node.devices_root, minors, job.uid)
        node.log.event(
            "caps-granted", job=job.job_id, uid=job.uid, minors=",".join(map(str, minors))
        )
        with store.transaction():
            store.mark_active(aid, inst.gi_id, inst.ci_id, inst.uuid, minors)
            store.set_owner(aid, None, None)
        node.log.event("active", job=job.job_id, alloc=aid, uuid=inst.uuid)


def _slice_map(gpu: GpuOccupancy) -> str:
    mask = occupancy_mask(gpu.instances)
    slices = gpu.model.require_mig().memory_slices
    return "".join("x" if mask >> s & 1 else "." for s in range(slices))


# -- shared --------------------------------------------------------------------


def _shared(node: Node, job: Job, count: int, gpu: NodeGpu | None) -> None:
    """Record the job's ``count`` shards of ``gpu``: Slurm chose the GPU (its
    ``shard`` GRES) and fences the job to it with ConstrainDevices."""
    if gpu is None:
        raise NeverHere(f"shard:{count} on node {node.name} without SLURM_JOB_GPUS naming its GPU")
    if count > gpu.shares:
        raise NeverHere(f"shard:{count}: GPU {gpu.index} of {node.name} has {gpu.shares} shares")
    info = node.backend().gpu(node.nvml_index(gpu))
    if gpu.mps:
        from slurmpool.pooling import mps
    store = node.store()
    with store.transaction():
        free = free_shares([(gpu.index, gpu.shares)], store.live()).get(gpu.index, 0)
        if free < count:
            # Slurm counts the shards; a record that outlived its job is reconciled away.
            node.log.event(
                "shares-overbooked",
                level="warning",
                job=job.job_id,
                gpu=gpu.index,
                free=free,
                shares=count,
            )
        aid = store.add_intent(
            NewAllocation(
                job_id=job.job_id,
                user=job.user,
                uid=job.uid,
                mode=GpuMode.SHARED,
                gpu_index=gpu.index,
                gpu_uuid=info.uuid,
                shares=count,
                details={
                    PARTS: 1,
                    RUN: job.run,
                    "total_shares": gpu.shares,
                    "mps": gpu.mps,
                    "memory_mib": info.memory_total_mib,
                    **({"mps_pipe": mps.pipe_dir(node.run_dir, gpu.index)} if gpu.mps else {}),
                },
            )
        )
        store.mark_active(aid)
    node.log.event("shared", job=job.job_id, gpu=gpu.index, shares=f"{count}/{gpu.shares}")
    if gpu.mps:
        # The limits the job's environment cannot raise: its user's MPS server's.
        try:
            done = mps.limit_user(node, job, gpu, info.uuid, info.memory_total_mib)
        except mps.MpsBusy as e:
            raise SharedGpuBusy(f"GPU {gpu.index}: MPS daemon busy: {e}") from None
        except (mps.MpsError, GpuBackendError, OSError) as e:
            raise Broken(f"GPU {gpu.index}: MPS limits not set: {e}") from None
        node.log.event("mps", job=job.job_id, gpu=gpu.index, detail=done)


# -- passthrough ---------------------------------------------------------------


def _passthrough(node: Node, job: Job, whole: list[NodeGpu]) -> None:
    backend = node.backend()
    policy = node.config.pooling
    store = node.store()
    me = owner.current(node.proc_root)
    for g in whole:
        index = node.nvml_index(g)
        for _ in range(4):
            info = backend.gpu(index)
            pids = [p.pid for p in backend.processes(index)]
            d = passthrough.decide(info, pids, len(backend.instances(index)), policy)
            if d.action == passthrough.OK:
                break
            node.log.event(
                "passthrough-check", job=job.job_id, gpu=g.index, step=d.action, reason=d.reason
            )
            if d.action == passthrough.BROKEN:
                raise Broken(d.reason)
            if d.action == passthrough.REFUSE:
                raise NoRoom(d.reason)
            if d.action == passthrough.KILL:
                left = stop_processes(pids, kill_grace(node), node.proc_root)
                if left:
                    raise Broken(f"GPU {g.index}: stray processes {left} survive SIGKILL")
            if d.action == passthrough.DISABLE_MIG and not backend.set_mig_mode(index, False):
                raise Broken(f"GPU {g.index}: MIG disabled, but it applies only after a GPU reset")
        else:
            raise Broken(f"GPU {g.index}: still not usable after stopping processes")
        health: dict[str, object] = {"nvml": "ok"}
        counters = backend.ecc_errors(index)
        health["ecc"] = counters if counters is not None else "not available"
        health["xid"] = "not available"  # NVML reports XIDs only as events, not counters
        details: dict[str, object] = {PARTS: len(whole), RUN: job.run, "health": health}
        binding = None
        if g.vfio:
            sysfs = vfio.Sysfs(node.config.path("sysfs_root"))
            address = vfio.pci_address(info.pci_bus_id)
            current = sysfs.link_name(f"bus/pci/devices/{address}/driver")
            binding = vfio.VfioBinding(address, current, None)
            details["vfio"] = binding.to_dict()
        with store.transaction():
            aid = store.add_intent(
                NewAllocation(
                    job_id=job.job_id,
                    user=job.user,
                    uid=job.uid,
                    mode=GpuMode.PASSTHROUGH,
                    gpu_index=g.index,
                    gpu_uuid=info.uuid,
                    owner_pid=me.pid,
                    owner_start=me.start,
                    details=dict(details),
                )
            )
        if binding is not None:
            bound = vfio.bind(vfio.Sysfs(node.config.path("sysfs_root")), binding.address)
            bound = vfio.VfioBinding(bound.address, binding.original_driver, bound.group)
            assert bound.group is not None
            vfio.hand_group(node.config.path("vfio_dev_dir"), bound.group, job.uid)
            details["vfio"] = bound.to_dict()
            node.log.event(
                "vfio-bound", job=job.job_id, gpu=g.index, address=bound.address, group=bound.group
            )
        with store.transaction():
            store.set_details(aid, dict(details))
            store.mark_active(aid)
            store.set_owner(aid, None, None)
        node.log.event(
            "passthrough", job=job.job_id, gpu=g.index, uuid=info.uuid, ecc=str(health["ecc"])
        )
