"""A site's gres.conf joined with slurmpool's lines for its node groups (pure)."""

from __future__ import annotations

from slurmpool.slurm.gresconf import GresEdit, PooledGroup, edit_gres_conf
from slurmpool.slurm.marks import DISABLED_PREFIX, unmark

PATH = "/etc/slurm/gres.conf"
OURS = "# slurmpool's\nNodeName=mig[01-04] Name=vgpu Count=14\n"
MIG = PooledGroup("mig", "mig[01-04]", has_mig=True)
SHARED = PooledGroup("l40s", "l40s[01-02]", has_mig=False)


def edit(site: str, *groups: PooledGroup) -> GresEdit:
    return edit_gres_conf(site, OURS, groups or (MIG,), path=PATH)


def test_lines_for_other_nodes_or_other_gres_stay_as_written() -> None:
    site = (
        "# the site's gres.conf\n"
        "NodeName=gpu[01-10] Name=gpu Type=v100 File=/dev/nvidia[0-3]\n"
        "NodeName=mig[01-04] Name=nic File=/dev/infiniband/uverbs0 \\# a literal hash\n"
        "NodeName=mig[01-04] AutoDetect=off\n"
        "Include /etc/slurm/gres.d/fpga.conf\n"
        "\n"
    )
    got = edit(site)
    assert got.refusals == ()
    assert got.text.startswith(site)
    assert (
        got.text == site + "#slurmpool-begin: slurmpool's lines for the GPUs of its node "
        "groups\n" + OURS + "#slurmpool-end\n"
    )
    (change,) = got.changes
    assert (change.line, change.before) == (7, None)
    assert (
        change.reason == "added, through line 10: slurmpool's lines for the GPUs of node group mig"
    )
    assert unmark(got.text) == site


def test_a_gpu_line_on_pooled_nodes_is_set_aside_and_the_rest_keeps_a_copy() -> None:
    site = (
        "NodeName=mig[01-02] Name=gpu File=/dev/nvidia0\n"
        "NodeName=mig[03-06],x1 Name=gpu File=/dev/nvidia[0-1] Cores=0-7\n"
    )
    got = edit(site)
    lines = got.text.splitlines()
    assert lines[:3] == [
        f"{DISABLED_PREFIX}NodeName=mig[01-02] Name=gpu File=/dev/nvidia0",
        f"{DISABLED_PREFIX}NodeName=mig[03-06],x1 Name=gpu File=/dev/nvidia[0-1] Cores=0-7",
        "NodeName=mig[05-06],x1 Name=gpu File=/dev/nvidia[0-1] Cores=0-7 #slurmpool-added",
    ]
    assert [(c.line, c.reason.split(":")[0]) for c in got.changes] == [
        (1, "set aside"),
        (2, "set aside"),
        (3, "added"),
        (4, "added, through line 7"),
    ]
    assert unmark(got.text) == site


def test_a_global_autodetect_stays_and_slurmpools_lines_turn_it_off() -> None:
    got = edit("AutoDetect=nvml\n")
    assert got.text.startswith("AutoDetect=nvml\n#slurmpool-begin")
    assert "\n# slurmpool's\nNodeName=mig[01-04] Name=vgpu Count=14 AutoDetect=off\n" in got.text
    assert "AutoDetect=off, which trumps" in got.changes[-1].reason
    # Without one, slurmpool's lines are as generated.
    assert "AutoDetect" not in edit("NodeName=x Name=gpu File=/dev/nvidia0\n").text


def test_shares_on_a_shared_group_are_set_aside_but_refused_on_a_mig_group() -> None:
    site = "NodeName=l40s[01-02] Name=shard Count=8 File=/dev/nvidia0\n"
    got = edit(site, SHARED, MIG)
    assert got.refusals == () and got.text.startswith(DISABLED_PREFIX)
    (why,) = edit("NodeName=mig01 Name=mps Count=100\n", SHARED, MIG).refusals
    assert why.startswith(f"{PATH} line 1 ('NodeName=mig01 Name=mps Count=100'): a mps on node")
    assert "whose MIG GPUs slurmpool pools" in why


def test_refusals_name_the_line() -> None:
    site = (
        "Name=gpu File=/dev/nvidia0\n"
        "NodeName=mig02 AutoDetect=rsmi\n"
        "NodeName=mig[01-99] Name=vgpufit Count=1\n"
        "NodeName=other Name=vgpu Count=1\n"
    )
    got = edit(site)
    assert [r.split(":")[0] for r in got.refusals] == [
        f"{PATH} line 1 ('Name=gpu File=/dev/nvidia0')",
        f"{PATH} line 2 ('NodeName=mig02 AutoDetect=rsmi')",
        f"{PATH} line 3 ('NodeName=mig[01-99] Name=vgpufit Count=1')",
    ]  # line 4 names no node of slurmpool's: the site's own business


def test_no_node_groups_leaves_the_site_file_alone() -> None:
    site = "NodeName=x Name=gpu File=/dev/nvidia0"
    got = edit_gres_conf(site, OURS, (), path=PATH)
    assert got.text == site and got.changes == () and got.refusals == ()
