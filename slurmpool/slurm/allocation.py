"""What slurmctld allocated to a job, per node, from output no user string can shape.

The prolog carves exactly this.  Three readers, all pure:

- :func:`allocation_from_json`: ``scontrol show job --json ID`` (23.02+; recorded on
  24.11 and 26.05 as the prolog sees it).  Every user-owned field is a JSON string,
  escaped by Slurm, so no name can add a key; a key that repeats in one object is
  refused all the same.  ``gres_detail`` holds one entry per allocated node, in the
  order of ``job_resources.nodes.allocation`` (which names each node).

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

import time

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

# The GRES a pool is allocated as (MIG slices: vgpu; shares: shard), checked for
# agreement between the per-node request, the per-node detail and the total.
POOL_GRES = ("vgpu", "shard")

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
    source: str  # "scontrol-json", "squeue" or "scontrol-text"

    def on(self, node: str) -> NodeAllocation:
        """The job's allocation on ``node`` (nothing when the job has no part there)."""
        for n in self.nodes:
            if n.node == node:
                return n
        return NodeAllocation(node, ())


# -- scontrol show job --json ---------------------------------------------------------


def _unique_keys(pairs: list[tuple[str, object]]) -> dict[str, object]:
    obj: dict[str, object] = {}
    for key, value in pairs:
        if key in obj:
            raise ForgedRecord(f"the JSON prints key {key!r} twice in one object")
        obj[key] = value
    return obj


def _json_node_names(job: dict[str, object], details: list[object]) -> list[str] | None:
    """The node each ``gres_detail`` entry belongs to, by ``job_resources`` (24.11+ data
    parsers); None where that part has another shape."""
    res = job.get("job_resources")
    nodes = res.get("nodes") if isinstance(res, dict) else None
    alloc = nodes.get("allocation") if isinstance(nodes, dict) else None
    if not isinstance(alloc, list) or len(alloc) != len(details):
        return None
    by_index: dict[int, str] = {}
    for a in alloc:
        if not isinstance(a, dict):
            return None
        index, name = a.get("index"), a.get("name")
        if not isinstance(index, int) or not isinstance(name, str) or index in by_index:
            return None
        by_index[index] = name
    if sorted(by_index) != list(range(len(details))):
        return None
    return [by_index[i] for i in range(len(details))]


def allocation_from_json(text: str, job_id: str) -> JobAllocation:
    """Job ``job_id``'s allocation from ``scontrol show job --json ID`` output."""
    import json

    from slurmpool.hostlist import HostlistError, expand
    from slurmpool.slurm.gres import parse_gres

    def fail(why: str) -> AllocationError:
        return AllocationError(f"scontrol --json: job {job_id}: {why}")

    try:
        doc = json.loads(text, object_pairs_hook=_unique_keys)
    except json.JSONDecodeError as e:
        raise fail(f"not JSON ({e})") from None
    jobs = doc.get("jobs") if isinstance(doc, dict) else None
    if not isinstance(jobs, list):
        raise fail("no 'jobs' list in the output")
    # An array's master id lists every task: ours is the one with our id.
    mine = [j for j in jobs if isinstance(j, dict) and str(j.get("job_id")) == job_id]
    if len(mine) != 1:
        raise fail(f"listed {len(mine)} times, expected once")
    job = mine[0]
    node_list, per_node = job.get("nodes"), job.get("tres_per_node")
    details = job.get("gres_detail")
    if not isinstance(node_list, str) or not isinstance(per_node, str):
        raise fail("'nodes' or 'tres_per_node' is not a string")
    if not isinstance(details, list) or not all(isinstance(d, str) for d in details):
        raise fail("'gres_detail' is not a list of strings")
    try:
        names = expand(node_list) if node_list else []
        request = parse_gres(per_node)
        gres = [tuple(parse_gres(d)) for d in details]
    except (HostlistError, ValueError) as e:
        raise fail(str(e)) from None
    wanted = {p: sum(g.count for g in request if g.name == p) for p in POOL_GRES}
    if not details:  # nothing per node: a job without GRES, or not allocated yet
        for name, each in wanted.items():
            if each and names:
                raise fail(f"{name}:{each} per node requested but no per-node GRES on {node_list}")
        return JobAllocation(job_id, tuple(NodeAllocation(n, ()) for n in names), "scontrol-json")
    if len(details) != len(names):
        raise fail(f"{len(details)} per-node GRES entries for {len(names)} node(s)")
    order = _json_node_names(job, details)
    if order is None:
        if len(set(gres)) > 1:
            raise fail("per-node GRES differ and the output does not say which node has which")
        order = names
    elif sorted(order) != sorted(names):
        raise fail(f"job_resources names {order}, the job's nodes are {names}")
    nodes = tuple(NodeAllocation(n, g) for n, g in zip(order, gres, strict=True))
    alloc = job.get("tres_alloc_str")
    for name, each in wanted.items():
        for n in nodes:
            if n.count(name) != each:
                raise fail(
                    f"{name}:{each} per node requested but {n.node} has {name}:{n.count(name)}"
                )
        total = _tres_count(alloc, name) if isinstance(alloc, str) else None
        if total is not None and total != each * len(names):
            raise fail(
                f"{name}:{each} per node on {len(names)} node(s) but gres/{name}={total} allocated"
            )
    return JobAllocation(job_id, nodes, "scontrol-json")


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
    for name in POOL_GRES:
        total = _tres_count(alloc, name)
        each = sum(g.count for g in request if g.name == name)
        if total is not None and total != each * len(names):
            raise AllocationError(
                f"squeue: job {job_id} has {name}:{each} per node on {len(names)} node(s) but "
                f"gres/{name}={total} allocated"
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


def read_allocation(
    runner: Runner, job_id: str, timeout: float = 10, *, scontrol_json: bool = False
) -> JobAllocation:
    """What slurmctld allocated to job ``job_id``, per node, in one bounded call:
    ``scontrol show job --json`` where ``scontrol_json`` says this Slurm has it (23.02+),
    else ``squeue -O``; ``scontrol show job -d``, strictly parsed, only where squeue
    lacks those fields.  A ``scontrol`` that does not know ``--json`` after all (the
    version was declared, not detected) gets the squeue read.

    ``timeout`` bounds the whole read, fallbacks included.  Raises SlurmCommandError
    when Slurm cannot be asked, and :class:`AllocationError` when the answer cannot
    be trusted.
    """
    from slurmpool.slurm.runner import SlurmCommandError

    end = time.monotonic() + timeout

    def left() -> float:
        return max(0.1, end - time.monotonic())

    if scontrol_json:
        res = runner.run("scontrol", "show", "job", "--json", job_id, timeout=left(), check=False)
        if res.ok:
            return allocation_from_json(res.stdout, job_id)
        # 22.05: "scontrol: unrecognized option '--json'" (measured).
        if "unrecognized option" not in res.stderr:
            raise SlurmCommandError(res.argv, res.returncode, res.stderr, res.stdout)
    argv = ("-h", "-j", job_id, "-O", SQUEUE_FORMAT)
    res = runner.run("squeue", *argv, timeout=left(), check=False)
    # A field this squeue does not know: "Invalid job format specification: X" on
    # stderr, and exit status 0 on 22.05 (measured).
    if "invalid job format" in res.stderr.lower():
        res = runner.run("scontrol", "show", "job", "-d", job_id, timeout=left())
        return allocation_from_text(res.stdout, job_id)
    if not res.ok:  # slurmctld unreachable or slow: a second call would not help
        raise SlurmCommandError(res.argv, res.returncode, res.stderr, res.stdout)
    return allocation_from_squeue(res.stdout, job_id)
