"""What the epilog calls: turn the job's samples into a summary and put it in the outbox.

Standard library only and a handful of SQLite statements: it runs inside
the slurmd Epilog, before the job's instance is destroyed.
"""

from __future__ import annotations

import time

from slurmpool.accounting import outbox
from slurmpool.accounting.summary import Carved, node_summary
from slurmpool.modes import GpuMode
from slurmpool.state.samples import DeviceTotals, forget_totals, job_samples, job_totals
from slurmpool.state.store import RELEASED, RUN

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Mapping, Sequence
    from typing import Any

    from slurmpool.state.store import Allocation, NodeStore


def carved_from(allocations: Sequence[Allocation]) -> list[Carved]:
    """What the hooks gave the job, one entry per GPU/instance (latest record wins)."""
    latest: dict[tuple[int, int | None, str], Allocation] = {}
    for a in sorted(allocations, key=lambda a: a.id):
        latest[(a.gpu_index, a.gi_id, a.mode)] = a
    return [
        Carved(
            gpu=a.gpu_index,
            mode=a.mode,
            profile=a.profile,
            placement=(a.placement_start, a.placement_size)
            if a.placement_start is not None and a.placement_size is not None
            else None,
            gi=a.gi_id,
            ci=a.ci_id,
            uuid=a.mig_uuid,
            shares=a.shares,
            total_shares=_int_or_none(a.details.get("total_shares")) if a.details else None,
        )
        for a in latest.values()
    ]


def _int_or_none(value: Any) -> int | None:
    return int(value) if isinstance(value, int | float) and value > 0 else None


def request_of(allocations: Sequence[Allocation]) -> dict[str, int | None]:
    """What slurmctld allocated to the job on this node, as the prolog recorded it.

    A MIG allocation carries the job's vgpu count (the prolog read it from
    slurmctld); the shares of a shared allocation are its vgpu count.
    """
    live = [a for a in allocations if a.state != "intent"]
    shares = sum(a.shares or 0 for a in live if a.mode is GpuMode.SHARED)
    gpus = len({a.gpu_index for a in live if a.mode is GpuMode.PASSTHROUGH})
    mig = [_int_or_none(a.details.get("vgpu")) for a in live if a.mode is GpuMode.MIG]
    vgpu = max((n for n in mig if n is not None), default=None) or shares or None
    return {"vgpu": vgpu, "gpu": gpus or None}


def _unsampled(
    carved: Sequence[Carved], totals: Sequence[DeviceTotals], job_id: str, now: float
) -> list[DeviceTotals]:
    """Zero-sample totals for carved devices monitord never saw (so the summary lists them)."""
    seen = {(t.gpu_index, t.gi_id) for t in totals}
    out = []
    for c in carved:
        gi = c.gi if c.mode is GpuMode.MIG else None
        if (c.gpu, gi) in seen:
            continue
        out.append(
            DeviceTotals(
                job_id=job_id,
                gpu_index=c.gpu,
                gi_id=gi,
                kind=c.mode.device_kind,
                model=None,
                profile=c.profile,
                slices=None,
                total_slices=None,
                user=None,
                account=None,
                first_t=now,
                last_t=now,
                n=0,
                util_n=0,
                util_sum=0.0,
                util_max=None,
                util_source=None,
                mem_max_mib=None,
                mem_total_mib=None,
                energy_first_mj=None,
                energy_last_mj=None,
            )
        )
    return out


def build_job_summary(
    store: NodeStore,
    *,
    job_id: str,
    user: str | None,
    allocations: Sequence[Allocation] | None = None,
    request: Mapping[str, int | None] | None = None,
    run: int = 0,
    start: float | None = None,
    end: float | None = None,
) -> dict[str, Any]:
    """This node's part of ``job_id``'s summary, from the store (see :mod:`.summary`)."""
    now = time.time() if end is None else end
    allocs = (
        list(allocations)
        if allocations is not None
        else store.for_job(job_id, include_released=True)
    )
    carved = carved_from(allocs)
    totals = job_totals(store, job_id)
    totals += _unsampled(carved, totals, job_id, now)
    # Raw samples since the run's first record (an earlier run's stay out of its timeline).
    since = min((a.created_at for a in allocs), default=None) if allocations is not None else None
    samples = job_samples(store, job_id, since=since)
    return node_summary(
        user=user
        or next((a.user for a in allocs), None)
        or next((t.user for t in totals if t.user), None),
        totals=totals,
        samples=samples,
        carved=carved,
        request=dict(request or {}),
        start=start if start is not None else min((a.created_at for a in allocs), default=None),
        end=now,
        run=run,
    )


def enqueue_job_summary(
    store: NodeStore,
    *,
    job_id: str,
    node: str,
    cluster: str | None,
    user: str | None,
    allocations: Sequence[Allocation] | None = None,
    request: Mapping[str, int | None] | None = None,
    run: int = 0,
    end: float | None = None,
) -> dict[str, Any]:
    """Summarise ``job_id`` on ``node`` and put it in the outbox; returns the summary part.

    Idempotent: running the epilog again replaces the outbox entry with the
    same (or a more complete) summary.
    """
    part = build_job_summary(
        store,
        job_id=job_id,
        user=user,
        allocations=allocations,
        request=request,
        run=run,
        end=end,
    )
    outbox.put(store, job_id, node, cluster, part, now=end)
    return part


def run_of(allocations: Sequence[Allocation], default: int) -> int:
    """The run an epilog ends: the latest the prolog recorded on the job's records not
    released yet (the epilog summarises before it releases), else ``default``."""
    live = [a for a in allocations if a.state != RELEASED] or list(allocations)
    runs = [r for a in live if isinstance(r := a.details.get(RUN), int)]
    return max(runs) if runs else default


def enqueue_run(
    store: NodeStore,
    *,
    node: str,
    job_id: str,
    cluster: str | None,
    user: str | None,
    run: int = 0,
    end: float | None = None,
) -> dict[str, Any] | None:
    """Summarise the run of ``job_id`` that ended on ``node`` into the outbox, if the
    node saw GPU use, then drop the job's running totals (the summary holds them).
    The epilog calls it with its own store connection, opened with the samples and
    the outbox, and its restart count as ``run``.

    ``run`` is used only where the job's records name none (:func:`run_of`).
    Returns the summary part, or None for a job with neither allocations nor
    samples on this node (a CPU job).
    """
    allocations = store.for_job(job_id, include_released=True)
    if not allocations and not job_totals(store, job_id):
        return None
    run = run_of(allocations, run)
    this_run = [a for a in allocations if a.details.get(RUN, run) == run]
    part = enqueue_job_summary(
        store,
        job_id=job_id,
        node=node,
        cluster=cluster,
        user=user,
        allocations=this_run,
        request=request_of(this_run),
        run=run,
        end=end,
    )
    forget_totals(store, job_id)
    return part
