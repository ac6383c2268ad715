"""What install asks of a site's own slurm.conf settings (slurm/siteneeds), pure."""

from __future__ import annotations

import pytest

from slurmpool.slurm.siteneeds import HOOK_MARGIN_S, Needs, Verdict, check, site_settings
from slurmpool.slurm.version import parse_version

S22 = parse_version("22.05.8")
S24 = parse_version("24.11.5")
BUDGETS = {"prolog": 30, "epilog": 60, "epilog-slurmctld": 30}
FENCED = "SelectType=select/cons_tres\nTaskPlugin=task/affinity,task/cgroup\n"


def verdict(text: str, slurm: object = S22, **kw: object) -> Verdict:
    needs = Needs(slurm, BUDGETS, **kw)  # type: ignore[arg-type]
    return check(site_settings(text), needs, "slurm.conf")


def test_a_fenced_cons_tres_site_needs_nothing() -> None:
    assert verdict("ClusterName=c\n" + FENCED) == Verdict((), (), ())


def test_site_settings_name_the_last_line_of_each_key() -> None:
    got = site_settings("SelectType=select/linear\n# SelectType=x\nselecttype=select/cons_tres\n")
    assert got["selecttype"].line == 3 and got["selecttype"].value == "select/cons_tres"
    assert "nodename" not in site_settings("NodeName=a CPUs=2\nInclude /x\n")


@pytest.mark.parametrize(
    ("line", "slurm", "refused"),
    [
        ("", S22, "sets no SelectType, and Slurm 22.05 then uses select/linear"),
        ("", None, "sets no SelectType, and Slurm before 23.11 then uses select/linear"),
        ("", S24, None),  # 23.11 and later default to cons_tres
        ("SelectType=select/linear\n", S24, "select/linear gives each job whole nodes"),
        ("SelectType=select/cons_res\n", S22, "select/cons_res schedules no gres/shard"),
        ("SelectType=select/cons_res\n", S24, None),  # read as cons_tres since 23.11
        ("SelectType=Select/Cons_Tres\n", S22, None),
    ],
)
def test_select_type(line: str, slurm: object, refused: str | None) -> None:
    got = verdict(line + "TaskPlugin=task/cgroup\n", slurm)
    if refused is None:
        assert got.refusals == ()
        return
    (why,) = got.refusals
    assert refused in why and why.endswith(
        "set SelectType=select/cons_tres (then restart slurmctld and every slurmd)"
    )
    if line:
        assert f"slurm.conf line 1 ({line.strip()!r})" in why


def test_a_task_plugin_without_cgroup_is_refused_naming_the_line_and_the_options() -> None:
    (why,) = verdict("SelectType=select/cons_tres\nTaskPlugin=task/affinity\n").refusals
    assert why.startswith("slurm.conf line 2 ('TaskPlugin=task/affinity') has no task/cgroup")
    assert "--task-cgroup add" in why and "--task-cgroup skip" in why
    (why,) = verdict("SelectType=select/cons_tres\n").refusals
    assert why.startswith("slurm.conf sets no TaskPlugin (Slurm then runs task/none)")


def test_task_cgroup_add_keeps_the_sites_plugins_and_drops_none() -> None:
    got = verdict("SelectType=select/cons_tres\ntaskplugin=task/affinity\n", task_cgroup="add")
    (setting,) = got.settings
    assert (setting.key, setting.value) == ("taskplugin", "task/affinity,task/cgroup")
    assert "CPU and memory limits now hold every job" in setting.reason
    got = verdict("SelectType=select/cons_tres\nTaskPlugin=task/none\n", task_cgroup="add")
    assert [(s.key, s.value) for s in got.settings] == [("TaskPlugin", "task/cgroup")]
    got = verdict("SelectType=select/cons_tres\n", task_cgroup="add")
    assert [(s.key, s.value) for s in got.settings] == [("TaskPlugin", "task/cgroup")]
    assert got.refusals == () and got.notes == ()


def test_task_cgroup_skip_says_devices_are_not_fenced() -> None:
    got = verdict("SelectType=select/cons_tres\nTaskPlugin=task/none\n", task_cgroup="skip")
    assert got.refusals == () and got.settings == ()
    (note,) = got.notes
    assert "devices are not fenced" in note
    # A site that fences already is told nothing, whatever the choice.
    assert verdict(FENCED, task_cgroup="skip") == Verdict((), (), ())


@pytest.mark.parametrize(
    ("lines", "refused"),
    [
        ("PrologEpilogTimeout=65534\n", []),  # Slurm's "no timeout"
        (f"PrologEpilogTimeout={60 + HOOK_MARGIN_S}\n", []),
        ("PrologEpilogTimeout=60\n", ["epilog"]),  # 60 s: enough for the prolog only
        ("PrologEpilogTimeout=20\n", ["prolog", "epilog", "epilog-slurmctld"]),
        # 26.05: the split settings win over PrologEpilogTimeout.
        ("PrologEpilogTimeout=20\nPrologTimeout=50\nEpilogTimeout=300\n", []),
        ("PrologEpilogTimeout=600\nPrologTimeout=49\n", ["prolog"]),
    ],
)
def test_hook_timeouts_below_the_budget_are_refused(lines: str, refused: list[str]) -> None:
    got = verdict(FENCED + lines).refusals
    assert [why.split("Slurm kills the ")[1].split(" after")[0] for why in got] == refused
    for why in got:
        assert "hooks." in why and "half carved" in why


def test_a_timeout_names_its_line_and_the_value_it_needs() -> None:
    (why,) = verdict(FENCED + "PrologEpilogTimeout=60\n").refusals
    assert why.startswith("slurm.conf line 3 ('PrologEpilogTimeout=60'): Slurm kills the epilog")
    assert "hooks.epilog_timeout_s=60" in why and "Set PrologEpilogTimeout=80 or more" in why
