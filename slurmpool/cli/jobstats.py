"""``slurmpool jobstats JOBID``: one job's GPU use, for its user."""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any, NoReturn

import click

from slurmpool.cli.common import EXIT_FAIL, echo_json, json_option, slurm_runner

FIELDS = (
    "JobIDRaw,User,Account,Partition,NodeList,State,Start,ElapsedRaw,ReqTRES,AllocTRES,AdminComment"
)


def _fail(message: str) -> NoReturn:
    click.echo(f"error: {message}", err=True)
    raise SystemExit(EXIT_FAIL)


def _fetch(url: str, timeout: float = 5.0) -> dict[str, Any] | None:
    try:
        with urllib.request.urlopen(url, timeout=timeout) as resp:
            data = json.loads(resp.read().decode())
    except urllib.error.HTTPError as e:
        if e.code == 404:
            return None
        raise
    return data if isinstance(data, dict) else None


@click.command()
@click.argument("job_id")
@json_option("the statistics")
@click.option(
    "--monitor-url",
    default=None,
    help="monitord of the job's node, e.g. http://127.0.0.1:9810 [NodeAddr:--monitor-port].",
)
@click.option(
    "--monitor-port",
    type=int,
    default=9810,
    show_default=True,
    help="monitord's port on the job's nodes (running jobs).",
)
@click.option(
    "--state-db",
    type=click.Path(dir_okay=False, path_type=Path),
    default=None,
    help="Read a running job's samples from this node store instead of monitord.",
)
def jobstats(
    job_id: str, as_json: bool, monitor_url: str | None, monitor_port: int, state_db: Path | None
) -> None:
    """What a job asked for, what it got, how busy its GPUs were, and whether a
    smaller request would have fitted.

    Whether the job runs now is slurmctld's to say while it knows the job
    (accounting lags it by seconds); running jobs are read from the monitord
    of their node, finished ones from accounting (the summary in AdminComment).

    Example: ``slurmpool jobstats 4242``
    """
    from slurmpool.accounting.codec import AdminCommentError, decode, find_token
    from slurmpool.catalogue import default_catalogue
    from slurmpool.hostlist import expand
    from slurmpool.report.jobstats import build_view, render_text
    from slurmpool.slurm.parse import parse_nodes
    from slurmpool.slurm.runner import SlurmCommandError
    from slurmpool.slurm.squeue import (
        LIVE_STATES,
        LiveJob,
        SqueueOutputError,
        merged_fields,
        read_live_job,
    )

    if not job_id.isdigit():
        _fail(f"job id {job_id!r}: expected digits")
    runner = slurm_runner()
    # slurmctld says whether the job runs now (sacct shows it PENDING for a while
    # after it started); accounting holds the rest and is the record once it ended.
    live: LiveJob | None = None
    ctld_answered = True
    try:
        live = read_live_job(runner, job_id)
    except (SlurmCommandError, SqueueOutputError):
        ctld_answered = False
    accounting: dict[str, str] | None = None
    try:
        res = runner.run("sacct", "-n", "-X", "-P", "-j", job_id, "-o", FIELDS, timeout=30)
    except SlurmCommandError as e:
        if live is None or not live.running:
            _fail(f"cannot read job {job_id} from accounting (is slurmdbd up?): {e}")
    else:
        names = FIELDS.split(",")
        rows = [line.split("|", len(names) - 1) for line in res.stdout.splitlines() if line.strip()]
        rows = [r for r in rows if len(r) == len(names) and r[0] == job_id]
        accounting = dict(zip(names, rows[-1], strict=True)) if rows else None
    fields = merged_fields(accounting, live)
    if fields is None:
        _fail(f"job {job_id} is not in accounting (sacct shows no record) nor known to slurmctld")
    state = fields["State"].split(" ", 1)[0]
    running = live.running if live is not None else (not ctld_answered and state in LIVE_STATES)
    document: dict[str, Any] | None = None
    note = ""
    if running:
        nodes: dict[str, Any] = {}
        try:
            if state_db is not None:
                from slurmpool.accounting.enqueue import build_job_summary
                from slurmpool.state.samples import SAMPLES
                from slurmpool.state.store import NodeStore

                with NodeStore(state_db, (SAMPLES,)) as store:
                    node = state_db.stem
                    nodes[node] = build_job_summary(
                        store, job_id=job_id, user=fields.get("User", "")
                    )
            else:
                for node in expand(fields["NodeList"]):
                    url = monitor_url
                    if url is None:
                        out = runner.run("scontrol", "show", "node", node, timeout=15).stdout
                        found = parse_nodes(out)
                        addr = found[0].record.get("NodeAddr", node) if found else node
                        url = f"http://{addr}:{monitor_port}"
                    served = _fetch(f"{url.rstrip('/')}/jobs/{job_id}")
                    if served is not None:
                        nodes[node] = served["part"]
        except (OSError, SlurmCommandError, ValueError) as e:
            note = f"cannot reach the node's monitor ({e}); is slurmpool monitord running?"
        document = {"v": 1, "job": job_id, "nodes": nodes} if nodes else None
        if document is None and not note:
            note = "monitord has no samples of this job yet"
    else:
        comment = fields.get("AdminComment", "")
        if find_token(comment) is None:
            note = (
                "no slurmpool summary in accounting yet (still in the node's outbox if "
                "slurmdbd was down; `slurmpool accounting flush` on the node pushes it)"
            )
        else:
            try:
                document = decode(comment)
            except AdminCommentError as e:
                note = str(e)
    view = build_view(fields, document, running=running, catalogue=default_catalogue(), note=note)
    if as_json:
        echo_json(view.to_json())
    else:
        click.echo(render_text(view), nl=False)
