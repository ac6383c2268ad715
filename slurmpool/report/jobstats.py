"""One job's GPU use for its user: what it asked for, what it got, how busy it was.

Pure: built from the job's accounting fields and its decoded summary (a
finished job's AdminComment, or the node's running view from monitord),
rendered as text with sparklines, or JSON.  The sizing suggestion uses the
GPU catalogue's MIG profiles: the smallest profile whose memory holds the
job's peak (with 10% headroom) and whose slices cover its peak utilisation.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from slurmpool.accounting.summary import DeviceUse, devices, fmt_util, node_of, unpack_series
from slurmpool.catalogue import Catalogue
from slurmpool.modes import DeviceKind

SPARK = "▁▂▃▄▅▆▇█"
HEADROOM = 1.1


def sparkline(values: Sequence[int | float | None], width: int = 48) -> str:
    """``▁▃█`` per value (0..100), ``·`` where a value is missing; resampled to ``width``."""
    if not values:
        return ""
    if len(values) > width:
        step = len(values) / width
        groups = [values[int(i * step) : int((i + 1) * step) or None] for i in range(width)]
        vals: list[float | None] = []
        for g in groups:
            known = [v for v in g if v is not None]
            vals.append(sum(known) / len(known) if known else None)
    else:
        vals = [None if v is None else float(v) for v in values]
    out = []
    for v in vals:
        if v is None:
            out.append("·")
        else:
            out.append(SPARK[min(len(SPARK) - 1, max(0, int(v / 100.0 * len(SPARK))))])
    return "".join(out)


def _tres(text: str, name: str) -> int | None:
    for item in (text or "").split(","):
        key, _, value = item.partition("=")
        if key == name and value.isdigit():
            return int(value)
    return None


def _vgpu_tres(text: str) -> int | None:
    """The vgpu units of a TRES string: ``gres/vgpu`` (MIG pools) or ``gres/shard``
    (shared pools, where job_submit.lua turns a vgpu request into shards)."""
    vgpu = _tres(text, "gres/vgpu")
    return vgpu if vgpu is not None else _tres(text, "gres/shard")


@dataclass(frozen=True)
class Suggestion:
    text: str
    vgpu: int | None = None
    profile: str | None = None


def suggest(use: DeviceUse, catalogue: Catalogue | None) -> Suggestion | None:
    """A smaller request that would have fit this device's peak, or None."""
    if use.mem_max_mib is None or use.mem_total_mib is None or catalogue is None:
        return None
    try:
        model = catalogue.get(use.model or "")
    except Exception:
        return None
    if model.mig is None:
        return None
    of = model.mig.compute_slices
    if use.kind not in (DeviceKind.GPU, DeviceKind.MIG):
        return None  # a share is already smaller than any MIG profile
    held = use.weight * of  # compute slices the job held on this device
    need_mem = use.mem_max_mib * HEADROOM
    if use.util_max is not None:
        need_slices = max(1, math.ceil(held * use.util_max / 100.0 - 1e-9))
    else:
        need_slices = 1
    geo = model.mig
    for p in geo.standard_profiles():
        # Where the catalogue lacks a profile's memory, estimate it from its memory slices
        # (95%: the driver keeps some back).
        memory = p.memory_mib or 0.95 * model.memory_mib * p.memory_slices / geo.memory_slices
        if memory < need_mem or p.slices < need_slices:
            continue
        if p.slices >= held:
            return None  # nothing smaller fits
        used = (
            f"used at most {use.mem_max_mib / 1024:.1f} GiB of {use.mem_total_mib / 1024:.0f} GiB"
        )
        if use.util_max is not None:
            used += f" and {use.util_max:.0f}% SM"
        else:
            used += " (utilisation not measurable here, sized by memory)"
        return Suggestion(f"{used}: vgpu:{p.slices} ({p.name}) would have fit", p.slices, p.name)
    return None


@dataclass
class JobView:
    job_id: str
    user: str
    account: str
    state: str
    elapsed_s: int
    nodes: str
    requested: dict[str, int | None]
    allocated: dict[str, int | None]
    carved: list[dict[str, Any]]
    devices: list[DeviceUse]
    running: bool
    suggestions: list[str] = field(default_factory=list)
    note: str = ""

    def to_json(self) -> dict[str, Any]:
        return {
            "job": self.job_id,
            "user": self.user,
            "account": self.account,
            "state": self.state,
            "running": self.running,
            "elapsed_s": self.elapsed_s,
            "nodes": self.nodes,
            "requested": self.requested,
            "allocated": self.allocated,
            "carved": self.carved,
            "devices": [
                {
                    "node": d.node,
                    "gpu": d.gpu,
                    "gi": d.gi,
                    "kind": d.kind,
                    "model": d.model,
                    "profile": d.profile,
                    "fraction_of_gpu": round(d.weight, 4),
                    "util_mean": d.util_mean,
                    "util_max": d.util_max,
                    "util_available": d.util_mean is not None,
                    "mem_max_mib": d.mem_max_mib,
                    "mem_total_mib": d.mem_total_mib,
                    "energy_j": d.energy_j,
                    "samples": d.samples,
                    "duration_s": d.duration_s,
                    "util_timeline": unpack_series(str((d.timeline or {}).get("util", ""))),
                    "mem_timeline_pct": unpack_series(str((d.timeline or {}).get("mem_pct", ""))),
                }
                for d in self.devices
            ],
            "suggestions": self.suggestions,
            "note": self.note,
        }


