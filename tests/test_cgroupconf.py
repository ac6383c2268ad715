"""A site's cgroup.conf keeps every line; slurmpool adds only what it needs (pure)."""

from __future__ import annotations

from slurmpool.slurm.cgroupconf import edit_cgroup_conf
from slurmpool.slurm.marks import ADDED_MARKER, unmark

SITE = (
    "# the site's cgroup.conf\nCgroupPlugin=cgroup/v1\nAllowedRAMSpace=95\nConstrainRAMSpace=yes\n"
)
PATH = "/etc/slurm/cgroup.conf"


def test_a_site_file_gains_only_constrain_devices() -> None:
    got = edit_cgroup_conf(SITE, path=PATH, fence=True)
    assert got.text == SITE + f"ConstrainDevices=yes {ADDED_MARKER}\n"
    assert got.refusals == ()
    (added,) = got.added
    assert added.line == 5 and got.text.splitlines()[4] == f"ConstrainDevices=yes {ADDED_MARKER}"
    assert added.reason == "added: keeps each job to the GPU device files Slurm gave it"
    assert unmark(got.text) == SITE


def test_a_site_that_constrains_devices_already_is_left_as_it_is() -> None:
    site = SITE + "constraindevices=Yes\n"
    assert edit_cgroup_conf(site, path=PATH, fence=True).text == site
    assert edit_cgroup_conf(site, path=PATH, fence=True).added == ()


def test_constrain_devices_no_is_refused_naming_the_line() -> None:
    got = edit_cgroup_conf(SITE + "ConstrainDevices=no\n", path=PATH, fence=True)
    (why,) = got.refusals
    assert why.startswith(f"{PATH} line 5 ('ConstrainDevices=no'): slurmpool needs Constrain")
    assert "--task-cgroup skip" in why
    # A pool told not to fence devices has nothing to add or refuse there.
    unfenced = edit_cgroup_conf(SITE + "ConstrainDevices=no\n", path=PATH, fence=False)
    assert unfenced.refusals == () and unfenced.text == SITE + "ConstrainDevices=no\n"


def test_the_policys_cgroup_plugin_must_agree_with_the_sites() -> None:
    got = edit_cgroup_conf(SITE, path=PATH, fence=True, plugin="cgroup/v2", policy="p.yaml")
    assert got.refusals == (
        f"{PATH} line 2 ('CgroupPlugin=cgroup/v1'): p.yaml sets cgroup_plugin: cgroup/v2; "
        "make the two agree (cgroup_plugin: autodetect leaves the site's choice alone)",
    )
    assert edit_cgroup_conf(SITE, path=PATH, fence=True, plugin="cgroup/v1").refusals == ()
    bare = edit_cgroup_conf("AllowedRAMSpace=95", path=PATH, fence=True, plugin="cgroup/v2")
    assert bare.text == (
        f"AllowedRAMSpace=95\nConstrainDevices=yes {ADDED_MARKER}\n"
        f"CgroupPlugin=cgroup/v2 {ADDED_MARKER}\n"
    )
    assert [a.line for a in bare.added] == [2, 3]
