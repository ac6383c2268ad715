"""A job's GPU summary, built from its samples on one node (pure functions).

The document stored in AdminComment covers every node of the job::

    {"v": 1, "job": "42", "cluster": "pool", "nodes": {"sbx1": NODE, "sbx1@1": NODE, ...}}

keyed by node and run (:func:`part_key`: the node's name for a job's first
run, ``node@N`` for its run N after N requeues, as a requeued job may run on
one node more than once), and one node's part of one run (``NODE``) is::

    {"user": "alice", "run": 0, "start": T, "end": T,
     "request": {"vgpu": 2, "gpu": null},
     "carved": [{"gpu": 0, "mode": "mig", "profile": "2g.20gb", "placement": [0, 2],
                 "gi": 3, "ci": 0, "uuid": "MIG-..."}],
     "devices": [{"gpu": 0, "gi": 3, "kind": "mig", "model": "A100-SXM4-80GB",
                  "profile": "2g.20gb", "slices": 2, "of": 7,
                  "util_mean": null, "util_max": null, "util_source": null,
                  "mem_max_mib": 4000, "mem_total_mib": 19968, "energy_j": null,
                  "samples": 12, "duration_s": 110.0,
                  "timeline": {"step_s": 10.0, "util": "3c3d--", "mem_pct": "1414--"}}]}

Timelines are packed strings (two hex digits per step, ``--`` for none),
which keeps the summary small and fast to decode in a report over a
million jobs.  ``util_mean``/``util_max`` are null where the hardware reports no
utilisation (MIG on Ampere): "not available", never zero.  Merging node
parts (:func:`merge`) replaces the part of that node and run, so pushing the
same summary twice never duplicates anything, and no run replaces another.
"""

from __future__ import annotations

import math

from slurmpool.modes import DeviceKind, GpuMode
from slurmpool.records import record

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Iterable, Mapping, Sequence
    from typing import Any

    from slurmpool.state.samples import DeviceSample, DeviceTotals

SUMMARY_VERSION = 1
TIMELINE_POINTS = 48
NA = "n/a"


@record(frozen=True, slots=True)
class Carved:
    """What the hooks gave the job on one GPU (from an allocation record)."""

    gpu: int
    mode: GpuMode
    profile: str | None = None
    placement: tuple[int, int] | None = None
    gi: int | None = None
    ci: int | None = None
    uuid: str | None = None
    shares: int | None = None
    total_shares: int | None = None

    def to_json(self) -> dict[str, Any]:
        d: dict[str, Any] = {"gpu": self.gpu, "mode": self.mode.value}
        for key in ("profile", "gi", "ci", "uuid", "shares", "total_shares"):
            value = getattr(self, key)
            if value is not None:
                d[key] = value
        if self.placement is not None:
            d["placement"] = list(self.placement)
        return d


def _round(value: float | None, digits: int = 1) -> float | None:
    return None if value is None else round(float(value), digits)


def pack_series(values: Sequence[int | None]) -> str:
    """Percentages 0..100 as two hex digits each, ``--`` for None (compact, lowercase-safe)."""
    return "".join("--" if v is None else f"{max(0, min(255, int(v))):02x}" for v in values)


def unpack_series(text: str) -> list[int | None]:
    """The inverse of :func:`pack_series`."""
    return [
        None if text[i : i + 2] == "--" else int(text[i : i + 2], 16)
        for i in range(0, len(text) - 1, 2)
    ]


def timeline(
    samples: Sequence[DeviceSample],
    start: float,
    end: float,
    points: int = TIMELINE_POINTS,
    mem_total_mib: int | None = None,
) -> dict[str, Any]:
    """Mean utilisation and peak memory (percent of the device) of one device in at most
    ``points`` equal steps, packed with :func:`pack_series`.

    A step without samples, or whose samples have no utilisation, is ``--``.
    """
    span = max(end - start, 1e-9)
    n = max(1, min(points, len(samples)))
    step = span / n
    util_sum = [0.0] * n
    util_cnt = [0] * n
    mem: list[int | None] = [None] * n
    for s in samples:
        b = min(n - 1, max(0, int((s.t - start) / step)))
        if s.util is not None:
            util_sum[b] += s.util
            util_cnt[b] += 1
        if s.mem_used_mib is not None:
            cur = mem[b]
            mem[b] = s.mem_used_mib if cur is None else max(cur, s.mem_used_mib)
    total = mem_total_mib or max((m for m in mem if m is not None), default=0) or 1
    return {
        "step_s": round(step, 3),
        "util": pack_series(
            [round(util_sum[i] / util_cnt[i]) if util_cnt[i] else None for i in range(n)]
        ),
        "mem_pct": pack_series([None if m is None else round(100 * m / total) for m in mem]),
    }


