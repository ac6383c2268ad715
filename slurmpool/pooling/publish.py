"""A MIG-pooled node tells slurmctld what it can carve (:mod:`slurmpool.fit`).

Two halves, so that no Slurm call is made under the node lock:

* :func:`note`, inside a hook's store transaction (the node lock held), computes the
  node's :data:`~slurmpool.fit.FIT_GRES` counts from the live records and the
  instances NVML lists, and stores them with the next generation number when they
  changed;
* :func:`send`, after the transaction, sends the newest note to slurmctld unless it
  was sent already.  Senders take turns on a lock file that also says which
  generation went last, so a hook that noted earlier and sends later never
  overwrites a newer note: it sends the newest one, or nothing.

The update restates the node's whole GRES list with only the fit counts changed
(``scontrol update`` replaces the list; :mod:`slurmpool.slurm.nodegres`), so the
site's own GRES and ``vgpu``'s count, which accounting and limits read, stay as they
are.  Publishing is best effort within the hook's deadline: a failure is logged and
never fails the job; the next hook's note, or a later send, puts it right.

slurmctld forgets the counts at every slurmd registration, slurmctld restart and
reconfigure, none of which runs a hook: :func:`repair`, which monitord runs every
interval, compares what slurmctld has with a fresh note and sends when they differ.
"""

from __future__ import annotations

import json
import os

from slurmpool.fit import FIT_GRES, fit_sizes, node_counts
from slurmpool.modes import GpuMode
from slurmpool.pooling.text import clean
from slurmpool.state.store import ACTIVE, INTENT

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable, Sequence

    from slurmpool.catalogue import Catalogue
    from slurmpool.placement import GpuOccupancy
    from slurmpool.pooling.node import Node
    from slurmpool.pooling.slurmjob import SlurmJobs
    from slurmpool.state.store import Allocation, NodeStore

# The store's node_meta key of the newest note: {"gen": N, "counts": {"s4": 2, ...}}.
NOTE_KEY = "fit-note"
# In the run dir: the lock senders take turns on, holding the last note sent.
SENT_FILE = "fit-sent"
# How long a hook waits for another hook's send to finish (a send is two scontrol
# calls), within its deadline.
SEND_WAIT_S = 3.0
# Seconds one scontrol call of a send may take, within the hook's deadline.
CALL_S = 5.0


def fit_pooled(node: Node) -> bool:
    """The node pools MIG GPUs in compute slices: it has fit counts to publish."""
    return node.cls.publishes_fit


def node_sizes(node: Node, cat: Catalogue) -> tuple[int, ...]:
    """The instance sizes (compute slices) the node's vgpu requests round to: its fit
    types, as ``generate-config`` wrote them in gres.conf."""
    model = node.gpus(GpuMode.MIG)[0].model
    gpu = cat.get(model)

    def slices_of(count: int) -> int | None:
        name = node.config.profile_for(model, count)
        return None if name is None else gpu.gi_profile(name).slices

    return fit_sizes(node.cls.units_per_gpu, slices_of)


def counts(
    occupancy: Sequence[GpuOccupancy],
    records: Sequence[Allocation],
    sizes: Sequence[int],
) -> dict[str, int]:
    """The fit count of each size: the instances the node's jobs hold of it, plus how
    many more it could carve now; :data:`~slurmpool.fit.NEXT_TYPE`'s, from the jobs
    that hold them; and :data:`~slurmpool.fit.PAD_TYPE`'s (:func:`~slurmpool.fit.node_counts`).

    Held means a record Slurm still counts against a job: an intent (a prolog carving)
    or an active instance.  Slurm subtracts what its jobs were allocated, so a job it
    started whose prolog has not carved yet is counted once, as allocated, and not as
    free; an instance being released (or that no record holds) only blocks slices.
    """
    held: dict[int, int] = {}
    jobs: set[str] = set()
    for a in records:
        if a.mode is GpuMode.MIG and a.state in (INTENT, ACTIVE) and a.profile:
            model = next((o.model for o in occupancy if o.index == a.gpu_index), None)
            if model is None:
                continue
            slices = model.gi_profile(a.profile).slices
            held[slices] = held.get(slices, 0) + 1
            jobs.add(a.job_id)
    return node_counts(occupancy, sizes, held, len(jobs))


def note(node: Node, store: NodeStore, occupancy: Sequence[GpuOccupancy]) -> bool:
    """Store the node's fit counts with the next generation if they changed; call it
    inside the store transaction that read ``occupancy``.  True if a note was stored."""
    cat = node.catalogue()
    new = counts(occupancy, store.live(), node_sizes(node, cat))
    last = _load(store.meta(NOTE_KEY))
    if last is not None and last[1] == new:
        return False
    gen = (last[0] if last is not None else 0) + 1
    store.set_meta(NOTE_KEY, json.dumps({"gen": gen, "counts": new}, sort_keys=True))
    return True


def note_now(node: Node) -> bool:
    """:func:`note` in a transaction of its own, reading what each MIG GPU holds (the
    epilog's, once it has given instances back)."""
    from slurmpool.pooling.mig import MigGpu, occupancy

    cat = node.catalogue()
    backend = node.backend()
    gpus = node.gpus(GpuMode.MIG)
    # occupancy() reads index and model only: the GPU's UUID is not asked of NVML here.
    migs = [MigGpu(g.index, cat.get(g.model), "") for g in gpus]
    store = node.store()
    with store.transaction():
        instances = {g.index: backend.instances(node.nvml_index(g)) for g in gpus}
        return note(node, store, occupancy(migs, store.live(), instances))


