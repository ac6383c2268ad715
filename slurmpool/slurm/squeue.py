"""What slurmctld knows of a job now, read with ``squeue -O``.

sacct lags slurmctld: a job shows PENDING there for 0.5-2 s after it started,
and for seconds to minutes after slurmdbd was down (SLURM_FACTS.md, "The
database lags slurmctld").  Whether a job runs now, and where, is slurmctld's
to say while it still knows the job; accounting is the record only after.

Only fields Slurm computes and no user can set are asked for (no name,
comment, path or Extra), each ended by ``|`` and unpadded, so no user string
can add a field or a line.
"""

from __future__ import annotations

from slurmpool.records import record

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Mapping, Sequence

    from slurmpool.slurm.runner import Runner

# squeue -O field -> the sacct field of the same fact.
LIVE_FIELDS = {
    "JobID": "JobIDRaw",
    "State": "State",
    "UserName": "User",
    "Account": "Account",
    "Partition": "Partition",
    "NodeList": "NodeList",
    "TimeUsed": "ElapsedRaw",
    "tres-alloc": "AllocTRES",
}
# States in which a job holds its nodes.
LIVE_STATES = frozenset({"RUNNING", "COMPLETING", "SUSPENDED", "CONFIGURING", "STOPPED"})


class SqueueOutputError(ValueError):
    """squeue printed something other than the ``|``-ended fields asked for."""


def squeue_format(fields: Sequence[str]) -> str:
    """The ``-O`` argument printing ``fields`` unpadded, each ended by ``|``."""
    return ",".join(f"{f}:|" for f in fields)


def parse_squeue(text: str, fields: Sequence[str]) -> list[dict[str, str]]:
    """Rows of ``squeue -h -O squeue_format(fields)`` output, one dict per line."""
    rows = []
    for line in text.splitlines():
        if not line.strip():
            continue
        values = line.split("|")
        if len(values) != len(fields) + 1 or values[-1].strip():
            raise SqueueOutputError(
                f"squeue line {line[:200]!r}: expected {len(fields)} '|'-ended fields "
                f"({', '.join(fields)})"
            )
        rows.append({f: v.strip() for f, v in zip(fields, values, strict=False)})
    return rows


def seconds_of(time_used: str) -> int:
    """Seconds of a Slurm duration: ``SS``, ``MM:SS``, ``HH:MM:SS``, ``D-HH[:MM[:SS]]``."""
    text = time_used.strip()
    days, _, clock = text.rpartition("-")
    parts = clock.split(":")
    if days:
        parts += ["0"] * (3 - len(parts))  # D-HH and D-HH:MM count from hours
    numbers = [days or "0", *parts]
    if len(parts) > 3 or not all(p.isdigit() for p in numbers):
        raise SqueueOutputError(f"duration {time_used!r}: expected [D-][HH:]MM:SS")
    seconds = 0
    for p in parts:
        seconds = seconds * 60 + int(p)
    return int(numbers[0]) * 86400 + seconds


@record(frozen=True, slots=True)
class LiveJob:
    """A job as slurmctld holds it now."""

    job_id: str
    state: str
    user: str
    account: str
    partition: str
    nodes: str  # hostlist expression, "" while pending
    elapsed_s: int
    alloc_tres: str

    @property
    def running(self) -> bool:
        return self.state in LIVE_STATES

    def as_sacct_fields(self) -> dict[str, str]:
        """The job in sacct's field names, for code that reads either."""
        return {
            "JobIDRaw": self.job_id,
            "State": self.state,
            "User": self.user,
            "Account": self.account,
            "Partition": self.partition,
            "NodeList": self.nodes,
            "ElapsedRaw": str(self.elapsed_s),
            "AllocTRES": self.alloc_tres,
        }


def live_job_from_squeue(text: str, job_id: str) -> LiveJob | None:
    """Job ``job_id`` from ``read_live_job``'s squeue output (None when not listed)."""
    fields = tuple(LIVE_FIELDS)
    mine = [r for r in parse_squeue(text, fields) if r["JobID"] == job_id]
    if not mine:
        return None
    if len(mine) > 1:
        raise SqueueOutputError(f"squeue lists job {job_id} {len(mine)} times, expected once")
    row = mine[0]
    nodes, state = row["NodeList"], row["State"]
    return LiveJob(
        job_id=job_id,
        state=state,
        user=row["UserName"],
        account=row["Account"],
        partition=row["Partition"],
        nodes="" if nodes in ("(null)", "N/A") else nodes,
        elapsed_s=seconds_of(row["TimeUsed"]) if row["TimeUsed"] not in ("", "N/A") else 0,
        # A pending job's tres-alloc shows what it asked for, not an allocation.
        alloc_tres="" if state == "PENDING" else row["tres-alloc"],
    )


def read_live_job(runner: Runner, job_id: str, timeout: float = 15) -> LiveJob | None:
    """Job ``job_id`` as slurmctld holds it, in any state; None once slurmctld has
    forgotten it (after MinJobAge) or never knew it.

    Raises SlurmCommandError when slurmctld cannot be asked.
    """
    from slurmpool.slurm.runner import SlurmCommandError

    argv = ("-h", "-j", job_id, "--states=all", "-O", squeue_format(tuple(LIVE_FIELDS)))
    res = runner.run("squeue", *argv, timeout=timeout, check=False)
    if not res.ok:
        if "Invalid job id" in res.stderr:
            return None
        raise SlurmCommandError(res.argv, res.returncode, res.stderr, res.stdout)
    return live_job_from_squeue(res.stdout, job_id)


def merged_fields(
    accounting: Mapping[str, str] | None, live: LiveJob | None
) -> dict[str, str] | None:
    """sacct's fields for a job, with what slurmctld says now laid over them.

    Slurm-computed facts (state, nodes, elapsed, allocation) come from slurmctld
    while it knows the job; what only accounting holds (requested TRES, start,
    AdminComment) stays.  None when neither knows the job.
    """
    if accounting is None and live is None:
        return None
    fields = dict(accounting or {})
    if live is not None:
        for key, value in live.as_sacct_fields().items():
            if value or key not in fields:
                fields[key] = value
    return fields
