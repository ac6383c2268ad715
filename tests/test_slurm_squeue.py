"""squeue -O reading: what slurmctld says of a job now, and how it overlays sacct."""

from __future__ import annotations

import pytest

from slurmpool.slurm.runner import CommandResult, SlurmCommandError
from slurmpool.slurm.squeue import (
    LIVE_FIELDS,
    SqueueOutputError,
    live_job_from_squeue,
    merged_fields,
    parse_squeue,
    read_live_job,
    seconds_of,
    squeue_format,
)

# Recorded on the 22.05 sandbox: squeue -h -j ID --states=all -O squeue_format(LIVE_FIELDS)
RUNNING = "1|RUNNING|root|root|pool|sbx1|0:08|cpu=1,mem=100M,node=1,billing=1,gres/vgpu=1|"
COMPLETED = "1|COMPLETED|root|root|pool|sbx1|0:08|cpu=1,mem=100M,node=1,billing=1,gres/vgpu=1|"
PENDING = "4|PENDING|root|root|pool||0:00|cpu=1,mem=100M,node=1,billing=1,gres/vgpu=7|"


def test_format_ends_every_field_with_a_bar() -> None:
    assert squeue_format(("JobID", "State")) == "JobID:|,State:|"


@pytest.mark.parametrize(
    ("text", "seconds"),
    [
        ("0:00", 0),
        ("0:08", 8),
        ("12:34", 754),
        ("1:02:03", 3723),
        ("2-03:04:05", 2 * 86400 + 3 * 3600 + 4 * 60 + 5),
        ("1-02", 86400 + 7200),
        ("1-02:03", 86400 + 7200 + 180),
        ("7", 7),
    ],
)
def test_seconds_of_slurm_durations(text: str, seconds: int) -> None:
    assert seconds_of(text) == seconds


@pytest.mark.parametrize("text", ["", "a:b", "1:2:3:4", "x-01:00:00", "INVALID"])
def test_seconds_of_rejects_what_is_not_a_duration(text: str) -> None:
    with pytest.raises(SqueueOutputError, match="expected"):
        seconds_of(text)


def test_live_job_of_a_running_a_completed_and_a_pending_job() -> None:
    job = live_job_from_squeue(RUNNING, "1")
    assert job is not None and job.running and job.nodes == "sbx1" and job.elapsed_s == 8
    assert job.as_sacct_fields()["AllocTRES"].endswith("gres/vgpu=1")
    done = live_job_from_squeue(COMPLETED, "1")
    assert done is not None and not done.running and done.state == "COMPLETED"
    pending = live_job_from_squeue(PENDING, "4")
    # squeue shows a pending job's request as tres-alloc: it holds no allocation yet.
    assert pending is not None and not pending.running
    assert pending.nodes == "" and pending.alloc_tres == ""
    assert live_job_from_squeue(RUNNING, "2") is None


@pytest.mark.parametrize(
    "text",
    [
        "1|RUNNING|root",  # too few fields
        RUNNING + "extra|",  # too many
        RUNNING[:-1],  # the last field not ended
        RUNNING + "\n" + RUNNING,  # the job twice
    ],
)
def test_output_that_is_not_the_fields_asked_for_is_refused(text: str) -> None:
    with pytest.raises(SqueueOutputError):
        live_job_from_squeue(text, "1")


def test_parse_keeps_blank_lines_out() -> None:
    rows = parse_squeue("\n" + RUNNING + "\n\n", tuple(LIVE_FIELDS))
    assert [r["State"] for r in rows] == ["RUNNING"]


class _Runner:
    def __init__(self, rc: int, stdout: str = "", stderr: str = "") -> None:
        self.result = CommandResult(("squeue",), rc, stdout, stderr)
        self.argv: tuple[str, ...] = ()

    def run(self, name: str, *args: str, **_kw: object) -> CommandResult:
        self.argv = (name, *args)
        return self.result


def test_read_live_job_asks_for_every_state_and_tells_unknown_from_failure() -> None:
    r = _Runner(0, RUNNING + "\n")
    job = read_live_job(r, "1")  # type: ignore[arg-type]
    assert job is not None and job.state == "RUNNING"
    assert r.argv[:5] == ("squeue", "-h", "-j", "1", "--states=all")
    gone = _Runner(1, stderr="slurm_load_jobs error: Invalid job id specified\n")
    assert read_live_job(gone, "1") is None  # type: ignore[arg-type]
    down = _Runner(1, stderr="slurm_load_jobs error: Unable to contact slurm controller\n")
    with pytest.raises(SlurmCommandError, match="Unable to contact"):
        read_live_job(down, "1")  # type: ignore[arg-type]


def test_merged_fields_take_slurmctld_facts_and_keep_what_only_accounting_has() -> None:
    sacct = {
        "JobIDRaw": "1",
        "State": "PENDING",
        "NodeList": "None assigned",
        "ElapsedRaw": "0",
        "ReqTRES": "cpu=1,gres/vgpu=1",
        "AllocTRES": "",
        "AdminComment": "",
    }
    live = live_job_from_squeue(RUNNING, "1")
    fields = merged_fields(sacct, live)
    assert fields is not None
    assert fields["State"] == "RUNNING" and fields["NodeList"] == "sbx1"
    assert fields["ElapsedRaw"] == "8" and fields["ReqTRES"] == "cpu=1,gres/vgpu=1"
    assert merged_fields(sacct, None) == sacct
    assert merged_fields(None, None) is None
    pending = live_job_from_squeue(PENDING, "4")
    kept = merged_fields({"AllocTRES": "cpu=1"}, pending)
    assert kept is not None and kept["AllocTRES"] == "cpu=1"  # empty live values do not erase
