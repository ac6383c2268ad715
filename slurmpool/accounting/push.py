"""Push outbox summaries into Slurm accounting, verify them, and check them again.

A summary is pushed only once its job has ended for good: sacct shows a
final state with a known End (slurmctld's job-complete record has reached
the database, so no later record from slurmctld can overwrite what is
written here; SLURM_FACTS.md, "The database lags slurmctld"), and slurmctld
does not hold the job as pending or running again (a requeue).  A requeued
job's summaries of earlier runs therefore wait until its last run ends,
and a requeue note written meanwhile is kept beside them, never replaced.

To push: read the job's AdminComment with ``sacct``, merge this node's
part of its run into the summary already there (other nodes and runs push
their own parts), write it with ``sacctmgr -i modify job where jobid=...
set AdminComment=...`` (the only way once the job has ended) and read it
back.  Two nodes of one job can still race (both read, then both write,
the later write without the other's part), so a verified summary stays in
the outbox, *written*, and is checked again after :data:`SETTLE_S`, longer
than any read-modify-write cycle can take (its two commands each time out)
and than slurmctld's records lag the database.  A summary found missing
then is pushed again; one still there leaves the outbox.  Failures stay in
the outbox with exponential backoff.  Every command goes through
:class:`~slurmpool.slurm.runner.Runner`.

Standard library only (EpilogSlurmctld may push too).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass

from slurmpool.accounting import codec, outbox
from slurmpool.accounting.summary import contains, index_of, merge
from slurmpool.records import record
from slurmpool.slurm.admin_comment import AdminComment
from slurmpool.slurm.runner import Runner, SlurmCommandError

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

    from slurmpool.state.store import NodeStore

# Seconds each sacct, sacctmgr or squeue call may take.
CALL_TIMEOUT_S = 30.0
# The longest slurmctld's job records were seen to reach the database late (about
# 20 s after slurmdbd came back; SLURM_FACTS.md).
RECORD_LAG_S = 20.0
# How long after a verified write its summary is checked again: longer than another
# node's read-modify-write cycle (two calls) and than the record lag.
SETTLE_S = 2 * CALL_TIMEOUT_S + RECORD_LAG_S + 10.0
# How often a summary whose job has not ended is looked at again (no attempt counted).
WAIT_S = 30.0

# Job states after which slurmctld sends no more records for the job's run; sacct
# and squeue spell them alike.  A requeued job shows REQUEUED, PENDING or RUNNING.
ENDED_STATES = frozenset(
    {
        "COMPLETED",
        "FAILED",
        "CANCELLED",
        "TIMEOUT",
        "NODE_FAIL",
        "OUT_OF_MEMORY",
        "BOOT_FAIL",
        "DEADLINE",
        "PREEMPTED",
    }
)

_DBD_DOWN_MARKERS = (
    "connection refused",
    "problem talking to the database",
    "persistent connection",
    "unable to contact",
    "timed out",
    "slurmdbd",
)


class AccountingPushError(RuntimeError):
    """A summary could not be stored (yet); it stays in the outbox."""


class SlurmdbdUnavailable(AccountingPushError):
    """slurmdbd (or the database behind it) does not answer."""


class JobRecordMissing(AccountingPushError):
    """The job has no record in accounting yet (slurmctld has not sent it)."""


class VerifyFailed(AccountingPushError):
    """The AdminComment read back is not what was written (overwritten or cut short)."""


class SlurmctldUnavailable(AccountingPushError):
    """slurmctld could not say whether the job runs again."""


class JobNotEnded(AccountingPushError):
    """Not a failure: the job has not ended for good yet (running, requeued, or its
    final record not in the database yet); the summary waits."""


def _classify(e: SlurmCommandError, job_id: str, what: str) -> AccountingPushError:
    text = f"{e.stderr} {e.stdout}".lower()
    if "nothing modified" in text or "didn't affect anything" in text:
        return JobRecordMissing(
            f"job {job_id} has no record in accounting yet ({what} changed nothing); "
            "slurmctld may not have sent it to slurmdbd yet"
        )
    if e.returncode is None or any(m in text for m in _DBD_DOWN_MARKERS):
        return SlurmdbdUnavailable(f"slurmdbd is not reachable ({what}): {e}")
    return AccountingPushError(f"{what} failed: {e}")


@record(frozen=True, slots=True)
class AccountedJob:
    """A job's current record in accounting (the latest run of its id)."""

    state: str  # the first word: "CANCELLED by 0" is CANCELLED
    end: str
    admin_comment: str

    @property
    def ended(self) -> bool:
        """True once the record is final: an ended state and a known End."""
        return self.state in ENDED_STATES and self._end_known

    @property
    def requeued(self) -> bool:
        """A requeue's record with its End: final only if slurmctld ended the job
        without running it again (:func:`ended_job`)."""
        return self.state == "REQUEUED" and self._end_known

    @property
    def _end_known(self) -> bool:
        return self.end not in ("", "Unknown", "None")


