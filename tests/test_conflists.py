"""Joining slurmpool's items to a site's list settings in slurm.conf."""

from __future__ import annotations

import pytest

from slurmpool.slurm.conflists import is_list_key, items, merge


def test_the_sites_items_come_first_in_its_order_then_ours_it_lacks() -> None:
    got = merge("GresTypes", "shard, gpu", "gpu,vgpu,vgpufit")
    assert (got.value, got.added, got.conflicts) == (
        "shard,gpu,vgpu,vgpufit",
        ("vgpu", "vgpufit"),
        (),
    )
    assert merge("PrologFlags", "Contain,X11", "Alloc").value == "Contain,X11,Alloc"
    assert merge("grestypes", "", "gpu").value == "gpu"  # an empty site list


def test_names_compare_as_slurm_reads_them() -> None:
    """GRES names are case-sensitive; flags, plugins and TRES are not."""
    assert merge("GresTypes", "GPU", "gpu").value == "GPU,gpu"
    assert merge("PrologFlags", "alloc,contain", "Alloc").added == ()
    assert merge("AccountingStorageTRES", "GRES/GPU", "gres/gpu,gres/vgpu").value == (
        "GRES/GPU,gres/vgpu"
    )


def test_a_named_item_the_site_sets_otherwise_is_a_conflict_and_the_site_keeps_it() -> None:
    got = merge("SchedulerParameters", "bf_interval=30,defer", "bf_interval=1,bf_continue")
    assert got.value == "bf_interval=30,defer,bf_continue"
    assert got.conflicts == (
        "bf_interval: the site has bf_interval=30, slurmpool needs bf_interval=1",
    )
    assert merge("SchedulerParameters", "BF_INTERVAL=1", "bf_interval=1").conflicts == ()


def test_only_list_settings_merge() -> None:
    assert is_list_key("AccountingStorageEnforce") and not is_list_key("SelectType")
    with pytest.raises(ValueError, match="SelectType is not a list setting"):
        merge("SelectType", "select/cons_tres", "select/linear")
    assert items(" a, ,b ,") == ["a", "b"]
