"""A node's GRES counts, read from and written to slurmctld (commands built and parsed
here; run by the caller's :class:`~slurmpool.slurm.runner.Runner`).

Measured on 22.05, 24.11 and 26.05 (``tests/data/probe-count-gres.sh``):
``scontrol update NodeName=N Gres=LIST`` is accepted idle or busy, even below what
running jobs hold, and replaces the node's whole list; a GRES it leaves out is lost
until slurmctld restarts.  So an update restates every GRES the node has, with only
the counts it means to change.  Every slurmd registration and slurmctld restart puts
gres.conf's counts back.

The read is ``sinfo -n NODE``: one node costs slurmctld a ``REQUEST_NODE_INFO_SINGLE``,
where every form of ``scontrol show node NODE`` is a ``REQUEST_NODE_INFO``, the whole
node table, on all three versions (``tests/data/probe-node-read-rpcs.sh``).  Each node
reads its own on every hook that publishes and every monitord repair.
"""

from __future__ import annotations

from slurmpool.records import record
from slurmpool.slurm.gres import Gres, format_gres, parse_gres, type_counts, with_counts

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Mapping


class NodeGresError(ValueError):
    """slurmctld's answer does not describe the node asked for."""


@record(frozen=True, slots=True)
class NodeGres:
    """A node's GRES as slurmctld has them: configured (``Gres``) and allocated
    (``GresUsed``)."""

    node: str
    gres: tuple[Gres, ...]
    used: tuple[Gres, ...]

    def counts(self, name: str) -> dict[str, int]:
        """The count of each type of GRES ``name``."""
        return type_counts(self.gres, name)

    def used_counts(self, name: str) -> dict[str, int]:
        """What running (and completing) jobs hold of each type of GRES ``name``."""
        return type_counts(self.used, name)


# sinfo's -O fields, '|' after each: a field with a separator is printed whole.
READ_FORMAT = "NodeList:|,Gres:|,GresUsed:|"


def read_node_argv(node: str) -> list[str]:
    """``sinfo -h -N -n NODE -O NodeList,Gres,GresUsed``: one line per partition of the
    node, each with its name, configured GRES and allocated GRES."""
    return ["sinfo", "-h", "-N", "-n", node, "-O", READ_FORMAT]


def parse_node_gres(text: str, node: str) -> NodeGres:
    """The GRES of ``node`` in :func:`read_node_argv`'s output (its first line that
    names ``node``: a node in several partitions has one line in each, all alike)."""
    for line in text.splitlines():
        fields = line.split("|")
        if len(fields) >= 3 and fields[0].strip() == node:
            return NodeGres(node, tuple(parse_gres(fields[1])), tuple(parse_gres(fields[2])))
    raise NodeGresError(
        f"sinfo -n {node}: no line for {node} in its output "
        f"(expected NODE|GRES|GRESUSED|, got {text.strip()[:200]!r})"
    )


def update_argv(node: str, gres: str) -> list[str]:
    return ["scontrol", "update", f"NodeName={node}", f"Gres={gres}"]


def counts_update(current: NodeGres, name: str, counts: Mapping[str, int]) -> str | None:
    """The ``Gres=`` list that sets each type of ``name`` in ``counts`` (only the types
    the node has), the node's other GRES restated as they are; None when the node has
    those counts already (nothing to send).

    slurmctld leaves a GRES whose counts are all 0 out of the node's list, and an
    update that names its types with counts puts it back (``probe-fit-zero.sh``, all
    three versions): a node that shows none of ``name`` gets every type in ``counts``
    appended, unless all of them are 0 (what it has already)."""
    items = with_counts(current.gres, name, counts)
    if not any(g.name == name for g in current.gres) and any(counts.values()):
        items = [*items, *(Gres(name, t, n) for t, n in counts.items())]
    if list(items) == list(current.gres):
        return None
    return format_gres(items)