def read_job(runner: Runner, job_id: str, cluster: str | None = None) -> AccountedJob | None:
    """The job's record in accounting, or None when accounting has no such job."""
    args = ["-n", "-X", "-P", "-j", job_id, "-o", "JobIDRaw,State,End,AdminComment"]
    if cluster:
        args += ["-M", cluster]
    try:
        res = runner.run("sacct", *args, timeout=CALL_TIMEOUT_S)
    except SlurmCommandError as e:
        raise _classify(e, job_id, "sacct") from None
    job: AccountedJob | None = None
    for line in res.stdout.splitlines():
        fields = line.split("|", 3)  # AdminComment last: it may hold "|"
        if len(fields) == 4 and fields[0].strip() == job_id:
            state = fields[1].split(" ", 1)[0].strip()
            # the last record of a reused id is the current one
            job = AccountedJob(state=state, end=fields[2].strip(), admin_comment=fields[3])
    return job


def read_admin_comment(runner: Runner, job_id: str, cluster: str | None = None) -> str | None:
    """The job's AdminComment ('' when empty), or None when accounting has no such job."""
    job = read_job(runner, job_id, cluster)
    return None if job is None else job.admin_comment


def write_admin_comment(
    runner: Runner, job_id: str, value: str, cluster: str | None = None
) -> None:
    where = ["where", f"jobid={job_id}"]
    if cluster:
        where.append(f"cluster={cluster}")
    try:
        runner.run(
            "sacctmgr",
            "-i",
            "modify",
            "job",
            *where,
            "set",
            f"AdminComment={value}",
            timeout=CALL_TIMEOUT_S,
        )
    except SlurmCommandError as e:
        raise _classify(e, job_id, "sacctmgr modify job") from None


def ended_job(runner: Runner, job_id: str, cluster: str | None = None) -> AccountedJob:
    """The job's final record in accounting; raise JobNotEnded while there is none yet
    or slurmctld holds the job as pending or running again."""
    from slurmpool.slurm.squeue import SqueueOutputError, read_live_job

    job = read_job(runner, job_id, cluster)
    if job is None:
        raise JobRecordMissing(f"job {job_id} has no record in accounting yet (sacct shows none)")
    waiting = JobNotEnded(
        f"job {job_id} has not ended in accounting yet (sacct: {job.state or '?'}, "
        f"End {job.end or '?'}); waiting for slurmctld's final record"
    )
    if not job.ended and not job.requeued:
        raise waiting
    try:
        live = read_live_job(runner, job_id, timeout=CALL_TIMEOUT_S)
    except (SlurmCommandError, SqueueOutputError) as e:
        raise SlurmctldUnavailable(
            f"cannot ask slurmctld whether job {job_id} runs again: {e}"
        ) from None
    if live is not None and live.state not in ENDED_STATES:
        raise JobNotEnded(
            f"job {job_id} is {live.state} in slurmctld (requeued or still running); "
            "its summary goes to accounting once the job ends"
        )
    # A requeue's record with slurmctld done with the job: a job cancelled while its
    # requeue was completing, whose last record Slurm leaves REQUEUED (measured on 22.05,
    # 24.11 and 26.05: tests/data/probe-requeue-cancel-acct.sh).  Were a later record
    # still to come, the second check would find the summary gone and write it again.
    return job


def _decoded(comment: str) -> dict[str, Any] | None:
    try:
        return codec.decode(comment) if codec.find_token(comment) else None
    except codec.AdminCommentError:
        return None  # a damaged summary is replaced by a whole one


