"""``slurmpool accounting flush|status|decode``: the job-summary outbox by hand."""

from __future__ import annotations

import json
import time
from pathlib import Path

import click

from slurmpool.cli.common import EXIT_FAIL, echo_json, json_option, slurm_runner, usage_error
from slurmpool.cli.nodeopts import (
    existing_store,
    node_context,
    node_options,
    settle_option,
    settle_seconds,
)

TYPE_CHECKING = False
if TYPE_CHECKING:
    from slurmpool.accounting.push import PushResult


@click.group()
def accounting() -> None:
    """Job GPU summaries on their way into Slurm accounting (AdminComment).

    Example::

        slurmpool accounting status
        slurmpool accounting flush
        slurmpool accounting decode --job 42
    """


@accounting.command()
@node_options
@settle_option
@json_option("the results")
def flush(
    node_config: Path, node: str, state_db: Path | None, settle_s: float | None, as_json: bool
) -> None:
    """Push every summary in this node's outbox now, ignoring backoff.

    A summary is pushed once its job has ended for good (waiting ones are
    listed); a stored one stays in the outbox until a second check, the
    settle time later, finds it still there.  Exit status 1 when any
    summary could not be stored (it stays in the outbox).

    Example: ``slurmpool accounting flush --node sbx1``
    """
    from slurmpool.accounting import outbox
    from slurmpool.accounting import push as p
    from slurmpool.state.store import NodeStore

    ctx = node_context(node_config, node, state_db)
    settle = settle_seconds(ctx, settle_s)
    with NodeStore(existing_store(ctx), (outbox.OUTBOX,)) as store:
        results = p.push_pending(store, slurm_runner(), settle_s=settle, due_only=False)
        left = outbox.pending(store)
    written = sum(i.written_at is not None for i in left)
    if as_json:
        echo_json(
            {
                "stored": [
                    {"job": r.job_id, "node": r.node, "outcome": r.outcome}
                    for r in results
                    if r.stored
                ],
                "waiting": [
                    {"job": r.job_id, "node": r.node, "why": r.error}
                    for r in results
                    if r.outcome == p.WAITING
                ],
                "failed": [
                    {"job": r.job_id, "node": r.node, "error": r.error, "kind": r.kind}
                    for r in results
                    if r.outcome == p.FAILED
                ],
                "pending": len(left),
                "written": written,
            }
        )
    else:
        for r in results:
            click.echo(_flush_line(r, settle))
        click.echo(
            f"{sum(r.stored for r in results)} stored, {len(left)} still in the outbox "
            f"({written} stored, to be checked again)"
        )
    if any(r.outcome == p.FAILED for r in results):
        raise SystemExit(EXIT_FAIL)


def _flush_line(r: PushResult, settle_s: float) -> str:
    from slurmpool.accounting import push as p

    where = f"job {r.job_id} ({r.node})"
    if r.outcome == p.SETTLED:
        return f"settled  {where}: stored, found again; out of the outbox"
    if r.stored:
        again = (
            " (written again: another writer had replaced it)" if r.outcome == p.REWRITTEN else ""
        )
        return f"stored   {where}: checked again in {settle_s:.0f} s{again}"
    if r.outcome == p.WAITING:
        return f"waiting  {where}: {r.error}"
    return f"pending  {where}: {r.error}"


@accounting.command()
@node_options
@json_option("the outbox")
def status(node_config: Path, node: str, state_db: Path | None, as_json: bool) -> None:
    """List the summaries waiting in this node's outbox.

    Example: ``slurmpool accounting status``
    """
    from slurmpool.accounting import outbox
    from slurmpool.state.store import NodeStore

    ctx = node_context(node_config, node, state_db)
    with NodeStore(existing_store(ctx), (outbox.OUTBOX,)) as store:
        items = outbox.pending(store)
    now = time.time()
    if as_json:
        echo_json(
            [
                {
                    "job": i.job_id,
                    "node": i.node,
                    "run": i.run,
                    "attempts": i.attempts,
                    "age_s": round(now - i.created_at, 1),
                    "next_attempt_in_s": round(max(0.0, i.next_attempt_at - now), 1),
                    "last_error": i.last_error,
                }
                for i in items
            ]
        )
        return
    if not items:
        click.echo("outbox empty: every summary is stored in accounting")
        return
    for i in items:
        click.echo(
            f"job {i.job_id} ({i.node}{f', run {i.run}' if i.run else ''}): "
            f"{i.attempts} attempts, next in "
            f"{max(0.0, i.next_attempt_at - now):.0f} s; {i.last_error or 'not tried yet'}"
        )


@accounting.command()
@click.argument("admin_comment", required=False)
@click.option("--job", "job_id", default=None, help="Read the AdminComment of this job (sacct).")
def decode(admin_comment: str | None, job_id: str | None) -> None:
    """Decode an ``sp1:`` AdminComment to JSON.

    Example: ``slurmpool accounting decode --job 42``
    """
    from slurmpool.accounting.codec import AdminCommentError
    from slurmpool.accounting.codec import decode as decode_text
    from slurmpool.accounting.push import AccountingPushError, read_admin_comment

    if (admin_comment is None) == (job_id is None):
        usage_error("give an AdminComment text or --job JOBID (one of them)")
    text = admin_comment
    if job_id is not None:
        try:
            text = read_admin_comment(slurm_runner(), job_id)
        except AccountingPushError as e:
            click.echo(f"error: {e}", err=True)
            raise SystemExit(EXIT_FAIL) from None
        if text is None:
            click.echo(f"error: job {job_id} has no record in accounting", err=True)
            raise SystemExit(EXIT_FAIL)
    try:
        data = decode_text(text or "")
    except AdminCommentError as e:
        click.echo(f"error: {e}", err=True)
        raise SystemExit(EXIT_FAIL) from None
    click.echo(json.dumps(data, indent=2))
