"""A site's own NodeName/PartitionName lines for the policy's nodes and partitions (pure)."""

from __future__ import annotations

from slurmpool.slurm.marks import ADDED_MARKER, DISABLED_PREFIX, unmark
from slurmpool.slurm.sitenodes import NodesEdit, edit_nodes, policy_definitions

PATH = "/etc/slurm/slurm.conf"
GRES = "gpu:a100:1,vgpu:14,vgpufit:s1:14"
FRAGMENT = f"""\
GresTypes=gpu,vgpu,vgpufit
# 2 node class(es)
NodeName=sbx[1-2] CPUs=16 RealMemory=4000 Gres={GRES} Features=mig NodeAddr=127.0.0.1 State=UNKNOWN
NodeName=big[1-4] CPUs=64 RealMemory=9000 Gres=gpu:h100:8 State=UNKNOWN
NodeName=vgpufit-sbx CPUs=16 RealMemory=4000 Gres={GRES} State=FUTURE
PartitionName=pool Nodes=sbx[1-2],vgpufit-sbx Default=YES MaxTime=INFINITE State=UP
PartitionName=train Nodes=big[1-4] Default=NO
"""
GROUPS = [("sbx", "sbx[1-2]", "vgpufit-sbx"), ("big", "big[1-4]", None)]


def edit(site: str) -> NodesEdit:
    nodes, partitions = policy_definitions(FRAGMENT, GROUPS)
    return edit_nodes(site, FRAGMENT, nodes, partitions, path=PATH, policy="pool.yaml")


def test_policy_definitions_read_the_fragment() -> None:
    nodes, partitions = policy_definitions(FRAGMENT, GROUPS)
    assert [n.group for n in nodes] == ["sbx", "big"]
    assert [(p.name, p.anchors) for p in partitions] == [
        ("pool", ("vgpufit-sbx",)),
        ("train", ()),
    ]


def test_a_site_without_the_policys_nodes_is_left_alone() -> None:
    site = "NodeName=cpu[01-10] CPUs=64\nPartitionName=cpu Nodes=cpu[01-10]\n"
    got = edit(site)
    assert (got.text, got.fragment, got.changes, got.refusals) == (site, FRAGMENT, (), ())


def test_a_site_node_line_keeps_its_values_and_gets_slurmpools_gres() -> None:
    site = (
        "NodeName=DEFAULT Gres=gpu:a100:3,nic:1 Feature=ib\n"
        "NodeName=sbx[1-3] CPUs=32 Weight=5 # the GPU nodes\n"
        "NodeName=cpu01 CPUs=8\n"
    )
    got = edit(site)
    assert got.refusals == ()
    assert got.text.splitlines() == [
        "NodeName=DEFAULT Gres=gpu:a100:3,nic:1 Feature=ib",
        f"{DISABLED_PREFIX}NodeName=sbx[1-3] CPUs=32 Weight=5 # the GPU nodes",
        # Site values win (CPUs); what it lacks comes from the policy (RealMemory), the
        # features are appended to DEFAULT's, the host keys stay the site's.
        f"NodeName=sbx[1-2] CPUs=32 Weight=5 Gres={GRES},nic:1 RealMemory=4000 Feature=ib,mig "
        f"{ADDED_MARKER}",
        f"NodeName=sbx3 CPUs=32 Weight=5 {ADDED_MARKER}",
        "NodeName=cpu01 CPUs=8",
    ]
    assert got.inserted == (1, 1)
    assert [(c.line, c.before is None) for c in got.changes] == [(2, False), (3, True), (4, True)]
    # The fragment no longer defines sbx[1-2]; its anchor and the other group stay.
    assert "NodeName=sbx[1-2]" not in got.fragment
    assert "NodeName=big[1-4]" in got.fragment
    # The group's fit anchor is shaped as the site defines its nodes: a job the site's
    # nodes could run is accepted while every node's GPUs are in pieces.
    assert (
        f"NodeName=vgpufit-sbx CPUs=32 RealMemory=4000 Gres={GRES} State=FUTURE Feature=ib,mig\n"
        in got.fragment
    )
    assert unmark(got.text) == site


def test_a_line_over_two_groups_is_split_per_group() -> None:
    got = edit("NodeName=sbx2,big[3-4] CPUs=64 Gres=gpu:4\n")
    lines = got.text.splitlines()
    assert lines[1].startswith(f"NodeName=sbx2 CPUs=64 Gres={GRES} ")
    assert lines[2].startswith("NodeName=big[3-4] CPUs=64 Gres=gpu:h100:8 ")
    assert len(lines) == 3
    fragment_nodes = [line.split()[0] for line in got.fragment.splitlines() if "UNKNOWN" in line]
    assert fragment_nodes == ["NodeName=sbx1", "NodeName=big[1-2]"]


def test_a_site_partition_wins_and_gains_what_the_policy_asks() -> None:
    site = "PartitionName=pool Nodes=sbx[1-4] Default=YES State=UP\n"
    got = edit(site)
    assert got.text.splitlines()[1] == (
        f"PartitionName=pool Nodes=sbx[1-4],vgpufit-sbx Default=YES State=UP MaxTime=INFINITE "
        f"{ADDED_MARKER}"
    )
    assert "PartitionName=pool" not in got.fragment and "PartitionName=train" in got.fragment
    # Default=NO is what every partition the policy does not make the default gets.
    same = edit("PartitionName=train Nodes=ALL Default=YES\n")
    assert same.text == "PartitionName=train Nodes=ALL Default=YES\n" and same.changes == ()


def test_a_site_partition_that_disagrees_is_refused_naming_both() -> None:
    got = edit("PartitionName=pool Nodes=sbx1 MaxTime=1-00:00:00\n")
    assert got.refusals == (
        f"{PATH} line 1 ('PartitionName=pool Nodes=sbx1 MaxTime=1-00:00:00') and pool.yaml's "
        "partition pool: the site's partition lacks node(s) sbx2 of the policy's",
        f"{PATH} line 1 ('PartitionName=pool Nodes=sbx1 MaxTime=1-00:00:00') and pool.yaml's "
        "partition pool: MaxTime is 1-00:00:00 in the site's line, INFINITE in the policy",
    )
