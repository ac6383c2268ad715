"""What slurmpool needs from settings a site's ``slurm.conf`` keeps for itself.

slurmpool writes settings of its own into ``slurmpool.conf`` (list settings join the
site's: :mod:`slurmpool.slurm.conflists`), but it rests on a few it does not own:

* ``SelectType`` must be ``select/cons_tres``: with ``select/linear`` each job gets
  whole nodes, so no two jobs share a node's GPUs, and ``gres/shard`` needs
  cons_tres (Slurm's gres.shtml, 22.05 to 26.05).  Where no line sets it, Slurm
  before 23.11 uses ``select/linear``; from 23.11 cons_tres, to which it also turns
  a ``select/cons_res`` line (read_config.h and interfaces/select.c of 23.11).
* ``TaskPlugin`` must hold ``task/cgroup`` for cgroup.conf's ``ConstrainDevices``
  to keep a job to the GPUs Slurm gave it.  Adding it also puts cgroup.conf's CPU
  and memory limits on every job, so slurmpool adds it only when asked
  (:data:`TaskCgroup`).
* Slurm kills a prolog or epilog that outlasts ``PrologEpilogTimeout`` (from 26.05
  also ``PrologTimeout``/``EpilogTimeout``, which win over it); slurmpool's
  wrappers take up to their budget plus :data:`HOOK_MARGIN_S`, and a hook killed
  part-way leaves a half-carved GPU.

Pure: the site's lines come in, a :class:`Verdict` comes out; install acts on it.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Literal

from slurmpool.records import record
from slurmpool.slurm.conf import ConfLine, scan_conf
from slurmpool.slurm.conflists import items
from slurmpool.slurm.version import SlurmVersion

# require: refuse a TaskPlugin without task/cgroup; add: slurmpool.conf adds it;
# skip: pool without device fencing (any job can open every GPU of its node).
TaskCgroup = Literal["require", "add", "skip"]
TASK_CGROUP_CHOICES: tuple[TaskCgroup, ...] = ("require", "add", "skip")

# What a hook wrapper may take beyond its budget: the 5 s kill grace of the step
# that ran out, then the short run that undoes a killed hook (10 s and its own 5 s).
HOOK_MARGIN_S = 20

# Slurm's "no timeout" for PrologEpilogTimeout and friends (NO_VAL16).
_NO_TIMEOUT = 65534

# Lines with several keys, which name a node, partition or file rather than set a key.
_NOT_SETTINGS = ("nodename", "partitionname", "nodeset", "frontendname", "include")


@record(frozen=True, slots=True)
class SiteSetting:
    """One setting of the site's file: the line Slurm reads it from (the last)."""

    key: str  # as written
    value: str
    line: int  # 1-based
    text: str  # the line as written
    file: str = ""  # the file it is in, where not the one messages name

    def where(self, conf: str) -> str:
        return f"{self.file or conf} line {self.line} ({self.text.strip()!r})"


def site_settings(text: str) -> dict[str, SiteSetting]:
    """The scalar and list settings of ``text`` by lower-case key; the last line wins."""
    return settings_of(("", line) for line in scan_conf(text))


def settings_of(lines: Iterable[tuple[str, ConfLine]]) -> dict[str, SiteSetting]:
    """The settings of (file, line) pairs in the order Slurm reads them
    (:func:`slurmpool.slurm.includes.walk`) by lower-case key; the last line wins."""
    out: dict[str, SiteSetting] = {}
    for file, line in lines:
        if line.key is None or line.value is None or line.key.lower() in _NOT_SETTINGS:
            continue
        out[line.key.lower()] = SiteSetting(line.key, line.value, line.index + 1, line.text, file)
    return out


@record(frozen=True, slots=True)
class Needs:
    """What the pool asks of the site's settings."""

    slurm: SlurmVersion | None  # the Slurm the site runs (its defaults count); None: unknown
    budgets: Mapping[str, int]  # hook name (prolog, epilog, epilog-slurmctld) -> seconds
    task_cgroup: TaskCgroup = "require"


@record(frozen=True, slots=True)
class Setting:
    """A setting slurmpool.conf takes over from the site (whose line is set aside)."""

    key: str
    value: str
    reason: str


@record(frozen=True, slots=True)
class Verdict:
    refusals: tuple[str, ...]  # each names the line and the fix
    settings: tuple[Setting, ...]
    notes: tuple[str, ...]


