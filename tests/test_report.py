"""Pool report: sacct parsing (recorded 22.05 output), slice weighting, renderers, heatmap."""

from __future__ import annotations

import json
import sys
from datetime import datetime
from pathlib import Path

import needs
import pytest
from click.testing import CliRunner

from slurmpool.accounting.codec import encode
from slurmpool.accounting.summary import index_of, job_document
from slurmpool.cli import main
from slurmpool.report.aggregate import Aggregator, gpu_hours
from slurmpool.report.heatmap import MissingExtra, write_png
from slurmpool.report.html import render
from slurmpool.report.render import to_csv, to_json, to_table
from slurmpool.report.sacct import parse_lines, sacct_args

DATA = Path(__file__).parent / "data" / "slurm-22.05"
# Recorded on the sandbox with:
#   sacct -a -X -D -n -P -o JobIDRaw,User,Account,Partition,NodeList,State,Start,ElapsedRaw,
#         AllocTRES,Cluster,AdminComment -S 2026-12-01 -E now
# Job 1 carries a summary written by `sacctmgr modify job` (lowercased, quotes -> backticks),
# jobs 2-3 hand-written malformed "sp1:" words, job 4 a prolog requeue then a cancel.
RECORDED = DATA / "sacct-report-parsable2.txt"


def _ts(text: str) -> float:
    return datetime.fromisoformat(text).timestamp()


def test_parse_recorded_sacct_output() -> None:
    recs = list(parse_lines(RECORDED.read_text().splitlines()))
    assert [r.job_id for r in recs] == ["1", "2", "3", "4", "4"]
    assert recs[0].admin_comment.startswith("site `note` sp1:sbx1,0,mig,a100-sxm4-80gb,2g.20gb,")
    assert recs[3].state == "REQUEUED" and recs[4].state == "CANCELLED"
    assert recs[4].start == "None" and recs[4].nodes == "None assigned"
    assert "gres/vgpu=2" in recs[0].alloc_tres


def test_report_over_recorded_output() -> None:
    agg = Aggregator(_ts("2026-12-01T00:00:00"), _ts("2026-12-03T00:00:00"))
    agg.add_lines(RECORDED.read_text().splitlines(keepends=True))
    rep = agg.result()
    assert rep.records == 5 and rep.bad_comments == 2  # jobs 2 and 3: no payload
    alice = rep.groups["user"]["sp-alice"]
    assert alice.alloc_h == pytest.approx(2 / 7 * 2 / 3600)  # 2g of 7 for 2 s
    assert alice.measured_h == 0 and alice.util is None  # Ampere MIG: not measurable
    assert rep.groups["profile"]["2g.20gb"].jobs == 1
    root = rep.groups["user"]["root"]
    assert root.alloc_h == pytest.approx(3 / 3600)  # gres/gpu=1 for 1 s + 2 s (from AllocTRES)
    assert rep.groups["user"]["spx-carol"].requeues == 1


@pytest.mark.parametrize("version", ["22.05", "24.11", "26.05"])
def test_report_over_each_slurm(version: str) -> None:
    """The report's sacct query as each Slurm answers it, recorded on the sandbox by
    record-sandbox.sh: a vgpu:3 job (3g.40gb, its summary pushed by monitord behind
    a site's word), a gpu:1 job, a job cancelled while pending, one that ran."""
    lines = (DATA.parent / f"slurm-{version}" / "sacct-report-sandbox.txt").read_text()
    recs = list(parse_lines(lines.splitlines()))
    assert [r.state for r in recs] == ["CANCELLED", "CANCELLED", "CANCELLED", "COMPLETED"]
    vgpu, gpu = recs[0], recs[1]
    assert "gres/vgpu=3" in vgpu.alloc_tres and "gres/gpu=1" in gpu.alloc_tres
    assert recs[2].nodes == "None assigned" and recs[2].start == "None"
    day = vgpu.start[:10]
    agg = Aggregator(_ts(f"{day}T00:00:00"), _ts(f"{day}T23:59:59"))
    agg.add_lines(lines.splitlines(keepends=True))
    rep = agg.result()
    assert rep.records == 4 and rep.bad_comments == 0
    assert rep.groups["profile"]["3g.40gb"].jobs == 1
    root = rep.groups["user"]["root"]
    assert root.alloc_h == pytest.approx((3 / 7 * vgpu.elapsed_s + gpu.elapsed_s) / 3600)


