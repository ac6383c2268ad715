"""Job traces for the replay: the openb format (Alibaba's cluster-trace-gpu-v2023) and
a site's own jobs (``slurmpool report --jobs-csv``), told apart by their header.

openb: one task per row: ``num_gpu`` GPUs (0: a CPU task, which the replay
ignores), ``gpu_milli`` thousandths of one GPU for a task that shares one,
arrival at ``creation_time`` and a duration of ``max(1, deletion_time -
creation_time)`` seconds.  A site's jobs: the same ``num_gpu`` and
``gpu_milli``, arrival at ``submit_time`` and a duration of ``max(1,
elapsed_s)``.  Rows are checked as they are read; a bad one is an error that
names the file, the line and the column.
"""

from __future__ import annotations

import csv
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path

OPENB_COLUMNS = ("name", "num_gpu", "gpu_milli", "creation_time", "deletion_time")
JOBS_COLUMNS = ("job_id", "num_gpu", "gpu_milli", "submit_time", "elapsed_s")


class TraceError(ValueError):
    """A trace that cannot be read; the message names the file, line and column."""


@dataclass(frozen=True, slots=True)
class Task:
    """One GPU task of a trace."""

    name: str
    arrival: int  # seconds from the trace's origin
    duration: int  # seconds, at least 1
    gpus: int  # GPUs asked for, at least 1
    milli: int  # thousandths of one GPU when it shares one (gpus == 1), else 1000

    @property
    def fraction(self) -> bool:
        """Whether the task asks for part of one GPU."""
        return self.gpus == 1 and self.milli < 1000

    def slices(self, per_gpu: int) -> int:
        """Compute slices of one GPU of ``per_gpu`` slices a fraction needs: the ceiling of
        its share (the traces' README: ceil(7 * m / 1000) on a 7-slice GPU)."""
        return min(per_gpu, max(1, -(-per_gpu * self.milli // 1000)))


def read_trace(path: str | Path) -> list[Task]:
    """The GPU tasks of an openb pod list or of a site's jobs CSV, in arrival order (ties:
    file order)."""
    with open(path, newline="") as f:
        tasks = list(parse_trace(f, str(path)))
    tasks.sort(key=lambda t: t.arrival)  # stable: file order among equal arrivals
    return tasks


def parse_trace(lines: Iterable[str], source: str = "<trace>") -> Iterator[Task]:
    reader = csv.DictReader(lines)
    header = reader.fieldnames or ()
    if "job_id" in header:
        columns, name, arrival_of = JOBS_COLUMNS, "job_id", _jobs_times
        what = "a jobs CSV (slurmpool report --jobs-csv)"
    else:
        columns, name, arrival_of = OPENB_COLUMNS, "name", _openb_times
        what = "an openb pod list"
    missing = [c for c in columns if c not in header]
    if missing:
        raise TraceError(
            f"{source}: no column {', '.join(missing)}; {what} has {', '.join(columns)} (and more)"
        )
    for row in reader:
        where = f"{source}:{reader.line_num}"
        gpus = _number(row, "num_gpu", where)
        if gpus == 0:
            continue
        milli = _number(row, "gpu_milli", where)
        if not 0 < milli <= 1000:
            raise TraceError(f"{where}: gpu_milli is {milli} for a GPU task, expected 1 to 1000")
        arrival, duration = arrival_of(row, where)
        yield Task(
            name=row[name],
            arrival=arrival,
            duration=max(1, duration),
            gpus=gpus,
            milli=milli if gpus == 1 else 1000,
        )


def _openb_times(row: dict[str, str], where: str) -> tuple[int, int]:
    arrival = _number(row, "creation_time", where)
    return arrival, _number(row, "deletion_time", where) - arrival


def _jobs_times(row: dict[str, str], where: str) -> tuple[int, int]:
    return _number(row, "submit_time", where), _number(row, "elapsed_s", where)


def _number(row: dict[str, str], column: str, where: str) -> int:
    text = (row[column] or "").strip()
    try:
        value = int(text)
    except ValueError:
        raise TraceError(f"{where}: {column} is {text!r}, expected a whole number") from None
    if value < 0:
        raise TraceError(f"{where}: {column} is {value}, expected 0 or more")
    return value
