"""Summaries no epilog made (killed, timed out, the node rebooted), made by monitord.

The epilog summarises a job at its end; when it never got that far, the
job's samples are still in the node's store (kept ``Retention.totals_age_s``).
A job is *missed* when its devices have gone unsampled for ``quiet_s``, no
live allocation on this node is its, no summary was made for it since those
samples, and slurmctld no longer holds it as pending or running.  Its
summary is then made from the samples and put in the outbox like any other.

The run is the one its prolog recorded in its allocation records; where
they name none, the one after the last summary made for the job on this
node (0 when none was): monitord has no restart count of a job slurmctld
forgot.
"""

from __future__ import annotations

from slurmpool.accounting import outbox
from slurmpool.accounting.enqueue import enqueue_run
from slurmpool.records import record

TYPE_CHECKING = False
if TYPE_CHECKING:
    from slurmpool.slurm.runner import Runner
    from slurmpool.state.store import NodeStore

# A job's devices unsampled this long have left it (monitord samples every 10 s).
QUIET_S = 120.0


@record(frozen=True, slots=True)
class Missed:
    job_id: str
    run: int
    last_sample: float


def candidates(store: NodeStore, now: float, quiet_s: float = QUIET_S) -> list[Missed]:
    """Jobs with samples here and no summary since them, quiet for ``quiet_s`` and
    holding no live allocation on this node (pure store reads; slurmctld not asked)."""
    rows = store.conn.execute(
        "SELECT job_id, MAX(last_t) AS last FROM job_device_totals GROUP BY job_id "
        "HAVING MAX(last_t) < ? ORDER BY last",
        (now - quiet_s,),
    ).fetchall()
    live = {a.job_id for a in store.live()}
    out = []
    for r in rows:
        job_id, last = str(r["job_id"]), float(r["last"])
        if job_id in live:
            continue
        runs = outbox.made(store, job_id)
        # A summary made after the last sample (less the quiet time monitord may
        # still sample a job's device after its epilog summarised it) covers them.
        if runs and max(runs.values()) >= last - quiet_s:
            continue
        out.append(Missed(job_id, max(runs) + 1 if runs else 0, last))
    return out


def make_missed(
    store: NodeStore,
    runner: Runner,
    *,
    node: str,
    cluster: str | None,
    now: float,
    quiet_s: float = QUIET_S,
) -> list[Missed]:
    """Make and enqueue the summary of every missed job; returns those made.

    A job slurmctld still holds as pending or running (a requeue) is left for
    later, and so is every job while slurmctld cannot be asked.
    """
    from slurmpool.accounting.push import ENDED_STATES
    from slurmpool.slurm.runner import SlurmCommandError
    from slurmpool.slurm.squeue import SqueueOutputError, read_live_job

    made = []
    for m in candidates(store, now, quiet_s):
        try:
            live = read_live_job(runner, m.job_id)
        except (SlurmCommandError, SqueueOutputError):
            break
        if live is not None and live.state not in ENDED_STATES:
            continue
        part = enqueue_run(
            store,
            node=node,
            job_id=m.job_id,
            cluster=cluster,
            user=live.user if live is not None else None,
            run=m.run,
            end=m.last_sample,
        )
        if part is not None:
            made.append(Missed(m.job_id, int(part["run"]), m.last_sample))
    return made