def check(site: Mapping[str, SiteSetting], needs: Needs, conf: str) -> Verdict:
    """Every refusal, takeover and note for the site's settings ``site`` (of file ``conf``)."""
    parts = (
        Verdict(tuple(_select_type(site.get("selecttype"), needs.slurm, conf)), (), ()),
        _task_plugin(site.get("taskplugin"), needs.task_cgroup, conf),
        Verdict(tuple(_hook_timeouts(site, needs.budgets, conf)), (), ()),
    )
    return Verdict(
        tuple(r for v in parts for r in v.refusals),
        tuple(s for v in parts for s in v.settings),
        tuple(n for v in parts for n in v.notes),
    )


def _select_type(line: SiteSetting | None, slurm: SlurmVersion | None, conf: str) -> list[str]:
    modern = slurm is not None and slurm.supports("cons_tres_default")
    fix = "set SelectType=select/cons_tres (then restart slurmctld and every slurmd)"
    if line is None:
        if modern:
            return []
        shown = f"Slurm {slurm.release}" if slurm is not None else "Slurm before 23.11"
        return [
            f"{conf} sets no SelectType, and {shown} then uses select/linear, which gives "
            f"each job whole nodes, so no two jobs share a node's GPUs; {fix}"
        ]
    value = line.value.strip().lower()
    if value == "select/cons_tres" or (value == "select/cons_res" and modern):
        return []
    why = {
        "select/linear": "gives each job whole nodes, so no two jobs share a node's GPUs",
        "select/cons_res": "schedules no gres/shard, and slurmpool's GRES are scheduled "
        "by select/cons_tres",
    }.get(value, "is not select/cons_tres, which slurmpool's GRES need")
    return [f"{line.where(conf)}: {line.value} {why}; {fix}"]


def _task_plugin(line: SiteSetting | None, choice: TaskCgroup, conf: str) -> Verdict:
    plugins = items(line.value) if line is not None else []
    if "task/cgroup" in (p.lower() for p in plugins):
        return Verdict((), (), ())
    what = (
        f"{line.where(conf)} has no task/cgroup"
        if line is not None
        else f"{conf} sets no TaskPlugin (Slurm then runs task/none)"
    )
    if choice == "skip":
        note = (
            f"{what}: devices are not fenced, any job can open every GPU of its node "
            "(--task-cgroup skip; `slurmpool doctor` says so on each node)"
        )
        return Verdict((), (), (note,))
    if choice == "add":
        kept = [p for p in plugins if p.lower() != "task/none"]
        added = Setting(
            line.key if line is not None else "TaskPlugin",
            ",".join([*kept, "task/cgroup"]),
            f"{what}; added (--task-cgroup add): cgroup.conf's ConstrainDevices keeps each "
            "job to its GPUs, and its CPU and memory limits now hold every job",
        )
        return Verdict((), (added,), ())
    refusal = (
        f"{what}, which cgroup.conf's ConstrainDevices needs to keep a job to the "
        "GPUs Slurm gave it. task/cgroup also puts cgroup.conf's CPU and memory limits on "
        "every job, so install does not add it by itself: add it to TaskPlugin yourself, "
        "pass --task-cgroup add to have install add it, or --task-cgroup skip to pool "
        "without device fencing (any job can open every GPU of its node)"
    )
    return Verdict((refusal,), (), ())


# Hook -> the settings that bound it, the first one set winning (26.05 has the split ones).
_TIMEOUT_KEYS: dict[str, tuple[str, ...]] = {
    "prolog": ("prologtimeout", "prologepilogtimeout"),
    "epilog": ("epilogtimeout", "prologepilogtimeout"),
    "epilog-slurmctld": ("epilogtimeout", "prologepilogtimeout"),
}
_BUDGET_FIELD = {
    "prolog": "hooks.prolog_timeout_s",
    "epilog": "hooks.epilog_timeout_s",
    "epilog-slurmctld": "hooks.epilog_slurmctld_timeout_s",
}


def _hook_timeouts(
    site: Mapping[str, SiteSetting], budgets: Mapping[str, int], conf: str
) -> list[str]:
    out: list[str] = []
    for hook, keys in _TIMEOUT_KEYS.items():
        line = next((site[k] for k in keys if k in site), None)
        budget = budgets.get(hook)
        if line is None or budget is None:
            continue  # Slurm's default: it waits for ever
        try:
            seconds = int(line.value)
        except ValueError:
            continue  # slurmctld refuses the file itself, naming the line
        need = budget + HOOK_MARGIN_S
        if seconds == _NO_TIMEOUT or seconds >= need:
            continue
        out.append(
            f"{line.where(conf)}: Slurm kills the {hook} after {seconds} s, and slurmpool's "
            f"{hook} may take its budget ({_BUDGET_FIELD[hook]}={budget}) plus {HOOK_MARGIN_S} s "
            f"to undo a step that ran out; a {hook} killed part-way leaves a GPU half carved. "
            f"Set {line.key}={need} or more, or lower {_BUDGET_FIELD[hook]}"
        )
    return out