def device_summary(
    totals: DeviceTotals, samples: Sequence[DeviceSample], points: int = TIMELINE_POINTS
) -> dict[str, Any]:
    """One device's part of a node summary (see the module docstring)."""
    duration = max(0.0, totals.last_t - totals.first_t)
    d: dict[str, Any] = {
        "gpu": totals.gpu_index,
        "gi": totals.gi_id,
        "kind": totals.kind,
        "model": totals.model,
        "profile": totals.profile,
        "slices": totals.slices,
        "of": totals.total_slices,
        "util_mean": _round(totals.util_mean),
        "util_max": _round(totals.util_max),
        "util_source": totals.util_source if totals.util_n else None,
        "mem_max_mib": totals.mem_max_mib,
        "mem_total_mib": totals.mem_total_mib,
        "energy_j": _round(totals.energy_j, 0) if totals.kind == DeviceKind.GPU else None,
        "samples": totals.n,
        "duration_s": round(duration, 1),
    }
    if samples:
        d["timeline"] = timeline(
            samples, totals.first_t, totals.last_t, points, totals.mem_total_mib
        )
    return d


def node_summary(
    *,
    user: str | None,
    totals: Sequence[DeviceTotals],
    samples: Sequence[DeviceSample],
    carved: Sequence[Carved],
    request: Mapping[str, int | None],
    start: float | None,
    end: float,
    run: int = 0,
    points: int = TIMELINE_POINTS,
) -> dict[str, Any]:
    """This node's part of a job summary.

    ``totals`` and ``samples`` are the job's rows on this node; ``start``
    defaults to the first sample.
    """
    by_device: dict[tuple[int, int | None], list[DeviceSample]] = {}
    for s in samples:
        by_device.setdefault((s.gpu_index, s.gi_id), []).append(s)
    first = min((t.first_t for t in totals), default=None)
    return {
        "user": user,
        "run": run,
        "start": round(start if start is not None else (first or end), 1),
        "end": round(end, 1),
        "request": dict(request),
        "carved": [c.to_json() for c in carved],
        "devices": [
            device_summary(t, by_device.get((t.gpu_index, t.gi_id), ()), points) for t in totals
        ],
    }


def part_key(node: str, run: int) -> str:
    """The key of one node's part of one run in a job document: the node's name for
    the first run (as in every document before runs were told apart), ``node@N`` after."""
    return node if run == 0 else f"{node}@{run}"


def node_of(key: str) -> str:
    """The node a document key names (Slurm node names hold no ``@``)."""
    return key.partition("@")[0]


def _run_of(part: Mapping[str, Any]) -> int:
    run = part.get("run", 0)
    return run if isinstance(run, int) and run >= 0 else 0


def job_document(job_id: str, cluster: str | None, nodes: Mapping[str, Any]) -> dict[str, Any]:
    return {"v": SUMMARY_VERSION, "job": job_id, "cluster": cluster, "nodes": dict(nodes)}


def merge(
    existing: Mapping[str, Any] | None,
    job_id: str,
    cluster: str | None,
    node: str,
    part: Mapping[str, Any],
) -> dict[str, Any]:
    """``existing`` (a decoded AdminComment, or None) with ``node``'s part of the run
    ``part`` names set to ``part``.

    Another job's summary, or an unknown version, is replaced rather than merged.
    """
    nodes: dict[str, Any] = {}
    if (
        existing is not None
        and existing.get("v") == SUMMARY_VERSION
        and str(existing.get("job")) == job_id
        and isinstance(existing.get("nodes"), dict)
    ):
        nodes.update(existing["nodes"])
    nodes[part_key(node, _run_of(part))] = dict(part)
    return job_document(job_id, cluster, nodes)


def contains(document: Mapping[str, Any], node: str, part: Mapping[str, Any]) -> bool:
    """True when ``document`` holds exactly ``part`` for ``node`` and the part's run
    (the push verification)."""
    nodes = document.get("nodes")
    return isinstance(nodes, dict) and nodes.get(part_key(node, _run_of(part))) == dict(part)


# -- reading a summary back ----------------------------------------------------------


@record(frozen=True, slots=True)
class DeviceUse:
    """One device of a decoded summary, with its weight within a GPU."""

    node: str
    gpu: int
    gi: int | None
    kind: str
    model: str | None
    profile: str | None
    weight: float  # slices/total slices for MIG, shares/total shares for a share, else 1
    util_mean: float | None
    util_max: float | None
    mem_max_mib: int | None
    mem_total_mib: int | None
    energy_j: float | None
    samples: int
    duration_s: float
    timeline: Mapping[str, Any] | None