def build_view(
    fields: Mapping[str, str],
    document: Mapping[str, Any] | None,
    *,
    running: bool,
    catalogue: Catalogue | None = None,
    note: str = "",
) -> JobView:
    """The view of one job from its sacct ``fields`` and decoded summary ``document``."""
    uses = devices(document) if document else []
    carved: list[dict[str, Any]] = []
    for key, part in sorted(((document or {}).get("nodes") or {}).items()):
        carved.extend({"node": node_of(str(key)), **c} for c in part.get("carved", ()))
    req, alloc = fields.get("ReqTRES", ""), fields.get("AllocTRES", "")
    suggestions = []
    for u in uses:
        s = suggest(u, catalogue)
        if s is not None:
            suggestions.append(f"{u.node} GPU {u.gpu}: {s.text}")
    elapsed = fields.get("ElapsedRaw", "0")
    return JobView(
        job_id=fields.get("JobIDRaw", ""),
        user=fields.get("User", ""),
        account=fields.get("Account", ""),
        state=fields.get("State", "").split(" ", 1)[0],
        elapsed_s=int(elapsed) if elapsed.isdigit() else 0,
        nodes=fields.get("NodeList", ""),
        requested={"vgpu": _vgpu_tres(req), "gpu": _tres(req, "gres/gpu")},
        allocated={"vgpu": _vgpu_tres(alloc), "gpu": _tres(alloc, "gres/gpu")},
        carved=carved,
        devices=uses,
        running=running,
        suggestions=suggestions,
        note=note,
    )


def _ask(d: Mapping[str, int | None]) -> str:
    parts = [f"{k}:{v}" for k, v in d.items() if v]
    return ", ".join(parts) or "no GPUs"


def render_text(view: JobView) -> str:
    h, rem = divmod(view.elapsed_s, 3600)
    lines = [
        f"job {view.job_id} ({view.user}, account {view.account}): {view.state}"
        f"{' (running)' if view.running and view.state != 'RUNNING' else ''}, "
        f"{h}h{rem // 60:02d}m{rem % 60:02d}s on {view.nodes or '-'}",
        f"asked for: {_ask(view.requested)}; got: {_ask(view.allocated)}",
    ]
    for c in view.carved:
        what = c.get("profile") or c.get("mode")
        where = f" at {c['placement'][0]}:{c['placement'][1]}" if c.get("placement") else ""
        uuid = f" {c['uuid']}" if c.get("uuid") else ""
        lines.append(f"  carved on {c.get('node')} GPU {c.get('gpu')}: {what}{where}{uuid}")
    if not view.devices:
        lines.append("no GPU samples for this job" + (f": {view.note}" if view.note else ""))
    for d in view.devices:
        if d.kind == DeviceKind.MIG:
            label = d.profile or "MIG instance"
        else:
            label = "share" if d.kind == DeviceKind.SHARE else "whole GPU"
        lines.append("")
        lines.append(f"{d.node} GPU {d.gpu} {label} ({d.model or 'unknown model'})")
        lines.append(
            f"  utilisation: mean {fmt_util(d.util_mean)}, max {fmt_util(d.util_max)}"
            + ("" if d.util_mean is not None else "  (not measurable on this GPU: MIG without GPM)")
        )
        tl = d.timeline or {}
        util = unpack_series(str(tl.get("util", "")))
        if any(v is not None for v in util):
            lines.append(f"  busy  {sparkline(util)}")
        mem_series = unpack_series(str(tl.get("mem_pct", "")))
        if mem_series:
            lines.append(f"  mem   {sparkline(mem_series)}")
        if d.mem_max_mib is not None and d.mem_total_mib:
            head = 100.0 * (1 - d.mem_max_mib / d.mem_total_mib)
            lines.append(
                f"  memory: peak {d.mem_max_mib / 1024:.1f} GiB of {d.mem_total_mib / 1024:.1f} GiB"
                f" ({head:.0f}% headroom)"
            )
        extra = f", energy {d.energy_j / 3.6e6:.3f} kWh" if d.energy_j else ""
        noun = "sample" if d.samples == 1 else "samples"
        lines.append(f"  {d.samples} {noun} over {d.duration_s:.0f} s{extra}")
    for s in view.suggestions:
        lines.append(f"suggestion: {s}")
    if view.note and view.devices:
        lines.append(f"note: {view.note}")
    return "\n".join(lines) + "\n"