def publish_now(node: Node, slurm: Callable[[], SlurmJobs], *, force: bool = False) -> bool:
    """:func:`note_now`, then :func:`send`: for a hook that changed what the node holds
    outside a transaction of its own (an epilog's release, a prolog's undo), and for
    :func:`repair`.  A busy store or a GPU that cannot be read is logged: the next hook
    notes again.  True if an update was sent."""
    from slurmpool.gpu.backend import GpuBackendError
    from slurmpool.state.db import StoreBusy

    try:
        note_now(node)
    except (StoreBusy, GpuBackendError) as e:
        node.log.event("fit-note-failed", level="warning", error=clean(str(e), 300))
    return send(node, slurm, force=force)


def repair(node: Node, slurm: Callable[[], SlurmJobs]) -> bool:
    """Note the node's counts afresh and make slurmctld's agree with them, whatever was
    sent before: monitord's periodic pass.  Every slurmd registration, slurmctld restart
    and ``scontrol reconfigure`` puts gres.conf's counts (an empty node's) back
    (measured, :mod:`slurmpool.slurm.nodegres`), and a hook killed between its note and
    its send left the note unsent.  Costs one one-node read when nothing is wrong.

    After a reboot, the records of the jobs the boot ended are released first, as the
    next prolog's reconcile would: their instances went with the boot, and counting
    them would keep slurmctld from sending the node what it can carve until a job
    starts there.  True if an update was sent."""
    from slurmpool.pooling.reconcile import forget_an_earlier_boot
    from slurmpool.state.db import StoreBusy

    try:
        store = node.store()
        with store.transaction():
            forget_an_earlier_boot(node)
    except StoreBusy:
        pass  # a hook holds the node lock (its prolog reconciles); the next pass tries again
    return publish_now(node, slurm, force=True)


def send(node: Node, slurm: Callable[[], SlurmJobs], *, force: bool = False) -> bool:
    """Send the newest note unless it went already (``force``: unless slurmctld has its
    counts); failures are logged, never raised (the job goes on, and the next hook
    sends again).  True if an update was sent."""
    from slurmpool.slurm.nodegres import NodeGresError
    from slurmpool.slurm.runner import SlurmCommandError

    try:
        return _send(node, slurm, force)
    except (SlurmCommandError, NodeGresError, OSError, ValueError) as e:
        node.log.event("fit-publish-failed", level="warning", error=clean(str(e), 300))
        return False


def _send(node: Node, slurm: Callable[[], SlurmJobs], force: bool) -> bool:
    from slurmpool.safefs import open_read_write, own_dir
    from slurmpool.slurm.nodegres import counts_update

    path = os.path.join(own_dir(node.run_dir, -1), SENT_FILE)
    fd = open_read_write(path, 0o600)
    try:
        if not _take_turn(fd, node.deadline.within(SEND_WAIT_S)):
            node.log.event("fit-publish-skipped", level="warning", detail="another send is slow")
            return False
        newest = _load(node.store().meta(NOTE_KEY))
        sent = _load(_read(fd))
        went = sent is not None and newest is not None and sent[0] >= newest[0]
        if newest is None or (went and not force):
            return False
        jobs = slurm()
        current = jobs.node_gres(node.name, CALL_S)
        gres = counts_update(current, FIT_GRES, newest[1])
        if gres is not None:
            jobs.set_node_gres(node.name, gres, CALL_S)
            if went:  # slurmctld lost what was sent: a registration, restart or reconfigure
                was = format_counts(current.counts(FIT_GRES))
                node.log.event("fit-repaired", gen=newest[0], gres=gres, slurmctld_had=was)
            else:
                node.log.event("fit-published", gen=newest[0], gres=gres)
        if not went:
            _write(fd, newest)
        return gres is not None
    finally:
        os.close(fd)  # closing releases the lock


def format_counts(counts: dict[str, int]) -> str:
    """``s1:14,s2:6``: fit counts for a log line."""
    return ",".join(f"{t}:{n}" for t, n in sorted(counts.items()))


def _take_turn(fd: int, wait_s: float) -> bool:
    """The send lock on ``fd`` within ``wait_s``: polled, as flock has no timeout."""
    import fcntl
    import time

    end = time.monotonic() + wait_s
    while True:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return True
        except BlockingIOError:
            if time.monotonic() >= end:
                return False
            time.sleep(0.01)


def _read(fd: int) -> str:
    os.lseek(fd, 0, os.SEEK_SET)
    return os.read(fd, 4096).decode("utf-8", "replace")


def _write(fd: int, sent: tuple[int, dict[str, int]]) -> None:
    data = json.dumps({"gen": sent[0], "counts": sent[1]}, sort_keys=True).encode()
    os.ftruncate(fd, 0)
    os.pwrite(fd, data, 0)


def _load(text: str | None) -> tuple[int, dict[str, int]] | None:
    """(generation, counts) from a note's text, or None for none or one unreadable
    (it is then noted or sent anew)."""
    if not text:
        return None
    try:
        data = json.loads(text)
        gen, raw = data["gen"], data["counts"]
        if not isinstance(gen, int) or not isinstance(raw, dict):
            return None
        return gen, {str(k): int(v) for k, v in raw.items()}
    except (ValueError, TypeError, KeyError):
        return None