def _line(
    job: str,
    user: str,
    start: str,
    elapsed: int,
    tres: str,
    comment: str = "",
    state: str = "COMPLETED",
    node: str = "n1",
) -> str:
    return f"{job}|{user}|acct-{user}|gpu|{node}|{state}|{start}|{elapsed}|{tres}|c|{comment}\n"


def _summary(job: str, node: str, devices: list[dict[str, object]]) -> str:
    doc = job_document(job, "c", {node: {"devices": devices, "carved": []}})
    return encode(doc, index_of(doc))


def _lines() -> list[str]:
    mig2 = {
        "gpu": 0,
        "gi": 3,
        "kind": "mig",
        "model": "H100-SXM5-80GB",
        "profile": "2g.20gb",
        "slices": 2,
        "of": 7,
        "util_mean": 50.0,
    }
    mig_na = {
        "gpu": 1,
        "gi": 1,
        "kind": "mig",
        "model": "A100-SXM4-80GB",
        "profile": "3g.40gb",
        "slices": 3,
        "of": 7,
        "util_mean": None,
    }
    whole = {"gpu": 2, "kind": "gpu", "model": "H100-SXM5-80GB", "util_mean": 10.0}
    return [
        _line(
            "1",
            "alice",
            "2026-11-02T10:00:00",
            7 * 3600,
            "gres/vgpu=2",
            _summary("1", "n1", [mig2]),
        ),
        _line(
            "2", "alice", "2026-11-02T10:30:00", 3600, "gres/vgpu=3", _summary("2", "n1", [mig_na])
        ),
        _line(
            "3", "bob", "2026-11-02T11:00:00", 2 * 3600, "gres/gpu=1", _summary("3", "n2", [whole])
        ),
        _line("4", "bob", "2026-11-02T11:00:00", 1800, "gres/gpu=2"),  # no summary
        _line("5", "bob", "2026-11-02T09:00:00", 0, "gres/gpu=1", state="REQUEUED"),
        _line("6", "carol", "2026-11-02T09:00:00", 3600, "cpu=4"),  # not a GPU job
        _line("7", "dan", "Unknown", 0, "gres/gpu=1", state="PENDING"),
        "this is not a sacct line\n",
    ]


def _report() -> Aggregator:
    agg = Aggregator(_ts("2026-11-02T00:00:00"), _ts("2026-11-03T00:00:00"))
    agg.add_lines(_lines())
    return agg


def test_slice_weighted_gpu_hours() -> None:
    rep = _report().result()
    alice, bob = rep.groups["user"]["alice"], rep.groups["user"]["bob"]
    assert alice.alloc_h == pytest.approx(2 / 7 * 7 + 3 / 7 * 1)  # = 2 + 3/7
    assert alice.measured_h == pytest.approx(2.0) and alice.busy_h == pytest.approx(1.0)
    assert alice.util == pytest.approx(50.0)  # the unmeasurable 3g does not count as idle
    assert bob.alloc_h == pytest.approx(2.0 + 2 * 0.5)
    assert bob.busy_h == pytest.approx(0.2) and bob.jobs == 2 and bob.requeues == 1
    assert rep.groups["model"]["H100-SXM5-80GB"].alloc_h == pytest.approx(4.0)
    assert rep.groups["profile"]["3g.40gb"].util is None
    assert "carol" not in rep.groups["user"] and "dan" not in rep.groups["user"]
    assert rep.malformed == 1 and rep.errors
    assert [w.job_id for w in rep.top_jobs] == ["3", "1"]  # 1.8 and 1.0 idle GPU-hours
    assert rep.top_users()[0][0] == "bob"


def test_window_clips_jobs() -> None:
    agg = Aggregator(_ts("2026-11-02T12:00:00"), _ts("2026-11-02T14:00:00"))
    agg.add_lines(_lines())
    alice = agg.result().groups["user"]["alice"]
    assert alice.alloc_h == pytest.approx(2 / 7 * 2)  # job 1 ran 10:00-17:00


