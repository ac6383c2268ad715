"""Keep Slurm from sending a job straight back to the node that just requeued it.

Slurm counts vgpu units, not where the free slices lie.  After a requeue it starts
the job again on the first node whose count fits, most often the same fragmented
node, and the prolog requeues it again at every try while other nodes have room
(``slurmpool simulate`` on the default openb trace, 6 nodes of 8 A100: 14.8 million
requeues and a mean wait of 70 hours that way, 11,788 and 1.07 hours with this).  So
when the prolog requeues a job for want of room, it records the job in the node's
store and adds the node to the job's ExcNodeList; the node's epilog, once it has
freed slices, takes the node out of the ExcNodeList of every job it recorded.  A
node's free slices only grow when something on it ends, so until then the job could
not fit there anyway.

Measured on Slurm 22.05, 24.11 and 26.05 (the sandbox; tests/data/probe-excnodelist.sh):

* ExcNodeList cannot change while the job runs ("Job is no longer pending
  execution"); right after ``scontrol requeue`` (the job COMPLETING on its way to
  PENDING) the update is taken, and the job's next start avoids the node;
* a job whose ExcNodeList names every node it could run on waits with
  Reason=BadConstraints, and runs once a node is taken out again.

The user's own exclusions stay: the node is appended to the list, and only it is
taken out.  The record comes first, so no exclusion is made that the epilog does
not know of.  An entry stays on the record until an epilog reads the job's list
without the node, or slurmctld is done with the job: a change undone by another
node's hook editing the same job at the same moment is made again at the next
epilog, and a job that is running (its list cannot change then) is seen to again.
"""

from __future__ import annotations

from slurmpool.hostlist import HostList, HostlistError, compress
from slurmpool.pooling.text import clean
from slurmpool.slurm.runner import SlurmCommandError, SlurmCommandTimeout
from slurmpool.state.db import StoreBusy

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable

    from slurmpool.pooling.node import EventLog
    from slurmpool.pooling.slurmjob import SlurmJobs
    from slurmpool.state.store import NodeStore

# Job states slurmctld has finished with: the record goes.
ENDED = frozenset(
    {
        "BOOT_FAIL",
        "CANCELLED",
        "COMPLETED",
        "DEADLINE",
        "FAILED",
        "NODE_FAIL",
        "OUT_OF_MEMORY",
        "PREEMPTED",
        "TIMEOUT",
    }
)


def with_node(nodes: str, node: str) -> str:
    """The hostlist ``nodes`` with ``node`` in it."""
    if not nodes:
        return node
    if HostList(nodes).contains(node):
        return nodes
    return f"{nodes},{node}"


def without_node(nodes: str, node: str) -> str:
    """The hostlist ``nodes`` without ``node`` ("" when nothing is left)."""
    names = HostList(nodes).expand() if nodes else []
    return compress(n for n in names if n != node)


def exclude_here(
    node: str, job_id: str, slurm: SlurmJobs, store: Callable[[], NodeStore], log: EventLog
) -> bool:
    """After the job's requeue: add ``node`` to its ExcNodeList, once the node's store
    has it on record.  True if it was added; a failure is logged and leaves the job
    free to come back here."""
    try:
        s = store()
        with s.transaction():
            s.add_exclusion(job_id)
    except StoreBusy as e:
        log.event("exclude-skipped", level="warning", job=job_id, error=clean(str(e)))
        return False
    try:
        found = slurm.exclusions(job_id)
        if found is None:
            return False  # gone already (cancelled)
        nodes = with_node(found[1], node)
        slurm.set_exclusions(job_id, nodes)
    except (SlurmCommandError, HostlistError) as e:
        log.event("exclude-failed", level="warning", job=job_id, error=clean(str(e)))
        return False
    log.event("excluded", job=job_id, exc_nodes=nodes)
    return True


def readmit(node: str, slurm: SlurmJobs, store: NodeStore, log: EventLog) -> None:
    """After the node freed slices: take it out of the ExcNodeList of each job it put
    itself in (:func:`exclude_here`); a failure is logged and retried at the next
    epilog."""
    for job_id in store.exclusions():
        try:
            found = slurm.exclusions(job_id)
            if found is None or found[0] in ENDED:
                done = True
            elif not found[1] or not HostList(found[1]).contains(node):
                done = True  # taken out (by the last epilog, or the job's owner)
            else:
                done = False
                if found[0] == "PENDING":
                    nodes = without_node(found[1], node)
                    slurm.set_exclusions(job_id, nodes)
                    log.event("readmitted", job=job_id, exc_nodes=nodes or "-")
        except SlurmCommandTimeout as e:  # the hook's time is up: the next epilog goes on
            log.event("readmit-failed", level="warning", job=job_id, error=clean(str(e)))
            return
        except (SlurmCommandError, HostlistError) as e:
            log.event("readmit-failed", level="warning", job=job_id, error=clean(str(e)))
            continue
        if done:
            with store.transaction():
                store.drop_exclusion(job_id)
