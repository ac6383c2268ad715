"""Parsers on real Slurm output recorded on the sandbox cluster with each Slurm
slurmpool is tested on (tests/data/slurm-<version>/, made by record-sandbox.sh)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from slurmpool.slurm.gres import Gres, gres_totals, parse_gres
from slurmpool.slurm.parse import parse_jobs, parse_nodes, parse_records, parse_slurmd_gres

DATA = Path(__file__).parent / "data"
VERSIONS = sorted(
    p.name.removeprefix("slurm-")
    for p in DATA.glob("slurm-*")
    if (p / "show-node-idle.txt").exists()
)


def test_every_tested_slurm_is_recorded() -> None:
    assert VERSIONS == ["22.05", "24.11", "26.05"]


@pytest.fixture(params=VERSIONS)
def read(request: pytest.FixtureRequest) -> Callable[[str], str]:
    """``read(name)``: the recorded file ``name`` of one Slurm version."""
    directory = DATA / f"slurm-{request.param}"
    return lambda name: (directory / name).read_text()


def test_idle_nodes(read: Callable[[str], str]) -> None:
    nodes = parse_nodes(read("show-node-idle.txt"))
    assert [n.name for n in nodes] == ["sbx1", "sbx2"]
    for n in nodes:
        assert n.state == "IDLE"
        assert n.flags == ()
        assert n.available
        assert [str(g) for g in n.gres] == ["gpu:a100:1", "vgpu:14"]
        assert n.record["NodeAddr"] == "127.0.0.1"
        assert n.record["OS"].startswith("Linux ")
        assert " #1 SMP" in n.record["OS"]
        assert n.record["CfgTRES"] == "cpu=16,mem=4000M,billing=16,gres/gpu=1,gres/vgpu=14"


def test_allocated_node_is_mixed(read: Callable[[str], str]) -> None:
    nodes = {n.name: n for n in parse_nodes(read("show-node-allocated.txt"))}
    assert nodes["sbx1"].state == "MIXED"
    assert nodes["sbx1"].available
    assert "gres/gpu=1,gres/vgpu=3" in nodes["sbx1"].record["AllocTRES"]
    assert nodes["sbx2"].state == "IDLE"


def test_drained_node_reason_keeps_spaces(read: Callable[[str], str]) -> None:
    (node,) = parse_nodes(read("show-node-drained.txt"))
    assert node.state == "IDLE"
    assert node.flags == ("DRAIN",)
    assert not node.available
    assert node.reason is not None
    assert node.reason.startswith("maintenance by admin [root@")


def test_running_vgpu_job_with_hostile_name(read: Callable[[str], str]) -> None:
    (job,) = parse_jobs(read("show-job-running-d.txt"))
    assert job.name == 'hostile "q" $(touch /tmp/pwned) `id`'
    assert job.state == "RUNNING"
    assert job.user == "root" and job.uid == 0
    assert job.partition == "pool"
    assert job.node_list == "sbx1"
    # gres:vgpu:3 on 22.05, gres/vgpu:3 from 24.11: the same Gres.
    assert job.tres_per_node == (Gres("vgpu", None, 3),)
    assert job.comment is not None and job.comment.strip() == "c1 x=y"
    assert job.admin_comment is not None and job.admin_comment.strip() == "sp1:ABC def"
    assert len(job.details) == 1
    assert job.details[0].nodes == "sbx1"
    assert [(g.name, g.count) for g in job.details[0].gres] == [("vgpu", 3)]


def test_submit_line_is_one_value() -> None:
    # 26.05 prints the user's command line; its "x=y" is not a key of the record.
    (job,) = parse_jobs((DATA / "slurm-26.05" / "show-job-running-d.txt").read_text())
    line = job.record["SubmitLine"]
    assert line.startswith("sbatch --parsable") and line.endswith(
        "--comment c1 x=y --wrap sleep 600"
    )
    assert "x" not in job.record
    assert job.reason is None  # "Reason=None Dependency=(null)": Reason ends at Dependency


def test_running_gpu_job_detail_index(read: Callable[[str], str]) -> None:
    (job,) = parse_jobs(read("show-job-gpu-running-d.txt"))
    assert job.tres_per_node == (Gres("gpu", None, 1),)
    (detail,) = job.details
    assert detail.gres == (Gres("gpu", "a100", 1, "IDX:0"),)


@pytest.mark.parametrize(
    ("name", "state"),
    [
        ("show-job-running.txt", "RUNNING"),
        ("show-job-pending.txt", "PENDING"),
        ("show-job-cancelled.txt", "CANCELLED"),
        ("show-job-newline-name.txt", "COMPLETED"),
    ],
)
def test_job_states(read: Callable[[str], str], name: str, state: str) -> None:
    (job,) = parse_jobs(read(name))
    assert job.state == state
    assert job.record.get("WorkDir") == "/tmp"


def test_newline_in_job_name_stays_in_the_name(read: Callable[[str], str]) -> None:
    # 26.05 also prints the submit command line (SubmitLine=), newline and all.
    (job,) = parse_jobs(read("show-job-newline-name.txt"))
    assert job.name == "two\nlines"
    assert job.user == "root"


def test_pending_job_has_no_nodes(read: Callable[[str], str]) -> None:
    (job,) = parse_jobs(read("show-job-pending.txt"))
    assert job.node_list is None
    assert job.reason == "Resources"
    assert job.tres_per_node == (Gres("vgpu", None, 14),)


def test_slurmd_G(read: Callable[[str], str]) -> None:
    # "slurmd: Gres ..." up to 24.11, "[timestamp] Gres ..." on 26.05, other lines between.
    entries = parse_slurmd_gres(read("slurmd-G-sbx1.txt"))
    assert [(e.name, e.type, e.count, e.index) for e in entries] == [
        ("gpu", "a100", 1, 2),
        ("vgpu", None, 14, None),
    ]
    assert entries[0].file == "/tmp/sp-sbx/node/dev/nvidia2"
    assert entries[1].file is None


def test_oneliner_and_multiline_agree(read: Callable[[str], str]) -> None:
    text = read("show-node-idle.txt")
    multi = parse_records(text, "NodeName")
    one = "\n".join(
        " ".join(line.strip() for line in block.splitlines()) for block in text.split("\n\n")
    )
    single = parse_records(one, "NodeName")
    assert [r.get("Gres") for r in multi] == [r.get("Gres") for r in single]
    assert [r.get("State") for r in multi] == [r.get("State") for r in single]


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("gpu:a100:1,vgpu:14", [("gpu", "a100", 1), ("vgpu", None, 14)]),
        ("gres:vgpu:3", [("vgpu", None, 3)]),
        ("gres/vgpu:2", [("vgpu", None, 2)]),
        ("vgpu(CNT:3)", [("vgpu", None, 3)]),
        ("gpu:a100:2(S:0-1)", [("gpu", "a100", 2)]),
        ("gpu", [("gpu", None, 1)]),
        ("(null)", []),
        ("", []),
    ],
    ids=[
        "typed-and-count",
        "tres-colon",
        "tres-slash",
        "cnt-detail",
        "sockets",
        "bare",
        "null",
        "empty",
    ],
)
def test_parse_gres(text: str, expected: list[tuple[str, str | None, int]]) -> None:
    assert [(g.name, g.type, g.count) for g in parse_gres(text)] == expected


def test_parse_gres_rejects_garbage() -> None:
    with pytest.raises(ValueError, match="NAME"):
        parse_gres("a:b:c:d")


def test_gres_totals() -> None:
    assert gres_totals(parse_gres("gpu:a100:1,gpu:h100:2,vgpu:14")) == {
        "gpu": 3,
        "gpu:a100": 1,
        "gpu:h100": 2,
        "vgpu": 14,
    }
