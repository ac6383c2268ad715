"""The HTML pool report: summary, bar charts and the heatmap as inline SVG.

One self-contained file (no scripts, no network), every name escaped.
"""

from __future__ import annotations

import html
import time
from pathlib import Path

from slurmpool.report.aggregate import DIMENSIONS, Bucket, PoolReport, gpu_hours

CSS = """
body{font-family:system-ui,sans-serif;margin:2em;color:#222}
table{border-collapse:collapse;margin:.5em 0 1.5em}
td,th{padding:2px 10px;border-bottom:1px solid #ddd;text-align:right}
td:first-child,th:first-child{text-align:left}
h2{margin-top:1.5em} .note{color:#666;font-size:90%}
"""


def esc(text: object) -> str:
    return html.escape(str(text), quote=True)


def when(t: float) -> str:
    return time.strftime("%Y-%m-%d %H:%M", time.localtime(t))


def _util(b: Bucket) -> str:
    return "n/a" if b.util is None else f"{b.util:.0f}%"


def bar_chart(rows: list[tuple[str, Bucket]], width: int = 640) -> str:
    """Horizontal bars: allocated GPU-hours (light) with busy GPU-hours (dark) inside."""
    if not rows:
        return '<p class="note">no data</p>'
    label_w, bar_h, gap = 160, 16, 6
    top = max(b.alloc_h for _k, b in rows) or 1.0
    scale = (width - label_w - 90) / top
    height = len(rows) * (bar_h + gap) + gap
    parts = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
        'role="img" aria-label="GPU-hours allocated and busy">'
    ]
    for i, (key, b) in enumerate(rows):
        y = gap + i * (bar_h + gap)
        parts.append(f'<text x="0" y="{y + 12}" font-size="12">{esc(key[:24])}</text>')
        parts.append(
            f'<rect x="{label_w}" y="{y}" width="{b.alloc_h * scale:.1f}" '
            f'height="{bar_h}" fill="#9ecae1"><title>{gpu_hours(b.alloc_h)} GPU-h allocated'
            "</title></rect>"
        )
        parts.append(
            f'<rect x="{label_w}" y="{y}" width="{b.busy_h * scale:.1f}" '
            f'height="{bar_h}" fill="#3182bd"><title>{gpu_hours(b.busy_h)} GPU-h busy'
            "</title></rect>"
        )
        parts.append(
            f'<text x="{label_w + b.alloc_h * scale + 4:.1f}" y="{y + 12}" '
            f'font-size="11">{b.alloc_h:.1f} h, {esc(_util(b))}</text>'
        )
    parts.append("</svg>")
    return "".join(parts)


def _color(v: float | None) -> str:
    if v is None:
        return "#dddddd"
    x = max(0.0, min(100.0, v)) / 100.0
    r, g, b = int(247 - 200 * x), int(251 - 140 * x), int(255 - 75 * x)
    return f"rgb({r},{g},{b})"


def heatmap_svg(report: PoolReport, cell: int = 10) -> str:
    rows, grid, hours = report.heatmap_rows, report.heatmap, report.heatmap_hours
    if not rows:
        return '<p class="note">no per-device data (no slurmpool summaries in this period)</p>'
    label_w = 130
    width = label_w + len(hours) * cell + 10
    height = len(rows) * cell + 40
    parts = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
        'role="img" aria-label="utilisation per device and hour">'
    ]
    for i, (name, line) in enumerate(zip(rows, grid, strict=True)):
        y = i * cell
        parts.append(f'<text x="0" y="{y + cell - 1}" font-size="{cell - 1}">{esc(name)}</text>')
        for j, v in enumerate(line):
            tip = "no data" if v is None else f"{v:.0f}%"
            parts.append(
                f'<rect x="{label_w + j * cell}" y="{y}" width="{cell}" height="{cell}" '
                f'fill="{_color(v)}"><title>{esc(name)} {when(hours[j])}: {tip}</title></rect>'
            )
    step = max(1, len(hours) // 8)
    for j in range(0, len(hours), step):
        parts.append(
            f'<text x="{label_w + j * cell}" y="{len(rows) * cell + 14}" '
            f'font-size="10">{esc(when(hours[j]))}</text>'
        )
    parts.append("</svg>")
    return "".join(parts)


def _group_table(dim: str, table: dict[str, Bucket]) -> str:
    rows = sorted(table.items(), key=lambda kv: kv[1].alloc_h, reverse=True)
    body = "".join(
        f"<tr><td>{esc(k)}</td><td>{gpu_hours(b.alloc_h)}</td><td>{gpu_hours(b.busy_h)}</td>"
        f"<td>{esc(_util(b))}</td><td>{b.jobs}</td><td>{b.requeues}</td></tr>"
        for k, b in rows
    )
    return (
        f"<h2>By {esc(dim)}</h2>{bar_chart(rows[:25])}"
        f"<table><tr><th>{esc(dim)}</th><th>GPU-h allocated</th><th>GPU-h busy</th>"
        f"<th>utilisation</th><th>jobs</th><th>requeues</th></tr>{body}</table>"
    )


def render(report: PoolReport, title: str = "slurmpool GPU pool report") -> str:
    t = report.total
    wasters = "".join(
        f"<tr><td>{esc(w.job_id)}</td><td>{esc(w.user)}</td><td>{esc(w.account)}</td>"
        f"<td>{gpu_hours(w.idle_h)}</td><td>{gpu_hours(w.alloc_h)}</td>"
        f"<td>{'n/a' if w.util is None else f'{w.util:.0f}%'}</td></tr>"
        for w in report.top_jobs
    )
    sections = "".join(
        _group_table(dim, report.groups[dim]) for dim in DIMENSIONS if report.groups.get(dim)
    )
    return (
        f'<!DOCTYPE html><html><head><meta charset="utf-8"><title>{esc(title)}</title>'
        f"<style>{CSS}</style></head><body><h1>{esc(title)}</h1>"
        f"<p>{esc(when(report.since))} to {esc(when(report.until))}: {report.records} records, "
        f"{t.jobs} jobs, {t.requeues} requeues. <b>{gpu_hours(t.alloc_h)}</b> GPU-hours allocated "
        f"(slice-weighted: a 2g instance of 7 counts 2/7), <b>{gpu_hours(t.busy_h)}</b> busy of "
        f"{gpu_hours(t.measured_h)} measured ({esc(_util(t))}).</p>"
        '<p class="note">Utilisation counts only devices that can measure it; MIG instances '
        "on GPUs without GPM (Ampere) are allocated but not measured.</p>"
        f"<h2>Utilisation per device and hour</h2>{heatmap_svg(report)}"
        f"{sections}<h2>Top wasting jobs</h2><table><tr><th>job</th><th>user</th>"
        f"<th>account</th><th>idle GPU-h</th><th>GPU-h allocated</th><th>utilisation</th></tr>"
        f"{wasters}</table></body></html>\n"
    )


def write_html(report: PoolReport, path: str | Path) -> Path:
    out = Path(path)
    out.write_text(render(report))
    return out
