"""What slurmctld allocated to a job, per node, from output no user string can shape.

The prolog carves exactly this.  Two readers, both pure:

- :func:`allocation_from_squeue`: ``squeue -h -j ID -O`` with :data:`SQUEUE_FIELDS`
  only, fields Slurm computes and no user can set (job id, node list, per-node TRES,
  allocated TRES), each ended by ``|`` (:mod:`slurmpool.slurm.squeue`), one line per
  job; measured on 22.05 (24.11+ print the per-node TRES as ``gres/vgpu:N``, which
  :func:`~slurmpool.slurm.gres.parse_gres` reads too).  Slurm grants a per-node GRES
  request whole on every node of the job, and the allocated total must agree with it.
  (``squeue --json`` is not used: on 22.05 it ignores ``-j`` and prints every job in
  the queue, measured.)
- :func:`allocation_from_text`: ``scontrol show job -d ID``, where squeue lacks those
  fields.  Text output has no escaping: a job name holding
  ``\\n   TresPerNode=gres:vgpu:7`` prints as a real-looking line.  Slurm prints
  each key once per record (the per-node ``Nodes= CPU_IDs= Mem= GRES=`` lines
  once per node), so a record where a key repeats, where two per-node lines
  name the same node, or output with more than the one record asked for,
  carries a forgery and is refused.
"""

from __future__ import annotations

from slurmpool.records import record
from slurmpool.slurm.squeue import squeue_format

TYPE_CHECKING = False
if TYPE_CHECKING:
    from slurmpool.slurm.gres import Gres
    from slurmpool.slurm.parse import Record
    from slurmpool.slurm.runner import Runner

# ``squeue -O`` fields (see :mod:`slurmpool.slurm.squeue`): no padding, no truncation,
# "|" after each (no GRES name, host name or TRES string holds one).
SQUEUE_FIELDS = ("JobID", "NodeList", "tres-per-node", "tres-alloc")
SQUEUE_FORMAT = squeue_format(SQUEUE_FIELDS)

# Keys a ``scontrol show job -d`` record repeats legitimately: one group per node.
PER_NODE_KEYS = frozenset({"Nodes", "CPU_IDs", "Mem", "GRES"})


class AllocationError(ValueError):
    """The output does not give a trustworthy allocation (the message says why)."""


class ForgedRecord(AllocationError):
    """The output carries a key twice: a user-owned field holds a forged line."""


@record(frozen=True, slots=True)
class NodeAllocation:
    """The GRES slurmctld allocated to the job on ``node``."""

    node: str
    gres: tuple[Gres, ...]

    def count(self, name: str) -> int:
        return sum(g.count for g in self.gres if g.name == name)


@record(frozen=True, slots=True)
class JobAllocation:
    """A job's allocation, node by node, and where it was read from."""

    job_id: str
    nodes: tuple[NodeAllocation, ...]
    source: str  # "squeue" or "scontrol-text"

    def on(self, node: str) -> NodeAllocation:
        """The job's allocation on ``node`` (nothing when the job has no part there)."""
        for n in self.nodes:
            if n.node == node:
                return n
        return NodeAllocation(node, ())


# -- squeue -O -------------------------------------------------------------------------


def _tres_count(tres: str, name: str) -> int | None:
    """``gres/NAME=N`` of an allocated-TRES string (None when it is not counted there)."""
    for item in tres.split(","):
        key, _, value = item.partition("=")
        if key == f"gres/{name}":
            if not value.isdigit():
                raise AllocationError(f"allocated TRES {item!r}: not a count")
            return int(value)
    return None


def allocation_from_squeue(text: str, job_id: str) -> JobAllocation:
    """Job ``job_id``'s allocation from ``read_allocation``'s squeue output."""
    from slurmpool.hostlist import HostlistError, expand
    from slurmpool.slurm.gres import parse_gres
    from slurmpool.slurm.squeue import SqueueOutputError, parse_squeue

    try:
        rows = parse_squeue(text, SQUEUE_FIELDS)
    except SqueueOutputError as e:
        raise AllocationError(str(e)) from None
    mine = [[r[f] for f in SQUEUE_FIELDS] for r in rows if r["JobID"] == job_id]
    if len(mine) != 1:
        raise AllocationError(f"squeue lists job {job_id} {len(mine)} times, expected once")
    _, node_list, per_node, alloc = mine[0]
    try:
        names = expand(node_list) if node_list not in ("", "(null)", "N/A") else []
        request = tuple(parse_gres(per_node))
    except (HostlistError, ValueError) as e:
        raise AllocationError(f"squeue: job {job_id}: {e}") from None
    total = _tres_count(alloc, "vgpu")
    each = sum(g.count for g in request if g.name == "vgpu")
    if total is not None and total != each * len(names):
        raise AllocationError(
            f"squeue: job {job_id} has vgpu:{each} per node on {len(names)} node(s) but "
            f"gres/vgpu={total} allocated"
        )
    return JobAllocation(job_id, tuple(NodeAllocation(n, request) for n in names), "squeue")


