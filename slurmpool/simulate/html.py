"""``slurmpool simulate --html``: the comparison as one self-contained page (inline SVG, no
scripts, every name escaped): the queue's length over time, the mean wait by request
size and the pool's use, per policy, with the figures of the table."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from slurmpool.report.html import CSS, esc
from slurmpool.simulate.replay import Result

COLORS = ("#3182bd", "#e6550d", "#31a354", "#756bb1", "#636363", "#d6616b", "#8c6d31")
WIDTH, HEIGHT, LEFT, BOTTOM = 760, 260, 56, 34


def _color(i: int) -> str:
    return COLORS[i % len(COLORS)]


def _legend(names: Sequence[str]) -> str:
    return "".join(
        f'<span style="color:{_color(i)}">&#9632;</span> {esc(n)}&nbsp;&nbsp;'
        for i, n in enumerate(names)
    )


def _frame(y_top: float, y_label: str) -> list[str]:
    """An SVG with its y axis from 0 to ``y_top``, labelled."""
    plot_h = HEIGHT - BOTTOM
    parts = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{WIDTH}" height="{HEIGHT}" role="img" '
        f'aria-label="{esc(y_label)}">',
        f'<line x1="{LEFT}" y1="0" x2="{LEFT}" y2="{plot_h}" stroke="#999"/>',
        f'<line x1="{LEFT}" y1="{plot_h}" x2="{WIDTH}" y2="{plot_h}" stroke="#999"/>',
    ]
    for k in range(5):
        value = y_top * k / 4
        y = plot_h - plot_h * k / 4
        parts.append(
            f'<text x="{LEFT - 4}" y="{y + 4:.1f}" font-size="10" text-anchor="end">'
            f"{value:.3g}</text>"
        )
    parts.append(f'<text x="4" y="12" font-size="11">{esc(y_label)}</text>')
    return parts


def _x_label(x: float, text: str) -> str:
    """A label under the x axis, centred on ``x``."""
    return (
        f'<text x="{x:.1f}" y="{HEIGHT - BOTTOM + 14}" font-size="10" text-anchor="middle">'
        f"{esc(text)}</text>"
    )


def queue_chart(results: Sequence[Result]) -> str:
    """Tasks waiting over time, one line per policy; x in days from the first arrival."""
    series = [r.queue for r in results if r.queue]
    if not series:
        return '<p class="note">no tasks</p>'
    t0 = min(s[0][0] for s in series)
    t1 = max(s[-1][0] for s in series) or t0 + 1
    top = max(y for s in series for _, y in s) or 1.0
    plot_w, plot_h = WIDTH - LEFT - 10, HEIGHT - BOTTOM
    parts = _frame(top, "tasks waiting (mean per time bin)")
    for i, r in enumerate(results):
        points = " ".join(
            f"{LEFT + plot_w * (t - t0) / max(1, t1 - t0):.1f},{plot_h - plot_h * y / top:.1f}"
            for t, y in r.queue
        )
        parts.append(
            f'<polyline fill="none" stroke="{_color(i)}" stroke-width="1.2" points="{points}">'
            f"<title>{esc(r.policy)}</title></polyline>"
        )
    days = (t1 - t0) / 86400
    for k in range(5):
        x = LEFT + plot_w * k / 4
        parts.append(_x_label(x, f"day {days * k / 4:.0f}"))
    parts.append("</svg>")
    return "".join(parts)


def wait_chart(results: Sequence[Result]) -> str:
    """Mean wait per request size, one bar per policy in each size's group."""
    sizes = list(dict.fromkeys(size for r in results for size, _, _ in r.waits_by_size))
    if not sizes:
        return '<p class="note">no tasks</p>'
    waits = [{size: w / 3600 for size, _, w in r.waits_by_size} for r in results]
    top = max((w for by in waits for w in by.values()), default=0.0) or 1.0
    plot_w, plot_h = WIDTH - LEFT - 10, HEIGHT - BOTTOM
    group = plot_w / len(sizes)
    bar = max(1.0, (group - 6) / len(results))
    parts = _frame(top, "mean wait, hours")
    for j, size in enumerate(sizes):
        x0 = LEFT + j * group + 3
        for i, (r, by) in enumerate(zip(results, waits, strict=True)):
            if size not in by:
                continue
            h = plot_h * by[size] / top
            parts.append(
                f'<rect x="{x0 + i * bar:.1f}" y="{plot_h - h:.1f}" width="{bar:.1f}" '
                f'height="{h:.1f}" fill="{_color(i)}"><title>{esc(r.policy)}, {esc(size)}: '
                f"{by[size]:.2f} h</title></rect>"
            )
        parts.append(_x_label(x0 + group / 2, size))
    parts.append("</svg>")
    return "".join(parts)


