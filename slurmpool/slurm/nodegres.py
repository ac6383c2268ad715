"""A node's GRES counts, read from and written to slurmctld (commands built and parsed
here; run by the caller's :class:`~slurmpool.slurm.runner.Runner`).

Measured on 22.05, 24.11 and 26.05 (``tests/data/probe-count-gres.sh``):
``scontrol update NodeName=N Gres=LIST`` is accepted idle or busy, even below what
running jobs hold, and replaces the node's whole list; a GRES it leaves out is lost
until slurmctld restarts.  So an update restates every GRES the node has, with only
the counts it means to change.  Every slurmd registration and slurmctld restart puts
gres.conf's counts back.
"""

from __future__ import annotations

from slurmpool.records import record
from slurmpool.slurm.gres import format_gres, parse_gres, type_counts, with_counts

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Mapping

    from slurmpool.slurm.gres import Gres


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


def show_node_argv(node: str) -> list[str]:
    """``scontrol -d show node NODE``: ``-d`` adds GresUsed."""
    return ["scontrol", "-d", "show", "node", node]


def parse_node_gres(text: str, node: str) -> NodeGres:
    """The GRES of ``node`` in ``scontrol -d show node NODE`` output.

    Reads only the record's ``Gres=`` and ``GresUsed=`` lines, each a field of its own
    on every tested version: the hooks call this, and the full parser
    (:func:`slurmpool.slurm.parse.parse_nodes`) costs them its imports.  Only the first
    of each counts, so a later free-text field (an admin's Reason) cannot stand in.
    """
    fields: dict[str, str] | None = None
    for line in text.splitlines():
        if line.startswith("NodeName="):
            if fields is not None:
                break  # the next node's record
            if line.split(None, 1)[0] == f"NodeName={node}":
                fields = {}
            continue
        key, eq, value = line.strip().partition("=")
        if fields is not None and eq and key in ("Gres", "GresUsed") and key not in fields:
            fields[key] = value.split(" ", 1)[0]
    if fields is None:
        raise NodeGresError(f"scontrol show node {node}: no record of {node} in its output")
    if "Gres" not in fields:
        raise NodeGresError(f"scontrol show node {node}: no Gres= line in its record")
    return NodeGres(
        node, tuple(parse_gres(fields["Gres"])), tuple(parse_gres(fields.get("GresUsed")))
    )


def update_argv(node: str, gres: str) -> list[str]:
    return ["scontrol", "update", f"NodeName={node}", f"Gres={gres}"]


def counts_update(current: NodeGres, name: str, counts: Mapping[str, int]) -> str | None:
    """The ``Gres=`` list that sets each type of ``name`` in ``counts`` (only the types
    the node has), the node's other GRES restated as they are; None when the node has
    those counts already (nothing to send)."""
    items = with_counts(current.gres, name, counts)
    if list(items) == list(current.gres):
        return None
    return format_gres(items)
