"""The heatmap PNG: utilisation per GPU (or node) and hour.  Needs matplotlib.

matplotlib is an optional extra (``pip install 'slurmpool[report]'``); without
it :func:`write_png` raises :class:`MissingExtra` with that instruction.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from slurmpool.report.aggregate import PoolReport


class MissingExtra(RuntimeError):
    """An optional dependency is not installed (the message says how to install it)."""


def require_pyplot() -> Any:
    """matplotlib's pyplot (Agg), or :class:`MissingExtra` saying how to install it."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        raise MissingExtra(
            "--heatmap needs matplotlib, which is not installed; install the report extra: "
            "pip install 'slurmpool[report]' (or: pip install matplotlib)"
        ) from None
    return plt


def write_png(report: PoolReport, path: str | Path, title: str | None = None) -> Path:
    """Draw ``report``'s heatmap to ``path`` (PNG).  Cells without data are grey."""
    plt = require_pyplot()
    rows, grid = report.heatmap_rows, report.heatmap
    hours = report.heatmap_hours
    values = [[float("nan") if v is None else v for v in row] for row in grid] or [[float("nan")]]
    height = max(2.5, 0.3 * len(rows) + 1.5)
    width = max(6.0, min(24.0, 0.12 * len(hours) + 3))
    fig, ax = plt.subplots(figsize=(width, height))
    cmap = plt.get_cmap("viridis").with_extremes(bad="#dddddd")
    im = ax.imshow(values, aspect="auto", cmap=cmap, vmin=0, vmax=100, interpolation="nearest")
    ax.set_yticks(range(len(rows)))
    ax.set_yticklabels(rows or ["(no data)"], fontsize=8)
    step = max(1, len(hours) // 12)
    ticks = list(range(0, len(hours), step))
    ax.set_xticks(ticks)
    ax.set_xticklabels(
        [time.strftime("%m-%d %H:00", time.localtime(hours[i])) for i in ticks],
        rotation=45,
        ha="right",
        fontsize=7,
    )
    ax.set_title(title or "GPU utilisation per hour (%; grey: no data or not measurable)")
    fig.colorbar(im, ax=ax, label="utilisation %")
    fig.tight_layout()
    out = Path(path)
    fig.savefig(out, format="png", dpi=100)
    plt.close(fig)
    return out
