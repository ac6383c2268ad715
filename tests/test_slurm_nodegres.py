"""A node's GRES counts read from ``sinfo -n`` and the update that sets the
fit counts (slurmpool.slurm.nodegres), on output recorded with each tested Slurm."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from slurmpool.slurm.gres import Gres, format_gres, parse_gres, type_counts, with_counts
from slurmpool.slurm.nodegres import (
    NodeGres,
    NodeGresError,
    counts_update,
    parse_node_gres,
    read_node_argv,
    update_argv,
)

DATA = Path(__file__).parent / "data"
VERSIONS = ["22.05", "24.11", "26.05"]
EMPTY = {"s1": 14, "s2": 6, "s3": 4, "s4": 2, "s7": 2}


@pytest.mark.parametrize("version", VERSIONS)
def test_recorded_node_with_a_running_vgpu_job(version: str) -> None:
    # The probe's read of sbx1 while a vgpu:2 job runs there (one line per partition).
    text = (DATA / f"slurm-{version}" / "probe-node-read-rpcs.txt").read_text()
    node = parse_node_gres(text, "sbx1")
    assert [g.key for g in node.gres] == [
        "gpu:a100",
        "vgpu",
        *(f"vgpufit:{t}" for t in EMPTY),
    ]
    assert node.counts("vgpufit") == EMPTY
    # The job holds vgpu:2; no job asks vgpufit yet.
    assert node.used_counts("vgpufit") == dict.fromkeys(EMPTY, 0)
    assert type_counts(node.used, "vgpu") == {} and any(
        g.name == "vgpu" and g.count == 2 for g in node.used
    )
    update = counts_update(node, "vgpufit", {"s4": 0, "s7": 1})
    assert update == (
        "gpu:a100:1,vgpu:14,vgpufit:s1:14,vgpufit:s2:6,vgpufit:s3:4,vgpufit:s4:0,vgpufit:s7:1"
    )
    assert update_argv("sbx1", update) == ["scontrol", "update", "NodeName=sbx1", f"Gres={update}"]
    with pytest.raises(NodeGresError, match="no line for sbx9"):
        parse_node_gres(text, "sbx9")


@pytest.mark.parametrize("version", VERSIONS)
def test_the_read_is_the_one_node_rpc(version: str) -> None:
    # Measured: sinfo -n is REQUEST_NODE_INFO_SINGLE, scontrol show node the whole table.
    text = (DATA / f"slurm-{version}" / "probe-node-read-rpcs.txt").read_text()
    assert "sinfo -n -O Gres,GresUsed: NODE_INFO=0 NODE_INFO_SINGLE=10 gres=yes used=yes" in text
    assert "scontrol -d show node: NODE_INFO=10 NODE_INFO_SINGLE=0" in text
    assert read_node_argv("sbx1")[:5] == ["sinfo", "-h", "-N", "-n", "sbx1"]


@pytest.mark.parametrize("version", VERSIONS)
def test_a_gres_whose_counts_are_all_zero_is_hidden_and_comes_back(version: str) -> None:
    text = (DATA / f"slurm-{version}" / "probe-fit-zero.txt").read_text()
    said = dict(line.split(": ", 1) for line in text.splitlines() if ": " in line)
    assert said["zero"].startswith("accepted; Gres=gpu:a100:1,vgpu:14 CfgTRES=")
    assert "vgpufit" not in said["zero"]
    assert said["back"] == "accepted; Gres=gpu:a100:1,vgpu:14," + ",".join(
        f"vgpufit:{t}:{n}" for t, n in EMPTY.items()
    )
    assert "vgpufit:s1:0" in said["some-zero"] and "vgpufit:s7:1" in said["some-zero"]
    # So an update to a node that shows none of them names every type again...
    hidden = NodeGres("sbx1", tuple(parse_gres("gpu:a100:1,vgpu:14,nic:2")), ())
    assert counts_update(hidden, "vgpufit", {"s1": 7, "s7": 0}) == (
        "gpu:a100:1,vgpu:14,nic:2,vgpufit:s1:7,vgpufit:s7:0"
    )
    # ...unless they are all 0: slurmctld has that already.
    assert counts_update(hidden, "vgpufit", {"s1": 0, "s7": 0}) is None


def test_nothing_to_send_when_the_counts_are_there() -> None:
    node = NodeGres("n1", tuple(parse_gres("vgpu:14,vgpufit:s1:14,vgpufit:s7:2")), ())
    assert counts_update(node, "vgpufit", {"s1": 14, "s7": 2}) is None
    # A type the node does not have is not added (gres.conf did not declare it).
    assert counts_update(node, "vgpufit", {"s5": 1}) is None


def test_an_update_restates_the_sites_gres_without_printed_details() -> None:
    # A core binding is printed "(S:0-1)"; the update leaves it out, and slurmctld keeps
    # the binding gres.conf gives (tests/data/probe-count-gres.sh).
    node = NodeGres("n1", tuple(parse_gres("gpu:a100:1(S:0-1),nic:2,vgpufit:s4:2")), ())
    assert counts_update(node, "vgpufit", {"s4": 1}) == "gpu:a100:1,nic:2,vgpufit:s4:1"


def test_with_counts_keeps_order_and_other_names() -> None:
    items = parse_gres("vgpufit:s1:3,gpu:a100:1,vgpufit:s4:1,other:s4:5")
    out = with_counts(items, "vgpufit", {"s4": 0, "s1": 7})
    assert format_gres(out) == "vgpufit:s1:7,gpu:a100:1,vgpufit:s4:0,other:s4:5"
    assert out[1] is items[1]
    assert Gres("vgpufit", "s4", 0) in out


def test_only_the_asked_nodes_line_is_read() -> None:
    text = (
        "sbx10|vgpufit:s4:9|vgpufit:s4:0|\n"
        "sbx1|vgpu:14,vgpufit:s4:2|vgpu:4,vgpufit:s4:1|\n"
        "sbx1|vgpu:14,vgpufit:s4:2|vgpu:4,vgpufit:s4:1|\n"
    )
    node = parse_node_gres(text, "sbx1")
    assert node.counts("vgpufit") == {"s4": 2} and node.used_counts("vgpufit") == {"s4": 1}
    # A node sinfo does not know: it prints nothing and exits 0 (measured).
    with pytest.raises(NodeGresError, match="no line for sbx1"):
        parse_node_gres("", "sbx1")
    with pytest.raises(NodeGresError, match=re.escape("expected NODE|GRES|GRESUSED|")):
        parse_node_gres("sbx1 vgpu:14\n", "sbx1")
    assert parse_node_gres("sbx1|(null)|(null)|\n", "sbx1").gres == ()
