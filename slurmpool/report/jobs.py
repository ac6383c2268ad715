"""One row per GPU job from Slurm accounting: ``slurmpool report --jobs-csv``.

A site's own history, in a form ``slurmpool simulate --trace`` replays: when each
job was submitted, started and ended, who ran it, what it asked for (AllocTRES:
``gres/vgpu``, ``gres/gpu``, ``gres/shard``), what slurmpool carved for it and how
busy it kept it (its AdminComment summary), and the request as the simulator
reads it: ``num_gpu`` GPUs, or ``gpu_milli`` thousandths of one.

A job that never started, or still runs, has no run to replay and is left out;
so are jobs without GPUs.  ``sacct`` is asked without ``-D``: a requeued job is
one row, its last run.  Pure: the command runs sacct (:func:`jobs_sacct_args`).
"""

from __future__ import annotations

import csv
import math
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import astuple, dataclass, fields
from datetime import datetime
from typing import TextIO

from slurmpool.report.aggregate import summary_devices, tres_count

JOB_FIELDS: tuple[str, ...] = (
    "JobIDRaw",
    "Cluster",
    "User",
    "Account",
    "Partition",
    "State",
    "Submit",
    "Start",
    "End",
    "ElapsedRaw",
    "AllocTRES",
    "AdminComment",  # last: a '|' inside it cannot shift the others
)
_N = len(JOB_FIELDS)
NOT_A_TIME = frozenset({"Unknown", "None", ""})
GPU_TRES = ("gres/vgpu=", "gres/gpu=", "gres/shard=")


@dataclass(frozen=True, slots=True)
class JobRow:
    """One job of the CSV, its columns in order."""

    job_id: str
    cluster: str
    user: str
    account: str
    partition: str
    state: str
    submit: str  # as sacct prints it (local time)
    start: str
    end: str
    submit_time: int  # seconds since the epoch
    wait_s: int
    elapsed_s: int
    request: str  # the GPU part of AllocTRES: "vgpu=3", "gpu=2", "shard=1"
    carved: str  # what the summary says the job held: "2g.20gb", "gpu", "share" ...
    util_mean: str  # mean utilisation of its devices that measured one, "" if none did
    gpu_hours: float  # its devices' weights (a 2g instance 2/7 of a GPU) times its hours
    num_gpu: int  # for the simulator: whole GPUs, or 1 with gpu_milli < 1000
    gpu_milli: int


COLUMNS = tuple(f.name for f in fields(JobRow))


def jobs_sacct_args(
    since: str, until: str, clusters: Sequence[str] = (), partitions: Sequence[str] = ()
) -> list[str]:
    """The sacct arguments of the jobs CSV over ``[since, until]`` (sacct time syntax)."""
    args = ["-a", "-X", "-n", "-P", "-o", ",".join(JOB_FIELDS), "-S", since, "-E", until]
    if clusters:
        args += ["-M", ",".join(clusters)]
    if partitions:
        args += ["-r", ",".join(partitions)]
    return args


def job_rows(
    lines: Iterable[str], vgpu_units: int = 7, errors: list[str] | None = None
) -> Iterator[JobRow]:
    """The GPU jobs of ``sacct -n -P -o JOB_FIELDS`` lines that ran and ended.  A line that
    cannot be read goes to ``errors`` (at most 100 kept), or raises ValueError."""
    for lineno, line in enumerate(lines, 1):
        if not line.strip():
            continue
        p = line.rstrip("\n").split("|", _N - 1)
        try:
            if len(p) != _N:
                raise ValueError(f"expected {_N} '|'-separated fields, got {len(p)}")
            job_id, cluster, user, account, partition, state, submit, start, end = p[:9]
            if start in NOT_A_TIME or end in NOT_A_TIME:
                continue  # never ran, or still runs
            request = _gpu_request(p[10])
            devices = summary_devices(p[11]) or []
            if not request and not devices:
                continue  # not a GPU job
            t_submit, t_start = _epoch(submit), _epoch(start)
            elapsed = int(p[9]) if p[9].isdigit() else 0
        except ValueError as e:
            if errors is None:
                raise ValueError(f"sacct line {lineno}: {e}: {line[:80]!r}") from None
            if len(errors) < 100:
                errors.append(f"sacct line {lineno}: {e}: {line[:80]!r}")
            continue
        if devices:
            weight = sum(d[5] for d in devices)
        else:  # as the report weighs it: whole GPUs, and vgpu units or shards of a GPU
            tres = p[10]
            vgpus = tres_count(tres, "gres/vgpu=") + tres_count(tres, "gres/shard=")
            weight = tres_count(tres, "gres/gpu=") + vgpus / max(1, vgpu_units)
        utils = [d[6] for d in devices if d[6] is not None]
        num_gpu, milli = simulator_request(weight)
        yield JobRow(
            job_id=job_id,
            cluster=cluster,
            user=user,
            account=account,
            partition=partition,
            state=state.split(" ", 1)[0],
            submit=submit,
            start=start,
            end=end,
            submit_time=t_submit,
            wait_s=max(0, t_start - t_submit),
            elapsed_s=elapsed,
            request=request,
            carved="+".join(d[4] if d[4] not in ("", "-") else d[2] for d in devices),
            util_mean=f"{sum(utils) / len(utils):.1f}" if utils else "",
            gpu_hours=round(weight * elapsed / 3600, 6),
            num_gpu=num_gpu,
            gpu_milli=milli,
        )


def simulator_request(weight: float) -> tuple[int, int]:
    """(num_gpu, gpu_milli) for a job holding ``weight`` GPUs: under one, a fraction in
    thousandths rounded down, so that ceil(units * milli / 1000) gives back its units
    (2/7 -> 285, which a 7-slice GPU reads as 2 slices); else whole GPUs."""
    if weight < 1:
        return 1, max(1, math.floor(weight * 1000 + 1e-9))
    return max(1, round(weight)), 1000


def write_jobs_csv(rows: Iterable[JobRow], out: TextIO) -> int:
    """Write the header and ``rows``; returns how many rows."""
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow(COLUMNS)
    n = 0
    for row in rows:
        writer.writerow(astuple(row))
        n += 1
    return n


def _gpu_request(tres: str) -> str:
    """The GPU entries of AllocTRES, without the ``gres/`` prefix, '+'-joined."""
    return "+".join(e[5:] for e in tres.split(",") if e.startswith(GPU_TRES))


def _epoch(text: str) -> int:
    """Seconds since the epoch of sacct's local ``YYYY-MM-DDTHH:MM:SS``."""
    try:
        return int(datetime.fromisoformat(text).timestamp())
    except ValueError:
        raise ValueError(f"{text!r} is not a time like 2026-12-01T08:00:00") from None
