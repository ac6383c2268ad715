"""jobstats: the user's view of one job, sparklines and the sizing suggestion."""

from __future__ import annotations

import json
from pathlib import Path

from click.testing import CliRunner
from fake_slurmdbd import FakeDbd

from slurmpool.accounting import codec
from slurmpool.accounting.summary import index_of, job_document, pack_series
from slurmpool.catalogue import default_catalogue
from slurmpool.cli import main
from slurmpool.report.jobstats import build_view, render_text, sparkline


def _doc(util_max: float | None, mem: int, kind: str = "gpu") -> dict[str, object]:
    dev = {
        "gpu": 2,
        "gi": None,
        "kind": kind,
        "model": "A100-SXM4-80GB",
        "profile": None,
        "slices": None,
        "of": None,
        "util_mean": None if util_max is None else util_max / 2,
        "util_max": util_max,
        "mem_max_mib": mem,
        "mem_total_mib": 81920,
        "samples": 30,
        "duration_s": 300.0,
        "energy_j": 36000.0,
        "timeline": {
            "step_s": 10.0,
            "util": pack_series([5, 10, None, 12]),
            "mem_pct": pack_series([7, 7, 7, 7]),
        },
    }
    return job_document(
        "9", "c", {"n1": {"devices": [dev], "carved": [{"gpu": 2, "mode": "passthrough"}]}}
    )


FIELDS = {
    "JobIDRaw": "9",
    "User": "alice",
    "Account": "phys",
    "State": "COMPLETED",
    "ElapsedRaw": "300",
    "NodeList": "n1",
    "ReqTRES": "cpu=1,gres/gpu=1",
    "AllocTRES": "cpu=1,gres/gpu=1",
}


def test_sparkline() -> None:
    assert sparkline([0, 50, 100, None]) == "▁▅█·"
    assert len(sparkline(list(range(100)), width=10)) == 10


def test_oversized_whole_gpu_gets_a_vgpu_suggestion() -> None:
    view = build_view(FIELDS, _doc(12.0, 6 * 1024), running=False, catalogue=default_catalogue())
    assert view.suggestions == [
        "n1 GPU 2: used at most 6.0 GiB of 80 GiB and 12% SM: vgpu:1 (1g.10gb) would have fit"
    ]
    text = render_text(view)
    assert "asked for: gpu:1; got: gpu:1" in text and "busy  " in text
    assert "92% headroom" in text


def test_a_busy_job_gets_no_suggestion() -> None:
    view = build_view(FIELDS, _doc(95.0, 70 * 1024), running=False, catalogue=default_catalogue())
    assert view.suggestions == []


def test_mig_without_utilisation_says_na() -> None:
    doc = _doc(None, 3000, kind="mig")
    dev = doc["nodes"]["n1"]["devices"][0]  # type: ignore[index]
    dev.update({"gi": 3, "profile": "3g.40gb", "slices": 3, "of": 7, "mem_total_mib": 40192})
    view = build_view(FIELDS, doc, running=False, catalogue=default_catalogue())
    text = render_text(view)
    assert "mean n/a, max n/a" in text and "not measurable" in text
    assert view.suggestions and "vgpu:1" in view.suggestions[0]
    assert view.to_json()["devices"][0]["util_available"] is False


def test_jobstats_command_for_a_finished_job(tmp_path: Path) -> None:
    fake = FakeDbd(tmp_path / "dbd")
    doc = _doc(12.0, 6144)
    word = codec.encode(doc, index_of(doc))
    # every field jobstats asks for, as sacct prints them
    fake.add_raw(
        "9", f"alice|phys|gpu|n1|COMPLETED|2026-11-02T10:00:00|300|gres/gpu=1|gres/gpu=1|{word}"
    )
    res = CliRunner().invoke(main, ["jobstats", "9", "--json"], env={"PATH": str(fake.bin)})
    assert res.exit_code == 0, res.output
    assert '"vgpu:1 (1g.10gb) would have fit"' not in res.output
    assert "vgpu:1 (1g.10gb) would have fit" in res.output
    res = CliRunner().invoke(main, ["jobstats", "8"], env={"PATH": str(fake.bin)})
    assert res.exit_code == 1 and "job 8 is not in accounting" in res.output
    fake.set_down(True)
    res = CliRunner().invoke(main, ["jobstats", "9"], env={"PATH": str(fake.bin)})
    assert res.exit_code == 1 and "is slurmdbd up?" in res.output


