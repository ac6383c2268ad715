"""What a node's pool holds right now (read-only: no reconcile, no changes).

``node_status`` returns plain data (JSON-ready); ``render_text`` prints it.
"""

from __future__ import annotations

import os
import time

from slurmpool.catalogue import default_catalogue
from slurmpool.modes import GpuMode
from slurmpool.placement import free_capacity
from slurmpool.pooling.mig import MigGpu, instance_of, occupancy
from slurmpool.pooling.shared import free_shares
from slurmpool.state.db import store_path

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

    from slurmpool.pooling.node import Node
    from slurmpool.state.store import Allocation

STATUS_SCHEMA = 1


def _holder(a: Allocation | None) -> dict[str, Any]:
    if a is None:
        return {"job": None, "user": None, "state": "unrecorded"}
    return {"job": a.job_id, "user": a.user, "state": a.state}


def node_status(node: Node) -> dict[str, Any]:
    """GPUs, their mode, instances with job and user, free capacity and requeues."""
    has_store = os.path.exists(store_path(node.state_dir, node.name))
    records = node.store().live() if has_store else []
    backend = node.backend()
    cat = default_catalogue()
    gpus: list[dict[str, Any]] = []
    free_total: dict[str, int] = {}
    for g in node.cls.gpus:
        index = node.nvml_index(g)
        info = backend.gpu(index)
        mine = [a for a in records if a.gpu_index == g.index]
        entry: dict[str, Any] = {
            "index": g.index,
            "uuid": info.uuid,
            "model": g.model,
            "mode": g.mode,
            "mig": info.mig_current,
        }
        if g.mode.mig_enabled and info.mig_current:
            insts = backend.instances(index)
            owned = {id(i): a for a in mine if (i := instance_of(a, insts)) is not None}
            entry["instances"] = [
                {
                    "gi": i.gi_id,
                    "ci": i.ci_id,
                    "profile": i.profile,
                    "placement": str(i.placement),
                    "uuid": i.uuid,
                    **_holder(owned.get(id(i))),
                }
                for i in insts
            ]
            pending = [a for a in mine if instance_of(a, insts) is None]
            entry["pending"] = [
                {
                    "profile": a.profile,
                    "placement": f"{a.placement_start}:{a.placement_size}",
                    **_holder(a),
                }
                for a in pending
            ]
            if g.mode is GpuMode.MIG:
                occ = occupancy(
                    [MigGpu(g.index, cat.get(g.model), info.uuid)], records, {g.index: insts}
                )
                entry["free"] = free_capacity(occ)
                for k, v in entry["free"].items():
                    free_total[k] = free_total.get(k, 0) + v
        elif g.mode is GpuMode.SHARED:
            entry["shares"] = g.shares
            entry["free_shares"] = free_shares([(g.index, g.shares)], records)[g.index]
            entry["jobs"] = [{"shares": a.shares, **_holder(a)} for a in mine]
        else:
            entry["jobs"] = [_holder(a) for a in mine]
            entry["vfio"] = g.vfio
        gpus.append(entry)
    requeues: list[dict[str, Any]] = []
    count = 0
    if has_store:
        store = node.store()
        count = store.requeue_count()
        requeues = [
            {"job": j, "at": time.strftime("%Y-%m-%dT%H:%M:%S", time.localtime(at)), "reason": r}
            for j, at, r in store.requeues(10)
        ]
    return {
        "schema": STATUS_SCHEMA,
        "node": node.name,
        "node_class": node.cls.name,
        "gpus": gpus,
        "free": free_total,
        "requeue_count": count,
        "recent_requeues": requeues,
    }


def render_text(status: dict[str, Any]) -> str:
    lines = [
        f"node {status['node']} (class {status['node_class']}): requeues {status['requeue_count']}"
    ]
    for g in status["gpus"]:
        lines.append(f"  GPU {g['index']} {g['model']} {g['mode']} {g['uuid']}")
        for i in g.get("instances", []):
            who = f"job {i['job']} ({i['user']})" if i["job"] else i["state"]
            lines.append(
                f"    {i['profile']:<10} gi{i['gi']} at {i['placement']:<4} {who} {i['uuid']}"
            )
        for p in g.get("pending", []):
            lines.append(
                f"    {p['profile']:<10} at {p['placement']:<4} job {p['job']} ({p['state']})"
            )
        if "free" in g:
            free = ", ".join(f"{k}:{v}" for k, v in g["free"].items()) or "none"
            lines.append(f"    free: {free}")
        if "free_shares" in g:
            lines.append(f"    shares free: {g['free_shares']}/{g['shares']}")
        for j in g.get("jobs", []):
            lines.append(f"    job {j['job']} ({j['user']}) {j['state']}")
    if status["free"]:
        lines.append("  node free: " + ", ".join(f"{k}:{v}" for k, v in status["free"].items()))
    for r in status["recent_requeues"]:
        lines.append(f"  requeued job {r['job']} at {r['at']}: {r['reason']}")
    return "\n".join(lines)