def use_chart(results: Sequence[Result]) -> str:
    """Per policy: the compute asked for over the pool's (util), as a bar."""
    bar_h, gap, label_w = 18, 6, 230
    height = len(results) * (bar_h + gap) + gap
    scale = (WIDTH - label_w - 70) / 100
    parts = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{WIDTH}" height="{height}" role="img" '
        'aria-label="utilisation per policy">'
    ]
    for i, r in enumerate(results):
        y = gap + i * (bar_h + gap)
        pct = 100 * r.util
        parts.append(f'<text x="0" y="{y + 13}" font-size="12">{esc(r.policy[:36])}</text>')
        parts.append(
            f'<rect x="{label_w}" y="{y}" width="{pct * scale:.1f}" height="{bar_h}" '
            f'fill="{_color(i)}"><title>{pct:.1f}%</title></rect>'
        )
        parts.append(
            f'<text x="{label_w + pct * scale + 4:.1f}" y="{y + 13}" font-size="11">'
            f"{pct:.1f}%</text>"
        )
    parts.append("</svg>")
    return "".join(parts)


def _table(results: Sequence[Result]) -> str:
    head = (
        "policy", "tasks", "refused", "wait mean h", "wait p95 h", "1-GPU mean h",
        "multi mean h", "util", "frag requeues", "energy MWh", "empty GPU-h", "empty MWh",
    )  # fmt: skip

    def mwh(v: float | None) -> str:
        return "-" if v is None else f"{v / 1000:.1f}"

    rows = "".join(
        "<tr>"
        + "".join(
            f"<td>{esc(c)}</td>"
            for c in (
                r.policy,
                r.tasks,
                r.refused,
                f"{r.wait_mean_s / 3600:.2f}",
                f"{r.wait_p95_s / 3600:.2f}",
                f"{r.wait_mean_single_s / 3600:.2f}",
                f"{r.wait_mean_multi_s / 3600:.2f}",
                f"{r.util:.1%}",
                r.frag_requeues,
                mwh(r.energy_kwh),
                "-" if r.empty_gpu_h is None else f"{r.empty_gpu_h:.0f}",
                mwh(r.empty_kwh),
            )
        )
        + "</tr>"
        for r in results
    )
    return "<table><tr>" + "".join(f"<th>{h}</th>" for h in head) + f"</tr>{rows}</table>"


def render(results: Sequence[Result], heading: str) -> str:
    """The page for ``results`` of one trace and pool, under ``heading``."""
    title = "slurmpool simulate"
    names = [r.policy for r in results]
    return (
        f'<!DOCTYPE html><html><head><meta charset="utf-8"><title>{title}</title>'
        f"<style>{CSS}</style></head><body><h1>{title}</h1><p>{esc(heading)}</p>"
        f"{_table(results)}<p>{_legend(names)}</p>"
        f"<h2>Queue length over time</h2>{queue_chart(results)}"
        f"<h2>Mean wait by request size</h2>{wait_chart(results)}"
        '<p class="note">A fraction k/S is k of a GPU\'s S compute slices; N GPU is N whole '
        "GPUs on one node.</p>"
        f"<h2>Utilisation per policy</h2>{use_chart(results)}"
        '<p class="note">Compute slice-hours asked for over the pool\'s, from the first '
        "arrival to the last completion.</p></body></html>\n"
    )


def write_html(results: Sequence[Result], heading: str, path: str | Path) -> Path:
    out = Path(path)
    out.write_text(render(results, heading))
    return out
