"""Streaming ``sacct --parsable2`` records.

A month of a large site is millions of jobs, so records are read line by
line with only the fields the report needs (``sacct --json`` of the same
would be gigabytes).  ``AdminComment`` is the last field so that a ``|``
inside it cannot shift the others.  ``-D`` keeps the records of requeued
runs (state ``REQUEUED``), which is how requeues are counted.

:func:`parse_lines` is pure; :func:`stream_sacct` runs the command.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass

from slurmpool.slurm.runner import Runner

FIELDS: tuple[str, ...] = (
    "JobIDRaw",
    "User",
    "Account",
    "Partition",
    "NodeList",
    "State",
    "Start",
    "ElapsedRaw",
    "AllocTRES",
    "Cluster",
    "AdminComment",
)
_N = len(FIELDS)


@dataclass(frozen=True, slots=True)
class JobRecord:
    """One allocation record (``-X``) of sacct."""

    job_id: str
    user: str
    account: str
    partition: str
    nodes: str
    state: str  # first word: "CANCELLED by 0" -> "CANCELLED"
    start: str  # as sacct prints it (local time, ISO-like), "Unknown"/"None" if not started
    elapsed_s: int
    alloc_tres: str
    cluster: str
    admin_comment: str


class SacctFormatError(ValueError):
    """A sacct line does not have the expected fields."""


def parse_line(line: str, lineno: int = 0) -> JobRecord:
    parts = line.rstrip("\n").split("|", _N - 1)
    if len(parts) != _N:
        raise SacctFormatError(
            f"sacct line {lineno}: expected {_N} '|'-separated fields "
            f"({','.join(FIELDS)}), got {len(parts)}: {line[:80]!r}"
        )
    elapsed = parts[7]
    return JobRecord(
        job_id=parts[0],
        user=parts[1],
        account=parts[2],
        partition=parts[3],
        nodes=parts[4],
        state=parts[5].split(" ", 1)[0],
        start=parts[6],
        elapsed_s=int(elapsed) if elapsed.isdigit() else 0,
        alloc_tres=parts[8],
        cluster=parts[9],
        admin_comment=parts[10],
    )


def parse_lines(lines: Iterable[str], errors: list[str] | None = None) -> Iterator[JobRecord]:
    """Records of ``lines`` (sacct ``-n -P -o FIELDS`` output); bad lines go to ``errors``."""
    for i, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            yield parse_line(line, i)
        except SacctFormatError as e:
            if errors is None:
                raise
            if len(errors) < 100:
                errors.append(str(e))


def sacct_args(
    since: str, until: str, clusters: Sequence[str] = (), partitions: Sequence[str] = ()
) -> list[str]:
    """The sacct arguments of a report over ``[since, until]`` (sacct time syntax)."""
    args = ["-a", "-X", "-D", "-n", "-P", "-o", ",".join(FIELDS), "-S", since, "-E", until]
    if clusters:
        args += ["-M", ",".join(clusters)]
    if partitions:
        args += ["-r", ",".join(partitions)]
    return args


def stream_sacct(runner: Runner, args: Sequence[str], timeout_s: float = 3600.0) -> Iterator[str]:
    """Lines of ``sacct args...`` as they arrive, with the Runner's path and environment.

    Raises :class:`~slurmpool.slurm.runner.SlurmCommandError` (with stderr)
    when sacct fails, after the lines it printed (:meth:`Runner.stream`).
    """
    return runner.stream("sacct", *args, timeout=timeout_s)
