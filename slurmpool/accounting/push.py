"""Push outbox summaries into Slurm accounting and verify them.

For each summary: read the job's AdminComment with ``sacct`` (which also
tells whether the job record exists yet), merge this node's part into the
summary already there (other nodes of the job push their own parts), write
it with ``sacctmgr -i modify job where jobid=... set AdminComment=...``
(the only way once the job has ended), read it back with ``sacct`` and
remove the summary from the outbox only when the stored text decodes to
exactly what was written.  Failures stay in the outbox with exponential
backoff.  Every command goes through :class:`~slurmpool.slurm.runner.Runner`.

Standard library only (EpilogSlurmctld may push too).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass

from slurmpool.accounting import codec, outbox
from slurmpool.accounting.summary import contains, index_of, merge
from slurmpool.slurm.admin_comment import AdminComment
from slurmpool.slurm.runner import Runner, SlurmCommandError
from slurmpool.state.store import NodeStore

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


def read_admin_comment(runner: Runner, job_id: str, cluster: str | None = None) -> str | None:
    """The job's AdminComment ('' when empty), or None when accounting has no such job."""
    args = ["-n", "-X", "-P", "-j", job_id, "-o", "JobIDRaw,AdminComment"]
    if cluster:
        args += ["-M", cluster]
    try:
        res = runner.run("sacct", *args, timeout=30)
    except SlurmCommandError as e:
        raise _classify(e, job_id, "sacct") from None
    comment: str | None = None
    for line in res.stdout.splitlines():
        jid, sep, value = line.partition("|")
        if sep and jid.strip() == job_id:
            comment = value  # the last record of a reused/requeued id is the current one
    return comment


def write_admin_comment(
    runner: Runner, job_id: str, value: str, cluster: str | None = None
) -> None:
    where = ["where", f"jobid={job_id}"]
    if cluster:
        where.append(f"cluster={cluster}")
    try:
        runner.run(
            "sacctmgr", "-i", "modify", "job", *where, "set", f"AdminComment={value}", timeout=30
        )
    except SlurmCommandError as e:
        raise _classify(e, job_id, "sacctmgr modify job") from None


def push_one(runner: Runner, item: outbox.Pending) -> None:
    """Store ``item`` in its job's AdminComment and verify it; raise AccountingPushError."""
    current = read_admin_comment(runner, item.job_id, item.cluster)
    if current is None:
        raise JobRecordMissing(
            f"job {item.job_id} has no record in accounting yet (sacct shows none)"
        )
    try:
        existing = codec.decode(current) if codec.find_token(current) else None
    except codec.AdminCommentError:
        existing = None  # a damaged summary is replaced by a whole one
    document = merge(existing, item.job_id, item.cluster, item.node, item.part)
    word = codec.encode(document, index_of(document))
    value = AdminComment.parse(current).with_summary(word).text()
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


@dataclass(frozen=True, slots=True)
class Backoff:
    """Retry delays: ``base_s * 2**attempts``, at most ``max_s``."""

    base_s: float = 5.0
    max_s: float = 300.0

    def delay(self, attempts: int) -> float:
        return float(min(self.max_s, self.base_s * (2 ** min(attempts, 30))))


@dataclass(frozen=True, slots=True)
class PushResult:
    job_id: str
    node: str
    stored: bool
    error: str = ""
    kind: str = ""  # class name of the error


def push_pending(
    store: NodeStore,
    runner: Runner,
    *,
    now: Callable[[], float] = time.time,
    backoff: Backoff = Backoff(),
    due_only: bool = True,
    limit: int = 200,
) -> list[PushResult]:
    """Push the outbox's due summaries (all of them with ``due_only=False``).

    When slurmdbd is down the rest of the batch is not tried: each of them
    is rescheduled like the first.
    """
    results: list[PushResult] = []
    items = outbox.pending(store, due_by=now() if due_only else None, limit=limit)
    dbd_down: SlurmdbdUnavailable | None = None
    for item in items:
        try:
            if dbd_down is not None:
                raise dbd_down
            push_one(runner, item)
        except AccountingPushError as e:
            if isinstance(e, SlurmdbdUnavailable):
                dbd_down = e
            outbox.record_failure(store, item, str(e), now() + backoff.delay(item.attempts))
            results.append(PushResult(item.job_id, item.node, False, str(e), type(e).__name__))
            continue
        outbox.delete_if_unchanged(store, item)
        results.append(PushResult(item.job_id, item.node, True))
    return results