# What one push did with a summary.
SETTLED = "settled"  # found stored at its second check: it leaves the outbox
WRITTEN = "written"  # written and read back: checked again after the settle time
REWRITTEN = "rewritten"  # missing at its second check (another writer): written again


def push_one(runner: Runner, item: outbox.Pending) -> str:
    """Store ``item`` in its job's AdminComment and verify it, or check a written one
    again; returns SETTLED, WRITTEN or REWRITTEN, or raises AccountingPushError."""
    job = ended_job(runner, item.job_id, item.cluster)
    existing = _decoded(job.admin_comment)
    checked_before = item.written_at is not None
    if checked_before and existing is not None and contains(existing, item.node, item.part):
        return SETTLED
    document = merge(existing, item.job_id, item.cluster, item.node, item.part)
    word = codec.encode(document, index_of(document))
    value = AdminComment.parse(job.admin_comment).with_summary(word).text()
    write_admin_comment(runner, item.job_id, value, item.cluster)
    stored = read_admin_comment(runner, item.job_id, item.cluster)
    if stored is None:
        raise JobRecordMissing(f"job {item.job_id} disappeared from accounting after the write")
    try:
        back = codec.decode(stored)
    except codec.AdminCommentError as e:
        raise VerifyFailed(
            f"job {item.job_id}: AdminComment read back is unreadable: {e}"
        ) from None
    if not contains(back, item.node, item.part):
        raise VerifyFailed(
            f"job {item.job_id}: the AdminComment read back does not hold node {item.node}'s "
            "summary (another writer replaced it); will retry"
        )
    return WRITTEN if item.written_at is None else REWRITTEN


@dataclass(frozen=True, slots=True)
class Backoff:
    """Retry delays: ``base_s * 2**attempts``, at most ``max_s``."""

    base_s: float = 5.0
    max_s: float = 300.0

    def delay(self, attempts: int) -> float:
        return float(min(self.max_s, self.base_s * (2 ** min(attempts, 30))))


WAITING = "waiting"  # the job has not ended for good: not pushed, no attempt counted
FAILED = "failed"


@dataclass(frozen=True, slots=True)
class PushResult:
    job_id: str
    node: str
    outcome: str  # SETTLED, WRITTEN, REWRITTEN, WAITING or FAILED
    error: str = ""
    kind: str = ""  # class name of the error

    @property
    def stored(self) -> bool:
        """The summary was found in accounting, as written."""
        return self.outcome in (SETTLED, WRITTEN, REWRITTEN)


def push_pending(
    store: NodeStore,
    runner: Runner,
    *,
    now: Callable[[], float] = time.time,
    backoff: Backoff = Backoff(),
    settle_s: float = SETTLE_S,
    due_only: bool = True,
    limit: int = 200,
) -> list[PushResult]:
    """Push the outbox's due summaries, and check again the written ones whose settle
    time has passed.  ``due_only=False`` ignores backoff and waits, never the settle time.

    When slurmdbd is down the rest of the batch is not tried: each of them
    is rescheduled like the first.
    """
    results: list[PushResult] = []
    t = now()
    items = [
        i
        for i in outbox.pending(store, due_by=t if due_only else None, limit=limit)
        if i.written_at is None or i.next_attempt_at <= t
    ]
    dbd_down: SlurmdbdUnavailable | None = None
    for item in items:
        try:
            if dbd_down is not None:
                raise dbd_down
            outcome = push_one(runner, item)
        except JobNotEnded as e:
            outbox.defer(store, item, str(e), now() + WAIT_S)
            results.append(PushResult(item.job_id, item.node, WAITING, str(e), type(e).__name__))
            continue
        except AccountingPushError as e:
            if isinstance(e, SlurmdbdUnavailable):
                dbd_down = e
            outbox.record_failure(store, item, str(e), now() + backoff.delay(item.attempts))
            results.append(PushResult(item.job_id, item.node, FAILED, str(e), type(e).__name__))
            continue
        if outcome == SETTLED:
            outbox.delete_if_unchanged(store, item)
        else:
            written = now()
            outbox.mark_written(store, item, written, written + settle_s)
        results.append(PushResult(item.job_id, item.node, outcome))
    return results