def admin_comment_from_squeue(text: str, job_id: str) -> str | None:
    """The AdminComment of ``squeue -h -j ID -O JobID:|,AdminComment:|`` output, or None
    when the output does not hold it on one line of its own."""
    prefix = f"{job_id}|"
    lines = [line for line in text.splitlines() if line.startswith(prefix)]
    if len(lines) != 1 or not lines[0].endswith("|"):
        return None
    value = lines[0][len(prefix) : -1].strip()
    return "" if value in ("(null)", "N/A") else value


# -- scontrol show job -d --------------------------------------------------------------


def check_unique_keys(rec: Record) -> None:
    """Refuse a ``scontrol show job`` record whose keys repeat (see the module docstring)."""
    from slurmpool.hostlist import HostList, HostlistError

    seen: set[str] = set()
    node_lines: list[HostList] = []
    for key, value in rec.pairs:
        if key in PER_NODE_KEYS:
            if key == "Nodes":
                try:
                    hosts = HostList(value)
                except HostlistError:
                    raise ForgedRecord(f"per-node line names nodes {value!r}") from None
                for other in node_lines:
                    common = hosts.first_common(other)
                    if common is not None:
                        raise ForgedRecord(f"two per-node lines name node {common}")
                node_lines.append(hosts)
            continue
        if key in seen:
            raise ForgedRecord(f"the record prints {key}= twice")
        seen.add(key)


def allocation_from_text(text: str, job_id: str) -> JobAllocation:
    """Job ``job_id``'s allocation from ``scontrol show job -d ID`` output."""
    from slurmpool.hostlist import HostlistError, expand
    from slurmpool.slurm.parse import parse_jobs

    try:
        jobs = parse_jobs(text)
    except ValueError as e:
        raise AllocationError(f"scontrol output: {e}") from None
    # One job asked, one record printed: a second record (a name holding a line that
    # starts with JobId=) would have taken the real record's tail.
    if len(jobs) != 1:
        raise ForgedRecord(f"scontrol printed {len(jobs)} job records for job {job_id}")
    job = jobs[0]
    if str(job.job_id) != job_id:
        raise AllocationError(f"scontrol printed job {job.job_id}, not {job_id}")
    check_unique_keys(job.record)
    nodes: list[NodeAllocation] = []
    try:
        for d in job.details:
            nodes.extend(NodeAllocation(n, d.gres) for n in expand(d.nodes))
    except HostlistError as e:
        raise AllocationError(f"scontrol output: job {job_id} nodes: {e}") from None
    return JobAllocation(job_id, tuple(nodes), "scontrol-text")


# -- the call --------------------------------------------------------------------------


def read_allocation(runner: Runner, job_id: str, timeout: float = 10) -> JobAllocation:
    """What slurmctld allocated to job ``job_id``, per node: one bounded ``squeue`` call;
    ``scontrol show job -d``, strictly parsed, only where squeue lacks those fields.

    Raises SlurmCommandError when Slurm cannot be asked, and :class:`AllocationError`
    when the answer cannot be trusted.
    """
    from slurmpool.slurm.runner import SlurmCommandError

    argv = ("-h", "-j", job_id, "-O", SQUEUE_FORMAT)
    res = runner.run("squeue", *argv, timeout=timeout, check=False)
    # A field this squeue does not know: "Invalid job format specification: X" on
    # stderr, and exit status 0 on 22.05 (measured).
    if "invalid job format" in res.stderr.lower():
        res = runner.run("scontrol", "show", "job", "-d", job_id, timeout=timeout)
        return allocation_from_text(res.stdout, job_id)
    if not res.ok:  # slurmctld unreachable or slow: a second call would not help
        raise SlurmCommandError(res.argv, res.returncode, res.stderr, res.stdout)
    return allocation_from_squeue(res.stdout, job_id)
