"""The allocation readers on recorded output of hostile jobs, for every recorded Slurm.

``tests/data/slurm-<version>/hostile/`` holds, per job, what ``record-hostile.sh``
saved from a real slurmctld: the squeue line, ``scontrol show job -d`` text, and what
slurmctld allocated (``.expect``).  Names, comments, work dirs and std paths carry
forged ``Key=value`` lines, per-node lines, whole forged records and JSON fragments.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from slurmpool.slurm.allocation import (
    AllocationError,
    ForgedRecord,
    admin_comment_from_squeue,
    allocation_from_squeue,
    allocation_from_text,
    read_allocation,
)
from slurmpool.slurm.parse import parse_jobs
from slurmpool.slurm.runner import CommandResult, SlurmCommandError

DATA = Path(__file__).resolve().parent / "data"
CASES = sorted(DATA.glob("slurm-*/hostile/*.expect"))
# Jobs whose user-owned fields hold no line that could pose as a key.
CLEAN_TEXT = {"json-fragment", "two-nodes"}


def _case(expect: Path) -> tuple[str, str, dict[str, int]]:
    stem = expect.with_suffix("")
    job_id = stem.with_suffix(".jobid").read_text().strip()
    want = {}
    for line in expect.read_text().splitlines():
        node, count = line.split()
        want[node] = int(count)
    return stem.name, job_id, want


def test_every_recorded_version_has_hostile_cases() -> None:
    versions = {p.parent.parent.name for p in CASES}
    assert versions == {p.name for p in DATA.glob("slurm-*") if p.is_dir()}
    assert len(CASES) >= 8


@pytest.mark.parametrize("expect", CASES, ids=lambda p: f"{p.parent.parent.name}/{p.stem}")
def test_squeue_gives_exactly_the_allocation(expect: Path) -> None:
    _name, job_id, want = _case(expect)
    alloc = allocation_from_squeue(expect.with_suffix(".squeue.txt").read_text(), job_id)
    got = {n.node: n.count("vgpu") for n in alloc.nodes}
    assert got == want
    assert alloc.on("not-a-node").count("vgpu") == 0


@pytest.mark.parametrize("expect", CASES, ids=lambda p: f"{p.parent.parent.name}/{p.stem}")
def test_scontrol_text_gives_the_allocation_or_refuses(expect: Path) -> None:
    name, job_id, want = _case(expect)
    text = expect.with_suffix(".show-job-d.txt").read_text()
    if name in CLEAN_TEXT:
        alloc = allocation_from_text(text, job_id)
        assert {n.node: n.count("vgpu") for n in alloc.nodes} == want
        return
    with pytest.raises(ForgedRecord):
        allocation_from_text(text, job_id)
    # What the first-wins parser would have read: the forgery was real.
    [*jobs] = parse_jobs(text)
    forged = [g.count for j in jobs for d in j.details for g in d.gres if g.name == "vgpu"]
    tres = [g.count for j in jobs for g in j.tres_per_node if g.name == "vgpu"]
    assert 7 in forged + tres


@pytest.mark.parametrize(
    ("text", "why"),
    [
        ("", "0 times"),
        ("5|n1|gres:vgpu:1|cpu=1,gres/vgpu=1|\n5|n1|gres:vgpu:7|cpu=1,gres/vgpu=7|\n", "2 times"),
        ("5|n1|gres:vgpu:1|\n", "expected 4"),
        ("5|n1|gres:vgpu:1|cpu=1,gres/vgpu=1|tail\n", "expected 4"),
        ("5|n[1-2]|gres:vgpu:2|cpu=2,gres/vgpu=2|\n", "gres/vgpu=2 allocated"),
        ("5|n[1-|gres:vgpu:2|cpu=2|\n", "job 5"),
        ("5|n1|gres:vgpu:x:y:z|cpu=2|\n", "job 5"),
        ("5|n1|gres:vgpu:1|cpu=1,gres/vgpu=lots|\n", "not a count"),
    ],
    ids=["absent", "twice", "short", "trailing", "total-disagrees", "hostlist", "gres", "tres"],
)
def test_squeue_refuses_what_it_cannot_trust(text: str, why: str) -> None:
    with pytest.raises(AllocationError, match=why):
        allocation_from_squeue(text, "5")


def test_squeue_array_master_id_lists_every_task_and_picks_ours() -> None:
    text = "13|sbx1|gres:vgpu:1|cpu=1,gres/vgpu=1|\n12|sbx2|gres:vgpu:3|cpu=1,gres/vgpu=3|\n"
    assert allocation_from_squeue(text, "12").on("sbx2").count("vgpu") == 3
    assert allocation_from_squeue(text, "12").on("sbx1").count("vgpu") == 0


def test_squeue_without_gres_accounting_trusts_the_per_node_request() -> None:
    text = "7|n[1-2]|gres/vgpu:2|cpu=2,mem=1G,node=2|\n"  # 24.11 prints gres/ (slash)
    alloc = allocation_from_squeue(text, "7")
    assert [(n.node, n.count("vgpu")) for n in alloc.nodes] == [("n1", 2), ("n2", 2)]


@pytest.mark.parametrize(
    ("text", "want"),
    [
        ("5|budget=cs101 | slurmpool: requeued 1x|\n", "budget=cs101 | slurmpool: requeued 1x"),
        ("5|(null)|\n", ""),
        ("5|two\nlines|\n", None),
        ("6|other|\n", None),
    ],
)
def test_admin_comment_is_read_only_when_unambiguous(text: str, want: str | None) -> None:
    assert admin_comment_from_squeue(text, "5") == want


def test_text_with_two_records_for_one_job_is_refused() -> None:
    one = "JobId=5 JobName=a\n   TresPerNode=gres:vgpu:1\n     Nodes=n1 CPU_IDs=0 Mem=1 GRES=\n"
    with pytest.raises(ForgedRecord, match="2 job records"):
        allocation_from_text(one + one, "5")
    with pytest.raises(AllocationError, match="not 5"):
        allocation_from_text(one.replace("JobId=5", "JobId=6"), "5")


class _Runner:
    """Answers squeue and scontrol like Runner.run: output, or (check=True) the error."""

    def __init__(self, squeue: CommandResult, scontrol: str = "") -> None:
        self.squeue = squeue
        self.scontrol = scontrol
        self.calls: list[str] = []

    def run(self, name: str, *args: str, check: bool = True, **_kw: object) -> CommandResult:
        self.calls.append(name)
        res = self.squeue if name == "squeue" else CommandResult((name,), 0, self.scontrol, "")
        if check and not res.ok:
            raise SlurmCommandError(res.argv, res.returncode, res.stderr, res.stdout)
        return res


def _squeue(rc: int, stdout: str = "", stderr: str = "") -> CommandResult:
    return CommandResult(("squeue",), rc, stdout, stderr)


SQUEUE_OK = "5|n1|gres:vgpu:2|cpu=1,gres/vgpu=2|\n"
TEXT_OK = (
    "JobId=5 JobName=a\n   TresPerNode=gres:vgpu:2\n"
    "     Nodes=n1 CPU_IDs=0 Mem=1 GRES=vgpu(CNT:2)\n"
)


def test_read_allocation_is_one_squeue_call() -> None:
    r = _Runner(_squeue(0, SQUEUE_OK))
    alloc = read_allocation(r, "5")  # type: ignore[arg-type]
    assert alloc.source == "squeue" and alloc.on("n1").count("vgpu") == 2
    assert r.calls == ["squeue"]


@pytest.mark.parametrize("rc", [0, 1], ids=["exit-0-as-22.05", "exit-1"])
def test_read_allocation_reads_strict_text_only_where_squeue_lacks_the_fields(rc: int) -> None:
    lacks = _squeue(rc, stderr="squeue: error: Invalid job format specification: tres-alloc\n")
    r = _Runner(lacks, TEXT_OK)
    alloc = read_allocation(r, "5")  # type: ignore[arg-type]
    assert alloc.source == "scontrol-text" and alloc.on("n1").count("vgpu") == 2
    assert r.calls == ["squeue", "scontrol"]


def test_read_allocation_does_not_retry_an_unreachable_slurmctld() -> None:
    r = _Runner(_squeue(1, stderr="slurm_load_jobs error: Unable to contact slurm"), TEXT_OK)
    with pytest.raises(SlurmCommandError, match="Unable to contact"):
        read_allocation(r, "5")  # type: ignore[arg-type]
    assert r.calls == ["squeue"]
