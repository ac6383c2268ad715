"""The allocation readers on recorded output of hostile jobs, for every recorded Slurm.

``tests/data/slurm-<version>/hostile/`` holds, per job, what ``record-hostile.sh``
saved from a real slurmctld: the squeue line, ``scontrol show job -d`` text, on 23.02+
``scontrol show job --json`` (while running, and as the prolog saw it), and what
slurmctld allocated (``.expect``).  Names, comments, work dirs and std paths carry
forged ``Key=value`` lines, per-node lines, whole forged records and JSON fragments.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from slurmpool.slurm.allocation import (
    AllocationError,
    ForgedRecord,
    admin_comment_from_squeue,
    allocation_from_json,
    allocation_from_squeue,
    allocation_from_text,
    read_allocation,
)
from slurmpool.slurm.parse import parse_jobs
from slurmpool.slurm.runner import CommandResult, SlurmCommandError

DATA = Path(__file__).resolve().parent / "data"
CASES = sorted(DATA.glob("slurm-*/hostile/*.expect"))
JSON_CASES = sorted(DATA.glob("slurm-*/hostile/*.json"))
# Jobs whose user-owned fields hold no line that could pose as a key.
CLEAN_TEXT = {"json-fragment", "two-nodes", "extra"}


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


def _version(p: Path) -> tuple[int, int]:
    major, minor = p.parent.parent.name.removeprefix("slurm-").split(".")
    return int(major), int(minor)


def test_json_is_recorded_for_every_job_where_slurm_has_it() -> None:
    newer = [p for p in CASES if _version(p) >= (23, 2)]
    assert newer, "no Slurm 23.02+ recording"
    for expect in CASES:
        stem = expect.with_suffix("")
        has = [stem.with_suffix(s).exists() for s in (".show-job.json", ".prolog.json")]
        assert has == [_version(expect) >= (23, 2)] * 2, expect
    # The forged-Extra job exists wherever sbatch has --extra.
    assert {p.stem for p in newer} >= {"extra", "name-tres", "renamed", "two-nodes"}


@pytest.mark.parametrize("path", JSON_CASES, ids=lambda p: f"{p.parent.parent.name}/{p.name}")
def test_json_gives_exactly_the_allocation(path: Path) -> None:
    _name, job_id, want = _case(path.parent / (path.name.split(".")[0] + ".expect"))
    alloc = allocation_from_json(path.read_text(), job_id)
    assert alloc.source == "scontrol-json"
    assert {n.node: n.count("vgpu") for n in alloc.nodes} == want


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


def _job_json(jobs: list[dict[str, object]] | None = None, **job: object) -> str:
    base: dict[str, object] = {
        "job_id": 5,
        "name": "x\n   TresPerNode=gres:vgpu:7",
        "nodes": "n[1-2]",
        "tres_per_node": "gres/vgpu:2",
        "tres_alloc_str": "cpu=2,node=2,gres/vgpu=4",
        "gres_detail": ["vgpu(CNT:2)", "vgpu(CNT:2)"],
        "job_resources": {
            "nodes": {"allocation": [{"index": 0, "name": "n1"}, {"index": 1, "name": "n2"}]}
        },
    }
    return json.dumps({"jobs": jobs if jobs is not None else [{**base, **job}], "errors": []})


def test_shards_are_read_like_vgpu() -> None:
    # A vgpu request on shared GPUs, as job_submit.lua rewrote it (24.11 JSON shape).
    text = _job_json(
        nodes="n1",
        tres_per_node="gres/shard:3",
        tres_alloc_str="cpu=1,node=1,gres/shard=3",
        gres_detail=["shard:a100_shared:3(IDX:1)"],
        job_resources={"nodes": {"allocation": [{"index": 0, "name": "n1"}]}},
    )
    alloc = allocation_from_json(text, "5")
    assert (alloc.on("n1").count("shard"), alloc.on("n1").count("vgpu")) == (3, 0)
    line = "5|n1|gres:shard:3|cpu=1,node=1,gres/shard=3|\n"
    assert allocation_from_squeue(line, "5").on("n1").count("shard") == 3
    with pytest.raises(AllocationError, match="gres/shard=6 allocated"):
        allocation_from_squeue(line.replace("shard=3", "shard=6"), "5")


def test_json_pairs_each_node_with_its_entry_by_job_resources() -> None:
    text = _job_json(
        gres_detail=["gpu:a100:1(IDX:0),vgpu(CNT:2)", "gpu:a100:2(IDX:0-1),vgpu(CNT:2)"],
        job_resources={
            "nodes": {"allocation": [{"index": 1, "name": "n1"}, {"index": 0, "name": "n2"}]}
        },
    )
    alloc = allocation_from_json(text, "5")
    assert alloc.on("n2").count("gpu") == 1 and alloc.on("n1").count("gpu") == 2
    assert alloc.on("n1").count("vgpu") == alloc.on("n2").count("vgpu") == 2


def test_json_array_master_id_lists_every_task_and_picks_ours() -> None:
    task = {"nodes": "n1", "tres_per_node": "", "gres_detail": [], "tres_alloc_str": "cpu=1"}
    text = _job_json(jobs=[{"job_id": 6, **task}, {"job_id": 5, **task}])
    assert [n.node for n in allocation_from_json(text, "5").nodes] == ["n1"]


@pytest.mark.parametrize(
    ("text", "why"),
    [
        ("scontrol: error: Invalid job id specified", "not JSON"),
        ('{"jobs": [{"job_id": 5, "job_id": 6}]}', "key 'job_id' twice"),
        ('{"errors": []}', "no 'jobs' list"),
        (_job_json(jobs=[]), "listed 0 times"),
        (_job_json(jobs=[json.loads(_job_json())["jobs"][0]] * 2), "listed 2 times"),
        (_job_json(nodes=["n1"]), "not a string"),
        (_job_json(gres_detail="vgpu(CNT:2)"), "not a list of strings"),
        (_job_json(gres_detail=[]), r"no per-node GRES on n\[1-2\]"),
        (_job_json(gres_detail=["vgpu(CNT:2)"]), "1 per-node GRES entries for 2 node"),
        (_job_json(gres_detail=["vgpu(CNT:2)", "vgpu(CNT:7)"]), "n2 has vgpu:7"),
        (_job_json(tres_per_node="", gres_detail=["vgpu(CNT:2)", ""]), "n1 has vgpu:2"),
        (_job_json(tres_alloc_str="cpu=2,gres/vgpu=14"), "gres/vgpu=14 allocated"),
        (_job_json(nodes="n[1-"), "job 5"),
        (
            _job_json(
                tres_per_node="gres/shard:2",
                tres_alloc_str="cpu=2,node=2,gres/shard=4",
                gres_detail=["shard:a100_shared:2(IDX:0)", "shard:a100_shared:3(IDX:1)"],
            ),
            "n2 has shard:3",
        ),
        (
            _job_json(
                gres_detail=["gpu:1,vgpu(CNT:2)", "vgpu(CNT:2)"],
                job_resources={},
            ),
            "does not say which node",
        ),
        (
            _job_json(
                job_resources={
                    "nodes": {
                        "allocation": [{"index": 0, "name": "n1"}, {"index": 1, "name": "n9"}]
                    }
                }
            ),
            "job_resources names",
        ),
    ],
    ids=[
        "not-json",
        "duplicate-key",
        "no-jobs",
        "absent",
        "twice",
        "nodes-type",
        "detail-type",
        "no-detail",
        "detail-short",
        "node-disagrees",
        "unrequested-vgpu",
        "total-disagrees",
        "hostlist",
        "shards-disagree",
        "unpaired",
        "other-node",
    ],
)
def test_json_refuses_what_it_cannot_trust(text: str, why: str) -> None:
    with pytest.raises(AllocationError, match=why):
        allocation_from_json(text, "5")


def test_json_without_job_resources_pairs_identical_entries_with_the_node_list() -> None:
    alloc = allocation_from_json(_job_json(job_resources=None), "5")
    assert [(n.node, n.count("vgpu")) for n in alloc.nodes] == [("n1", 2), ("n2", 2)]


def test_text_with_two_records_for_one_job_is_refused() -> None:
    one = "JobId=5 JobName=a\n   TresPerNode=gres:vgpu:1\n     Nodes=n1 CPU_IDs=0 Mem=1 GRES=\n"
    with pytest.raises(ForgedRecord, match="2 job records"):
        allocation_from_text(one + one, "5")
    with pytest.raises(AllocationError, match="not 5"):
        allocation_from_text(one.replace("JobId=5", "JobId=6"), "5")


class _Runner:
    """Answers squeue and scontrol like Runner.run: output, or (check=True) the error."""

    def __init__(
        self, squeue: CommandResult, scontrol: str = "", json_result: CommandResult | None = None
    ) -> None:
        self.squeue = squeue
        self.scontrol = scontrol
        self.json_result = json_result
        self.calls: list[str] = []

    def run(self, name: str, *args: str, check: bool = True, **_kw: object) -> CommandResult:
        self.calls.append(f"{name} --json" if "--json" in args else name)
        if name == "squeue":
            res = self.squeue
        elif "--json" in args:
            assert self.json_result is not None, "scontrol --json was not expected"
            res = self.json_result
        else:
            res = CommandResult((name,), 0, self.scontrol, "")
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


def _scontrol(rc: int, stdout: str = "", stderr: str = "") -> CommandResult:
    return CommandResult(("scontrol",), rc, stdout, stderr)


def test_read_allocation_with_json_is_one_scontrol_call() -> None:
    r = _Runner(_squeue(0, SQUEUE_OK), json_result=_scontrol(0, _job_json()))
    alloc = read_allocation(r, "5", scontrol_json=True)  # type: ignore[arg-type]
    assert alloc.source == "scontrol-json" and alloc.on("n2").count("vgpu") == 2
    assert r.calls == ["scontrol --json"]


def test_read_allocation_falls_back_to_squeue_where_scontrol_has_no_json() -> None:
    # The version was declared 23.02+, but this scontrol is older.
    old = _scontrol(1, stderr="scontrol: unrecognized option '--json'\nTry \"scontrol --help\"")
    r = _Runner(_squeue(0, SQUEUE_OK), json_result=old)
    alloc = read_allocation(r, "5", scontrol_json=True)  # type: ignore[arg-type]
    assert alloc.source == "squeue" and alloc.on("n1").count("vgpu") == 2
    assert r.calls == ["scontrol --json", "squeue"]


def test_read_allocation_with_json_does_not_retry_an_unreachable_slurmctld() -> None:
    down = _scontrol(1, stderr="slurm_load_jobs error: Unable to contact slurm controller")
    r = _Runner(_squeue(0, SQUEUE_OK), json_result=down)
    with pytest.raises(SlurmCommandError, match="Unable to contact"):
        read_allocation(r, "5", scontrol_json=True)  # type: ignore[arg-type]
    assert r.calls == ["scontrol --json"]
