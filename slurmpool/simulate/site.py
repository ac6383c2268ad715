"""A site's pool, for the replay: the nodes and GPUs its policy's node groups name.

Every GPU of a node counts, whatever its mode in the policy: the replay asks what
each pooling policy would do with the hardware.  A node is one model of GPU
(the replay has no way to place a task on two models at once).
"""

from __future__ import annotations

from slurmpool.catalogue import Catalogue
from slurmpool.policy.model import Policy
from slurmpool.simulate.pools import NodeShape, PoolError


def site_shapes(policy: Policy, catalogue: Catalogue) -> list[NodeShape]:
    """One :class:`NodeShape` per node of the policy's node groups, in group order."""
    shapes: list[NodeShape] = []
    for group in policy.node_groups:
        models = sorted({g.model for g in group.gpus})
        if not models:
            continue  # a CPU-only group: no GPU task runs there
        if len(models) > 1:
            raise PoolError(
                f"{policy.source}: node group {group.name} has GPUs of {' and '.join(models)}; "
                "the replay models one GPU model per node"
            )
        shape = NodeShape(len(group.gpus), catalogue.get(models[0]))
        shapes.extend([shape] * len(group.hostlist.expand()))
    if not shapes:
        raise PoolError(f"{policy.source}: no node group has GPUs")
    return shapes
