"""A site's own ``cgroup.conf`` with what slurmpool needs added, every site line kept.

slurmd reads cgroup.conf on every node, and a site tunes it for its own jobs
(``AllowedRAMSpace``, ``CgroupPlugin=cgroup/v1``...).  slurmpool needs one thing of
it, ``ConstrainDevices=yes``, which keeps each job to the GPU device files Slurm gave
it (with ``TaskPlugin=task/cgroup``), and ``CgroupPlugin`` where the policy names one.
A line slurmpool adds is marked (:mod:`slurmpool.slurm.marks`), so that uninstall can
find it again after an admin edited other lines; a site line that says otherwise is
refused rather than changed.

Pure: text in, text out.
"""

from __future__ import annotations

from slurmpool.records import record
from slurmpool.slurm.marks import LineEdit
from slurmpool.slurm.marks import added as added_line
from slurmpool.slurm.siteneeds import site_settings


@record(frozen=True, slots=True)
class CgroupEdit:
    text: str  # the site's text with slurmpool's lines added
    added: tuple[LineEdit, ...]
    refusals: tuple[str, ...]  # each names the site's line and the fix


def edit_cgroup_conf(
    site: str, *, path: str, fence: bool, plugin: str = "autodetect", policy: str = "the policy"
) -> CgroupEdit:
    """The site's cgroup.conf ``site`` (file ``path``) with what slurmpool needs added.

    ``fence``: the pool fences devices (``ConstrainDevices=yes``; False where install
    was told to pool unfenced).  ``plugin``: the policy's ``cgroup_plugin``
    (``autodetect`` leaves the site's choice, or Slurm's default, alone); ``policy``
    names the policy file in messages."""
    settings = site_settings(site)
    wanted: list[tuple[str, str, str]] = []  # key, value, reason
    refusals: list[str] = []
    if fence:
        line = settings.get("constraindevices")
        if line is None:
            wanted.append(
                (
                    "ConstrainDevices",
                    "yes",
                    "keeps each job to the GPU device files Slurm gave it",
                )
            )
        elif line.value.strip().lower() != "yes":
            refusals.append(
                f"{line.where(path)}: slurmpool needs ConstrainDevices=yes to keep each job "
                "to the GPU device files Slurm gave it; set it to yes, or install with "
                "--task-cgroup skip to pool without device fencing"
            )
    if plugin != "autodetect":
        line = settings.get("cgroupplugin")
        if line is None:
            wanted.append(("CgroupPlugin", plugin, f"{policy} sets cgroup_plugin: {plugin}"))
        elif line.value.strip().lower() != plugin:
            refusals.append(
                f"{line.where(path)}: {policy} sets cgroup_plugin: {plugin}; make the two "
                "agree (cgroup_plugin: autodetect leaves the site's choice alone)"
            )
    text = site
    added: list[LineEdit] = []
    if wanted and text and not text.endswith("\n"):
        text += "\n"
    for key, value, reason in wanted:
        line_text = added_line(f"{key}={value}")
        text += line_text + "\n"
        added.append(LineEdit(text.count("\n"), None, f"added: {reason}"))
    return CgroupEdit(text, tuple(added), tuple(refusals))
