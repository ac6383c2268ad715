"""``slurmpool report --jobs-csv``: one row per GPU job from sacct, which ``slurmpool
simulate --trace`` replays."""

from __future__ import annotations

import csv
import io
import math
from datetime import datetime
from pathlib import Path

import pytest
from click.testing import CliRunner

from slurmpool.accounting.codec import encode
from slurmpool.accounting.summary import index_of, job_document
from slurmpool.cli import main
from slurmpool.report.jobs import (
    COLUMNS,
    JOB_FIELDS,
    job_rows,
    jobs_sacct_args,
    simulator_request,
    write_jobs_csv,
)
from slurmpool.simulate.trace import Task, read_trace


def _line(
    job: str,
    submit: str,
    start: str,
    end: str,
    elapsed: int,
    tres: str,
    comment: str = "",
    state: str = "COMPLETED",
    user: str = "alice",
) -> str:
    return (
        f"{job}|c|{user}|acct-{user}|gpu|{state}|{submit}|{start}|{end}|{elapsed}|"
        f"billing=1,cpu=1,{tres},mem=100M,node=1|{comment}\n"
    )


def _summary(job: str, devices: list[dict[str, object]]) -> str:
    doc = job_document(job, "c", {"n1": {"devices": devices, "carved": []}})
    return "site note " + encode(doc, index_of(doc))


MIG3 = {
    "gpu": 1,
    "gi": 1,
    "kind": "mig",
    "model": "A100-SXM4-80GB",
    "profile": "3g.40gb",
    "slices": 3,
    "of": 7,
    "util_mean": None,
}
WHOLE = {"gpu": 2, "kind": "gpu", "model": "A100-SXM4-80GB", "util_mean": 40.0}


def _lines() -> list[str]:
    return [
        _line(
            "1",
            "2026-11-02T10:00:00",
            "2026-11-02T10:05:00",
            "2026-11-02T12:05:00",
            7200,
            "gres/vgpu=3",
            _summary("1", [MIG3]),
        ),
        _line(
            "2",
            "2026-11-02T10:00:00",
            "2026-11-02T10:00:00",
            "2026-11-02T11:00:00",
            3600,
            "gres/gpu=1",
            _summary("2", [WHOLE]),
            user="bob",
        ),
        _line(  # no summary: weighted from AllocTRES
            "3",
            "2026-11-02T11:00:00",
            "2026-11-02T11:00:10",
            "2026-11-02T11:30:10",
            1800,
            "gres/gpu=2",
        ),
        _line(
            "4",
            "2026-11-02T11:00:00",
            "2026-11-02T11:00:00",
            "2026-11-02T11:00:30",
            30,
            "gres/vgpu=2",
        ),
        _line(
            "5", "2026-11-02T09:00:00", "2026-11-02T09:00:00", "2026-11-02T10:00:00", 3600, "x=1"
        ),
        _line(
            "6",
            "2026-11-02T09:00:00",
            "None",
            "2026-11-02T09:10:00",
            0,
            "gres/gpu=1",
            state="CANCELLED by 0",
        ),
        _line(
            "7",
            "2026-11-02T09:00:00",
            "2026-11-02T09:00:00",
            "Unknown",
            99,
            "gres/gpu=1",
            state="RUNNING",
        ),
        "this is not a sacct line\n",
        _line("8", "yesterday", "2026-11-02T09:00:00", "2026-11-02T09:01:00", 60, "gres/gpu=1"),
    ]


def _epoch(text: str) -> int:
    return int(datetime.fromisoformat(text).timestamp())


def test_one_row_per_gpu_job_that_ran_and_ended() -> None:
    errors: list[str] = []
    rows = {r.job_id: r for r in job_rows(_lines(), errors=errors)}
    assert list(rows) == ["1", "2", "3", "4"]  # 5: no GPU; 6: never ran; 7: still runs
    mig, whole, two, vgpu = rows["1"], rows["2"], rows["3"], rows["4"]
    assert (mig.user, mig.account, mig.request, mig.carved) == (
        "alice",
        "acct-alice",
        "vgpu=3",
        "3g.40gb",
    )
    assert (mig.submit_time, mig.wait_s, mig.elapsed_s) == (
        _epoch("2026-11-02T10:00:00"),
        300,
        7200,
    )
    assert (mig.num_gpu, mig.gpu_milli, mig.util_mean) == (1, 428, "")  # 3/7 of a GPU
    assert mig.gpu_hours == pytest.approx(3 / 7 * 2)
    assert (whole.carved, whole.util_mean, whole.num_gpu, whole.gpu_milli) == (
        "gpu",
        "40.0",
        1,
        1000,
    )
    assert (two.request, two.carved, two.num_gpu, two.gpu_milli, two.wait_s) == (
        "gpu=2",
        "",
        2,
        1000,
        10,
    )
    assert (vgpu.num_gpu, vgpu.gpu_milli) == (1, 285)  # vgpu=2 of 7 units, no summary
    assert len(errors) == 2
    assert errors[0].startswith("sacct line 8: expected 12 '|'-separated fields, got 1")
    assert "'yesterday' is not a time like 2026-12-01T08:00:00" in errors[1]


