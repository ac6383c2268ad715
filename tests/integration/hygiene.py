"""The shared sandbox put back as every test expects to find it, whatever a test did.

All integration tests share one cluster, so one test that fails half-way must
not fail the ones after it: a fault file it planted would kill the next real
prolog, a job it left would hold slices, a node it drained would take no jobs,
an instance it leaked would make every "the node is empty" check fail.  After
each test :func:`restore` removes, cancels, destroys and resumes all of that
and returns what it found, so the test that left it is named.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from polling import poll

from slurmpool.gpu.select import open_backend
from slurmpool.sim.faults import FAULTS_DIR
from slurmpool.slurm.parse import parse_nodes

if TYPE_CHECKING:
    from .conftest import Cluster

# Jobs a test leaves behind; a COMPLETING job is already ending and only waited for.
LIVE = "PENDING,RUNNING,SUSPENDED,CONFIGURING,REQUEUED,REQUEUE_HOLD,REQUEUE_FED"
SETTLE_S = 90  # a generous bound only a stuck daemon reaches


@dataclass
class Leftovers:
    faults: list[str] = field(default_factory=list)
    jobs: list[str] = field(default_factory=list)
    instances: list[str] = field(default_factory=list)
    drained: list[str] = field(default_factory=list)

    def __bool__(self) -> bool:
        return bool(self.faults or self.jobs or self.instances or self.drained)

    def describe(self) -> str:
        parts = [
            f"{what}: {', '.join(items)}"
            for what, items in (
                ("fault files", self.faults),
                ("jobs still queued or running", self.jobs),
                ("MIG instances", self.instances),
                ("nodes drained or down", self.drained),
            )
            if items
        ]
        return "; ".join(parts)


def _queue(cluster: Cluster, states: str | None = None) -> list[str]:
    args = ["-h", "-o", "%i|%T"] + ([f"--states={states}"] if states else [])
    out = cluster.slurm.run("squeue", *args, timeout=15).stdout
    return [line for line in out.splitlines() if line.strip()]


def _remove_faults(cluster: Cluster, found: Leftovers) -> None:
    for node in cluster.state.nodes:
        faults = cluster.sandbox.layout.host_dir(node) / "sim" / FAULTS_DIR
        for path in sorted(faults.glob("*")) if faults.is_dir() else []:
            found.faults.append(f"{node}:{path.name}")
            path.unlink()


def _cancel_jobs(cluster: Cluster, found: Leftovers) -> None:
    live = _queue(cluster, LIVE)
    found.jobs.extend(live)
    if live:
        ids = [line.split("|", 1)[0] for line in live]
        cluster.slurm.run("scancel", *ids, check=False, timeout=15)
    poll("every job to end", lambda: not _queue(cluster), SETTLE_S)


def _destroy_instances(cluster: Cluster, found: Leftovers) -> None:
    for node in cluster.state.nodes:
        with open_backend(f"sim:{cluster.sandbox.layout.host_dir(node) / 'sim'}") as backend:
            for gpu in backend.gpus():
                for inst in backend.instances(gpu.index):
                    found.instances.append(
                        f"{node} GPU {gpu.index} GI {inst.gi_id} ({inst.profile})"
                    )
                    backend.destroy_instance(gpu.index, inst.gi_id)


def _nodes(cluster: Cluster) -> list[Any]:
    out = cluster.slurm.run("scontrol", "show", "node", timeout=15).stdout
    return parse_nodes(out)


def _resume_nodes(cluster: Cluster, found: Leftovers) -> None:
    for node in _nodes(cluster):
        if not node.available:
            found.drained.append(
                f"{node.name} ({node.state}+{'+'.join(node.flags)}: {node.reason})"
            )
            cluster.slurm.run(
                "scontrol", "update", f"NodeName={node.name}", "State=RESUME", check=False
            )
    if found.drained:
        poll(
            "every node to take jobs again",
            lambda: all(n.available for n in _nodes(cluster)),
            SETTLE_S,
        )


def restore(cluster: Cluster) -> Leftovers:
    """Put the sandbox back (no fault files, no jobs, no instances, every node up);
    return what was left."""
    found = Leftovers()
    _remove_faults(cluster, found)
    _cancel_jobs(cluster, found)
    _destroy_instances(cluster, found)
    _resume_nodes(cluster, found)
    return found
