"""simulate's figures over time and by size, the progress it reports, and its HTML page."""

from __future__ import annotations

import re
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest
from click.testing import CliRunner

from slurmpool.catalogue import Catalogue
from slurmpool.cli import main
from slurmpool.simulate.html import render
from slurmpool.simulate.pools import uniform
from slurmpool.simulate.replay import compare
from slurmpool.simulate.series import QueueSeries, WaitsBySize
from slurmpool.simulate.trace import Task

A100 = "A100-SXM4-80GB"


def test_the_queue_is_averaged_over_time_bins() -> None:
    series = QueueSeries(100, 10)
    series.add(100, 105, 2)  # 2 tasks for 5 s of bin 0
    series.add(105, 125, 1)  # 1 task: 5 s of bin 0, all of bin 1, 5 s of bin 2
    series.add(125, 140, 0)  # nobody waits: the bins still exist
    assert series.points() == [(100, 1.5), (110, 1.0), (120, 0.5), (130, 0.0)]
    assert QueueSeries.over(0, 2999).width == 10  # about 300 bins over the arrivals


def test_waits_are_kept_per_request_size() -> None:
    by_size = WaitsBySize(7)
    by_size.add(Task("a", 0, 1, 1, 400), 10)  # 3 of 7 slices
    by_size.add(Task("b", 0, 1, 1, 420), 30)
    by_size.add(Task("c", 0, 1, 2, 1000), 5)
    by_size.add(Task("d", 0, 1, 1, 1000), 0)
    assert by_size.rows() == [("3/7 GPU", 2, 20.0), ("1 GPU", 1, 0.0), ("2 GPU", 1, 5.0)]


def _tasks() -> list[Task]:
    return [
        Task("a", 0, 100, 1, 1000),
        Task("b", 0, 100, 1, 500),
        Task("c", 10, 50, 1, 300),
        Task("d", 20, 10, 2, 1000),
    ]


def test_the_replay_says_how_far_it_is(catalogue: Catalogue) -> None:
    heard: list[tuple[str, int, int]] = []
    compare(
        _tasks(),
        ["whole", "fluid"],
        uniform(1, 2, catalogue.get(A100)),
        progress=lambda *a: heard.append(a),
    )
    assert heard[-1] == ("fluid", 4, 4)
    assert ("whole", 4, 4) in heard
    assert all(0 <= done <= total == 4 for _, done, total in heard)


def test_the_page_draws_one_line_and_bars_per_policy(catalogue: Catalogue) -> None:
    results = compare(_tasks(), ["whole", "fluid"], uniform(1, 2, catalogue.get(A100)))
    # whole: c and d wait (queue 1 then 2); fluid: c fits beside b, d waits.
    assert max(y for _, y in results[0].queue) > 0
    page = render(results, "trace <b>&amp; pool</b>")
    assert "<b>&amp;" not in page and "trace &lt;b&gt;&amp;amp; pool&lt;/b&gt;" in page
    svgs = [ET.fromstring(s) for s in re.findall(r"<svg.*?</svg>", page, re.S)]
    assert len(svgs) == 3
    ns = "{http://www.w3.org/2000/svg}"
    queue, waits, use = svgs
    assert len(queue.findall(f"{ns}polyline")) == 2
    # Sizes: 3/7 and 4/7 of a GPU (c, b), 1 GPU (a), 2 GPU (d); a bar per policy each.
    labels = [t.text for t in waits.findall(f"{ns}text")]
    assert {"3/7 GPU", "4/7 GPU", "1 GPU", "2 GPU"} <= set(labels)
    assert len(waits.findall(f"{ns}rect")) == 8
    assert len(use.findall(f"{ns}rect")) == 2
    for svg in svgs:
        width, height = float(svg.get("width", 0)), float(svg.get("height", 0))
        for rect in svg.iter(f"{ns}rect"):
            x, y = float(rect.get("x", 0)), float(rect.get("y", 0))
            w, h = float(rect.get("width", 0)), float(rect.get("height", 0))
            assert x >= 0 and x + w <= width + 0.5 and y >= 0 and y + h <= height + 0.5


def test_the_command_writes_the_page(tmp_path: Path) -> None:
    trace = tmp_path / "jobs.csv"
    trace.write_text(
        "job_id,num_gpu,gpu_milli,submit_time,elapsed_s\n1,1,500,0,100\n2,1,1000,0,100\n"
    )
    page = tmp_path / "sim.html"
    args = ["simulate", "--trace", str(trace), "--nodes", "1", "--gpus-per-node", "1"]
    result = CliRunner().invoke(main, [*args, "--model", A100, "--html", str(page)])
    assert result.exit_code == 0, result.output
    assert f"wrote {page}" in result.output
    text = page.read_text()
    assert text.startswith("<!DOCTYPE html>") and "2 GPU tasks on 1 nodes x 1" in text
    bad = CliRunner().invoke(main, [*args, "--model", A100, "--html", str(tmp_path)])
    assert bad.exit_code != 0


@pytest.mark.parametrize("policy", ["whole", "mig"])
def test_json_carries_the_series(catalogue: Catalogue, policy: str) -> None:
    (result,) = compare(_tasks(), [policy], uniform(1, 2, catalogue.get(A100)))
    data = result.to_json()
    assert data["queue"] and data["waits_by_size"]