def test_units_of_a_shared_pool_come_from_vgpu_units() -> None:
    line = _line(
        "9", "2026-11-02T09:00:00", "2026-11-02T09:00:00", "2026-11-02T09:01:00", 60, "gres/shard=1"
    )
    (row,) = job_rows([line], vgpu_units=4)
    assert (row.request, row.num_gpu, row.gpu_milli) == ("shard=1", 1, 250)


@pytest.mark.parametrize("units", range(2, 11))
def test_a_fraction_reads_back_as_the_units_it_held(units: int) -> None:
    """ceil(units * milli / 1000), the simulator's rounding, gives back k of ``units``."""
    for k in range(1, units):
        gpus, milli = simulator_request(k / units)
        assert gpus == 1 and math.ceil(units * milli / 1000) == k, (k, units, milli)
    assert simulator_request(2.0) == (2, 1000)


def test_the_csv_is_a_trace_the_simulator_reads(tmp_path: Path) -> None:
    path = tmp_path / "jobs.csv"
    with open(path, "w", newline="") as f:
        assert write_jobs_csv(job_rows(_lines(), errors=[]), f) == 4
    with open(path, newline="") as f:
        assert tuple(next(csv.reader(f))) == COLUMNS
    t0 = _epoch("2026-11-02T10:00:00")
    assert read_trace(path) == [
        Task("1", t0, 7200, 1, 428),
        Task("2", t0, 3600, 1, 1000),
        Task("3", t0 + 3600, 1800, 2, 1000),
        Task("4", t0 + 3600, 30, 1, 285),
    ]


def test_the_command_writes_the_jobs_of_saved_sacct_output(tmp_path: Path) -> None:
    saved, out = tmp_path / "sacct.txt", tmp_path / "jobs.csv"
    saved.write_text("".join(_lines()))
    args = ["report", "--since", "2026-11-01", "--until", "2026-12-01", "--input", str(saved)]
    result = CliRunner().invoke(main, [*args, "--jobs-csv", str(out)])
    assert result.exit_code == 0, result.output
    assert f"wrote {out}: 4 GPU jobs" in result.output
    assert "warning: sacct line 8: expected 12" in result.output
    assert [r["job_id"] for r in csv.DictReader(io.StringIO(out.read_text()))] == [
        "1",
        "2",
        "3",
        "4",
    ]
    to_stdout = CliRunner().invoke(main, [*args, "--jobs-csv", "-"])
    assert ",".join(COLUMNS) in to_stdout.output.splitlines()  # (stderr's warnings mixed in)
    simulated = CliRunner().invoke(
        main,
        [
            "simulate",
            "--trace",
            str(out),
            "--nodes",
            "1",
            "--gpus-per-node",
            "2",
            "--model",
            "A100-SXM4-80GB",
        ],
    )
    assert simulated.exit_code == 0, simulated.output
    assert simulated.output.startswith("4 GPU tasks on 1 nodes x 2 A100-SXM4-80GB")


def test_the_command_asks_sacct_for_one_record_per_job() -> None:
    result = CliRunner().invoke(
        main, ["report", "--since", "2026-11-01", "--jobs-csv", "x.csv", "--print-sacct-args"]
    )
    assert result.exit_code == 0, result.output
    argv = result.output.split()
    assert argv[argv.index("-o") + 1] == ",".join(JOB_FIELDS)
    assert "-D" not in argv and "-X" in argv
    assert jobs_sacct_args("a", "b", ["c1"], ["p"])[-4:] == ["-M", "c1", "-r", "p"]


def test_the_jobs_csv_is_not_mixed_with_the_report() -> None:
    result = CliRunner().invoke(
        main, ["report", "--jobs-csv", "x.csv", "--json", "--html", "r.html"]
    )
    assert result.exit_code != 0
    assert (
        "--jobs-csv writes the jobs instead of the report; leave out --json, --html"
        in result.output
    )
