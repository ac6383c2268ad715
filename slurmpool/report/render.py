"""A pool report as a terminal table, JSON or CSV (pure: text in, text out)."""

from __future__ import annotations

import csv
import io
import time
from typing import Any

from slurmpool.report.aggregate import DIMENSIONS, Bucket, PoolReport, gpu_hours


def _when(t: float) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.localtime(t))


def _util(b: Bucket) -> str:
    u = b.util
    return "n/a" if u is None else f"{u:.0f}%"


def to_json(report: PoolReport) -> dict[str, Any]:
    return {
        "since": _when(report.since),
        "until": _when(report.until),
        "records": report.records,
        "skipped": report.skipped,
        "unreadable_summaries": report.bad_comments,
        "errors": report.errors,
        "total": report.total.to_json(),
        "groups": {
            dim: {k: b.to_json() for k, b in sorted(table.items())}
            for dim, table in report.groups.items()
        },
        "top_wasters": {
            "users": [{"user": u, **b.to_json()} for u, b in report.top_users()],
            "jobs": [
                {
                    "job": w.job_id,
                    "user": w.user,
                    "account": w.account,
                    "gpu_hours_idle": round(w.idle_h, 4),
                    "gpu_hours_allocated": round(w.alloc_h, 4),
                    "utilization_percent": None if w.util is None else round(w.util, 1),
                }
                for w in report.top_jobs
            ],
        },
        "heatmap": {
            "rows": report.heatmap_rows,
            "hours": [_when(h) for h in report.heatmap_hours],
            "utilization_percent": [
                [None if v is None else round(v, 1) for v in row] for row in report.heatmap
            ],
        },
    }


def to_csv(report: PoolReport) -> str:
    """One row per group: dimension, key, then the bucket's numbers."""
    out = io.StringIO()
    w = csv.writer(out, lineterminator="\n")
    cols = list(Bucket().to_json())
    w.writerow(["dimension", "key", *cols])
    w.writerow(["total", "", *report.total.to_json().values()])
    for dim in DIMENSIONS:
        for key, b in sorted(report.groups.get(dim, {}).items()):
            w.writerow([dim, key, *b.to_json().values()])
    return out.getvalue()


def _table(title: str, rows: list[tuple[str, Bucket]]) -> list[str]:
    head = (
        f"{title:<24} {'GPU-h alloc':>12} {'GPU-h busy':>11} {'util':>5} {'jobs':>7} "
        f"{'requeues':>8}"
    )
    lines = [head, "-" * len(head)]
    for key, b in rows:
        lines.append(
            f"{key[:24]:<24} {gpu_hours(b.alloc_h):>12} {gpu_hours(b.busy_h):>11} {_util(b):>5} "
            f"{b.jobs:>7} {b.requeues:>8}"
        )
    return lines


def to_table(report: PoolReport, top: int = 10) -> str:
    t = report.total
    lines = [
        f"GPU pool report {_when(report.since)} .. {_when(report.until)}",
        f"{report.records} records, {t.jobs} jobs, {t.requeues} requeues; "
        f"{gpu_hours(t.alloc_h)} GPU-hours allocated (slice-weighted), {gpu_hours(t.busy_h)} busy "
        f"of {gpu_hours(t.measured_h)} measured ({_util(t)})",
    ]
    if report.bad_comments:
        lines.append(f"warning: {report.bad_comments} unreadable AdminComment summaries")
    for dim in DIMENSIONS:
        table = report.groups.get(dim, {})
        if not table:
            continue
        rows = sorted(table.items(), key=lambda kv: kv[1].alloc_h, reverse=True)
        lines += ["", *_table(f"by {dim}", rows)]
    wasters = report.top_users(top)
    if wasters:
        lines += ["", "top wasters (idle GPU-hours, measured devices only)"]
        for u, b in wasters:
            lines.append(
                f"  {u:<20} {gpu_hours(b.idle_h):>9} idle of {gpu_hours(b.measured_h)} ({_util(b)})"
            )
    if report.top_jobs:
        lines += ["", "top wasting jobs"]
        for w in report.top_jobs[:top]:
            util = "n/a" if w.util is None else f"{w.util:.0f}%"
            lines.append(
                f"  job {w.job_id:<10} {w.user:<16} {gpu_hours(w.idle_h):>9} idle GPU-h of "
                f"{gpu_hours(w.alloc_h)} ({util})"
            )
    return "\n".join(lines) + "\n"