# What sacct shows for a job that started a moment ago (SLURM_FACTS.md: the database
# lags slurmctld): still PENDING, no node, no start, nothing allocated.
LAGGING = "alice|phys|gpu|None assigned|PENDING|Unknown|0|billing=1,cpu=1,gres/vgpu=1,node=1||"
RUNNING_NOW = "9|RUNNING|alice|phys|gpu|n1|1:05|cpu=1,mem=100M,node=1,billing=1,gres/vgpu=1|"


def _jobstats_json(fake: FakeDbd, *args: str) -> dict[str, object]:
    res = CliRunner().invoke(
        main,
        ["jobstats", "9", "--json", "--monitor-url", "http://127.0.0.1:1", *args],
        env={"PATH": str(fake.bin)},
    )
    assert res.exit_code == 0, res.output
    view: dict[str, object] = json.loads(res.stdout)
    return view


def test_a_job_slurmctld_runs_is_running_while_sacct_still_says_pending(tmp_path: Path) -> None:
    fake = FakeDbd(tmp_path / "dbd")
    fake.add_raw("9", LAGGING)
    fake.set_live("9", RUNNING_NOW)
    view = _jobstats_json(fake)
    assert view["running"] is True and view["state"] == "RUNNING"
    assert view["nodes"] == "n1" and view["elapsed_s"] == 65
    assert view["requested"] == {"vgpu": 1, "gpu": None}
    assert view["allocated"] == {"vgpu": 1, "gpu": None}
    assert "cannot reach the node's monitor" in str(view["note"])


def test_a_running_job_is_shown_while_slurmdbd_is_down_or_has_no_record_yet(
    tmp_path: Path,
) -> None:
    fake = FakeDbd(tmp_path / "dbd")
    fake.set_live("9", RUNNING_NOW)
    view = _jobstats_json(fake)  # not in accounting at all yet
    assert view["running"] is True and view["user"] == "alice" and view["nodes"] == "n1"
    fake.add_raw("9", LAGGING)
    fake.set_down(True)
    view = _jobstats_json(fake)
    assert view["running"] is True and view["allocated"] == {"vgpu": 1, "gpu": None}


def test_an_ended_job_is_not_running_whatever_lagging_sacct_says(tmp_path: Path) -> None:
    fake = FakeDbd(tmp_path / "dbd")
    fake.add_raw("9", LAGGING.replace("PENDING", "RUNNING"))
    fake.set_live("9", RUNNING_NOW.replace("RUNNING", "COMPLETED"))
    view = _jobstats_json(fake)
    assert view["running"] is False and view["state"] == "COMPLETED"
    assert "no slurmpool summary in accounting yet" in str(view["note"])
    # A job slurmctld no longer knows has ended: accounting is its record.
    fake2 = FakeDbd(tmp_path / "dbd2")
    fake2.add_raw("9", LAGGING.replace("PENDING", "RUNNING"))
    view = _jobstats_json(fake2)
    assert view["running"] is False


def test_a_job_neither_slurmctld_nor_accounting_knows_is_an_error(tmp_path: Path) -> None:
    fake = FakeDbd(tmp_path / "dbd")
    res = CliRunner().invoke(main, ["jobstats", "9"], env={"PATH": str(fake.bin)})
    assert res.exit_code == 1
    assert "job 9 is not in accounting (sacct shows no record) nor known to slurmctld" in (
        res.output
    )


def test_shards_are_the_jobs_vgpu_units() -> None:
    fields = {**FIELDS, "ReqTRES": "cpu=1,gres/shard=3", "AllocTRES": "cpu=1,gres/shard=3,node=1"}
    view = build_view(fields, None, running=False, catalogue=default_catalogue())
    assert view.requested["vgpu"] == 3 and view.allocated["vgpu"] == 3
    assert view.allocated["gpu"] is None