def test_heatmap_cells() -> None:
    rep = _report().result()
    assert rep.heatmap_rows == ["n1/gpu0", "n2/gpu2"]  # unmeasured devices have no cells
    row = rep.heatmap[0]
    assert row[10] == pytest.approx(50.0) and row[9] is None and row[17] is None


def test_renderers(tmp_path: Path) -> None:
    rep = _report().result()
    table = to_table(rep)
    assert "by user" in table and "alice" in table and "n/a" in table
    data = to_json(rep)
    assert data["groups"]["user"]["alice"]["gpu_hours_allocated"] == pytest.approx(
        2 + 3 / 7, abs=1e-3
    )
    json.dumps(data)
    csv_text = to_csv(rep)
    assert csv_text.splitlines()[0].startswith("dimension,key,gpu_hours_allocated")
    page = render(rep)
    assert page.startswith("<!DOCTYPE html>") and page.count("<svg") >= 3


def test_html_escapes_hostile_names() -> None:
    agg = Aggregator(_ts("2026-11-02T00:00:00"), _ts("2026-11-03T00:00:00"))
    agg.add_lines([_line("9", "<script>x</script>", "2026-11-02T10:00:00", 60, "gres/gpu=1")])
    page = render(agg.result())
    assert "<script>" not in page and "&lt;script&gt;" in page


def test_heatmap_png(tmp_path: Path) -> None:
    needs.module("matplotlib")
    out = write_png(_report().result(), tmp_path / "h.png")
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_heatmap_without_matplotlib(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setitem(sys.modules, "matplotlib", None)  # what an absent package looks like
    with pytest.raises(MissingExtra, match=r"pip install 'slurmpool\[report\]'"):
        write_png(_report().result(), tmp_path / "h.png")
    f = tmp_path / "in.txt"
    f.write_text("".join(_lines()))
    res = CliRunner().invoke(
        main, ["report", "--input", str(f), "--heatmap", str(tmp_path / "x.png")]
    )
    assert res.exit_code == 1 and "needs matplotlib" in res.output
    assert not (tmp_path / "x.png").exists()


def test_report_command(tmp_path: Path) -> None:
    f = tmp_path / "in.txt"
    f.write_text("".join(_lines()))
    args = ["report", "--input", str(f), "--since", "2026-11-02", "--until", "2026-11-03"]
    res = CliRunner().invoke(main, [*args, "--json", "--html", str(tmp_path / "r.html")])
    assert res.exit_code == 0, res.output
    data = json.loads(res.stdout)
    assert data["groups"]["user"]["bob"]["requeues"] == 1
    assert (tmp_path / "r.html").read_text().startswith("<!DOCTYPE html>")
    res = CliRunner().invoke(main, [*args, "--csv"])
    assert res.exit_code == 0 and res.output.startswith("dimension,key")
    res = CliRunner().invoke(main, ["report", "--since", "yesterday"])
    assert res.exit_code == 2 and "cannot read the time 'yesterday'" in res.output


def test_sacct_arguments() -> None:
    args = sacct_args("2026-11-01T00:00:00", "2026-12-01T00:00:00", ["pool"])
    assert args[:5] == ["-a", "-X", "-D", "-n", "-P"]
    assert args[args.index("-o") + 1].endswith(",AdminComment")
    assert args[-2:] == ["-M", "pool"]


def test_gpu_hours_of_short_jobs_are_not_shown_as_zero() -> None:
    assert gpu_hours(0) == "0.00"
    assert gpu_hours(0.0027777) == "0.0028"
    assert gpu_hours(0.01) == "0.01"
    assert gpu_hours(12.345) == "12.35"


def test_shards_without_a_summary_count_as_vgpu_units() -> None:
    # Shares of a shared GPU are allocated as shards (job_submit.lua rewrites vgpu:N).
    agg = Aggregator(_ts("2026-11-02T00:00:00"), _ts("2026-11-03T00:00:00"), vgpu_units=4)
    agg.add_lines([_line("8", "erin", "2026-11-02T10:00:00", 3600, "cpu=1,gres/shard=2,node=1")])
    assert agg.result().groups["user"]["erin"].alloc_h == pytest.approx(0.5)