def _share_fractions(part: Mapping[str, Any]) -> dict[Any, tuple[int, int]]:
    """GPU index -> (shares held, shares of the GPU) of a node part's shared allocations."""
    out = {}
    for c in part.get("carved", ()):
        n, total = c.get("shares"), c.get("total_shares")
        if c.get("mode") == GpuMode.SHARED and n and total:
            out[c.get("gpu")] = (int(n), int(total))
    return out


def devices(document: Mapping[str, Any]) -> list[DeviceUse]:
    """Every device of a decoded job summary, across its nodes."""
    out: list[DeviceUse] = []
    nodes = document.get("nodes")
    if not isinstance(nodes, dict):
        return out
    for key, part in sorted(nodes.items()):
        node = node_of(str(key))
        shares = {c.get("gpu"): c.get("shares") for c in part.get("carved", ()) if c.get("shares")}
        for d in part.get("devices", ()):
            slices, of = d.get("slices"), d.get("of")
            if d.get("kind") == DeviceKind.MIG and slices and of:
                weight = slices / of
            elif d.get("kind") == DeviceKind.SHARE and d.get("gpu") in shares:
                weight = shares[d.get("gpu")][0] / shares[d.get("gpu")][1]
            else:
                weight = 1.0
            out.append(
                DeviceUse(
                    node=node,
                    gpu=int(d.get("gpu", 0)),
                    gi=d.get("gi"),
                    kind=str(d.get("kind", "gpu")),
                    model=d.get("model"),
                    profile=d.get("profile"),
                    weight=weight,
                    util_mean=d.get("util_mean"),
                    util_max=d.get("util_max"),
                    mem_max_mib=d.get("mem_max_mib"),
                    mem_total_mib=d.get("mem_total_mib"),
                    energy_j=d.get("energy_j"),
                    samples=int(d.get("samples", 0)),
                    duration_s=float(d.get("duration_s", 0.0)),
                    timeline=d.get("timeline"),
                )
            )
    return out


def fmt_util(value: float | None) -> str:
    """``"61%"``, or ``"n/a"`` where utilisation is not available."""
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return NA
    return f"{value:.0f}%"


def weighted_util(uses: Iterable[DeviceUse]) -> float | None:
    """Slice-weighted mean utilisation over the devices that report one (None if none do)."""
    num = den = 0.0
    for u in uses:
        if u.util_mean is not None:
            num += u.util_mean * u.weight
            den += u.weight
    return num / den if den else None


# -- the clear-text report index -------------------------------------------------------
#
# One entry per device, ``;``-separated: ``node,gpu,kind,model,profile,weight,util``
# with ``weight`` a fraction of a GPU (``2/7``, ``1/4``, ``1``) and ``util`` the mean
# utilisation or ``na``.  Lowercase (sacctmgr lowercases anyway); ``-`` for none.


def _weight_text(d: Mapping[str, Any], shares: Mapping[Any, tuple[int, int]]) -> str:
    if d.get("kind") == DeviceKind.MIG and d.get("slices") and d.get("of"):
        return f"{int(d['slices'])}/{int(d['of'])}"
    if d.get("kind") == DeviceKind.SHARE and d.get("gpu") in shares:
        n, total = shares[d.get("gpu")]
        return f"{n}/{total}"
    return "1"


def index_of(document: Mapping[str, Any]) -> str:
    """The report index of a job document (see above)."""
    entries = []
    nodes = document.get("nodes") or {}
    for key, part in sorted(nodes.items()):
        shares = _share_fractions(part)
        for d in part.get("devices", ()):
            util = d.get("util_mean")
            fields = (
                node_of(str(key)),
                str(d.get("gpu", "-")),
                str(d.get("kind") or "-"),
                str(d.get("model") or "-"),
                str(d.get("profile") or "-"),
                _weight_text(d, shares),
                "na" if util is None else f"{float(util):.1f}",
            )
            entries.append(",".join(f.replace(",", "_").replace(";", "_") for f in fields))
    return ";".join(entries)


IndexEntry = tuple[str, str, str, str, str, float, float | None]


def parse_index(index: str) -> list[IndexEntry]:
    """``(node, gpu, kind, model, profile, weight, util or None)`` per device.

    Raises ValueError on an entry that is not seven fields with a numeric weight.
    """
    out: list[IndexEntry] = []
    if not index:
        return out
    for entry in index.split(";"):
        f = entry.split(",")
        if len(f) != 7:
            raise ValueError(f"summary index entry {entry!r}: expected 7 ','-separated fields")
        w = f[5]
        num, sep, den = w.partition("/")
        weight = int(num) / int(den) if sep else float(w)
        util = None if f[6] == "na" else float(f[6])
        out.append((f[0], f[1], f[2], f[3], f[4], weight, util))
    return out
