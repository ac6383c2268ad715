"""``slurmpool report``: GPU use of the pool over a period, from Slurm accounting."""

from __future__ import annotations

import sys
from collections.abc import Iterable
from contextlib import ExitStack
from pathlib import Path

import click

from slurmpool.cli.common import EXIT_FAIL, echo_json, json_option, slurm_runner, usage_error


@click.command()
@click.option(
    "--since",
    default="-7d",
    show_default=True,
    help="Start: YYYY-MM-DD[THH:MM[:SS]], now, or an offset like -7d.",
)
@click.option("--until", default="now", show_default=True, help="End (same forms as --since).")
@click.option(
    "--input",
    "input_path",
    type=click.Path(dir_okay=False, path_type=Path),
    default=None,
    help="Read saved `sacct -n -P -o FIELDS` output instead of sacct "
    "('-' for stdin); see --print-sacct-args.",
)
@click.option("--cluster", "clusters", multiple=True, help="Only this cluster (repeatable).")
@click.option("--partition", "partitions", multiple=True, help="Only this partition (repeatable).")
@click.option(
    "--vgpu-units",
    type=int,
    default=7,
    show_default=True,
    help="vgpu units per GPU, for jobs without a slurmpool summary.",
)
@click.option("--top", type=int, default=10, show_default=True, help="How many top wasters.")
@click.option(
    "--heatmap-by",
    type=click.Choice(["gpu", "node"]),
    default="gpu",
    show_default=True,
    help="Heatmap rows: one per GPU or one per node.",
)
@json_option("the report")
@click.option("--csv", "as_csv", is_flag=True, help="Print CSV instead of a table.")
@click.option(
    "--html",
    "html_path",
    type=click.Path(dir_okay=False, path_type=Path),
    default=None,
    help="Also write an HTML report with charts to this file.",
)
@click.option(
    "--heatmap",
    "png_path",
    type=click.Path(dir_okay=False, path_type=Path),
    default=None,
    help="Also draw the heatmap PNG (needs the 'report' extra).",
)
@click.option(
    "--jobs-csv",
    "jobs_path",
    type=click.Path(dir_okay=False, path_type=Path),
    default=None,
    help="Instead of the report, write one row per GPU job that ran and ended (submit, "
    "start, end, user, account, request, what was carved, utilisation) to this file "
    "('-' for stdout): a trace for `slurmpool simulate --trace`.",
)
@click.option("--print-sacct-args", is_flag=True, help="Print the sacct arguments and exit.")
def report(
    since: str,
    until: str,
    input_path: Path | None,
    clusters: tuple[str, ...],
    partitions: tuple[str, ...],
    vgpu_units: int,
    top: int,
    heatmap_by: str,
    as_json: bool,
    as_csv: bool,
    html_path: Path | None,
    png_path: Path | None,
    jobs_path: Path | None,
    print_sacct_args: bool,
) -> None:
    """GPU-hours allocated (slice-weighted) and busy by user, account, partition,
    GPU model and profile; requeues; top wasters; a heatmap per GPU and hour.

    Reads ``sacct --parsable2`` as a stream (AdminComment summaries decoded,
    AllocTRES gres/gpu and gres/vgpu for jobs without one).

    Example: ``slurmpool report --since 2026-11-01 --until 2026-12-01 --html pool.html``
    """
    from slurmpool.report.aggregate import Aggregator
    from slurmpool.report.render import to_csv, to_json, to_table
    from slurmpool.report.sacct import sacct_args, stream_sacct
    from slurmpool.report.timespec import TimeSpecError, parse_time, sacct_time
    from slurmpool.slurm.runner import SlurmCommandError

    if as_json and as_csv:
        usage_error("--json and --csv exclude each other")
    try:
        t0, t1 = parse_time(since), parse_time(until)
    except TimeSpecError as e:
        usage_error(str(e))
    if t1 <= t0:
        usage_error(f"--until ({until}) must be after --since ({since})")
    if jobs_path is not None:
        others = {"--json": as_json, "--csv": as_csv, "--html": html_path, "--heatmap": png_path}
        given = [name for name, value in others.items() if value]
        if given:
            usage_error(
                f"--jobs-csv writes the jobs instead of the report; leave out {', '.join(given)}"
            )
        from slurmpool.report.jobs import jobs_sacct_args

        args = jobs_sacct_args(sacct_time(t0), sacct_time(t1), clusters, partitions)
    else:
        args = sacct_args(sacct_time(t0), sacct_time(t1), clusters, partitions)
    if print_sacct_args:
        click.echo(" ".join(["sacct", *args]))
        return
    if jobs_path is not None:
        _write_jobs(args, input_path, jobs_path, vgpu_units)
        return
    if png_path is not None:
        from slurmpool.report.heatmap import MissingExtra, require_pyplot

        try:
            require_pyplot()  # fail before reading a month of accounting
        except MissingExtra as e:
            click.echo(f"error: {e}", err=True)
            raise SystemExit(EXIT_FAIL) from None
    agg = Aggregator(t0, t1, vgpu_units=vgpu_units, top=top, heatmap_by=heatmap_by)
    try:
        if input_path is None:
            agg.add_lines(stream_sacct(slurm_runner(), args))
        elif str(input_path) == "-":
            agg.add_lines(sys.stdin)
        else:
            with open(input_path, encoding="utf-8", errors="replace") as f:
                agg.add_lines(f)
    except SlurmCommandError as e:
        click.echo(f"error: reading accounting failed (is slurmdbd up?): {e}", err=True)
        raise SystemExit(EXIT_FAIL) from None
    except OSError as e:
        click.echo(f"error: {input_path}: {e.strerror}", err=True)
        raise SystemExit(EXIT_FAIL) from None
    result = agg.result()
    if as_json:
        echo_json(to_json(result))
    elif as_csv:
        click.echo(to_csv(result), nl=False)
    else:
        click.echo(to_table(result, top), nl=False)
    for line in result.errors[:5]:
        click.echo(f"warning: {line}", err=True)
    if html_path is not None:
        from slurmpool.report.html import write_html

        write_html(result, html_path)
        click.echo(f"wrote {html_path}", err=True)
    if png_path is not None:
        from slurmpool.report.heatmap import write_png

        write_png(result, png_path)
        click.echo(f"wrote {png_path}", err=True)


def _write_jobs(args: list[str], input_path: Path | None, out: Path, vgpu_units: int) -> None:
    """``report --jobs-csv``: the jobs of sacct (or of its saved output) as CSV rows."""
    from slurmpool.report.jobs import job_rows, write_jobs_csv
    from slurmpool.report.sacct import stream_sacct
    from slurmpool.slurm.runner import SlurmCommandError

    errors: list[str] = []
    try:
        with ExitStack() as stack:
            if input_path is None:
                lines: Iterable[str] = stream_sacct(slurm_runner(), args)
            elif str(input_path) == "-":
                lines = sys.stdin
            else:
                lines = stack.enter_context(open(input_path, encoding="utf-8", errors="replace"))
            rows = job_rows(lines, vgpu_units, errors)
            if str(out) == "-":
                n = write_jobs_csv(rows, sys.stdout)
            else:
                f = stack.enter_context(open(out, "w", encoding="utf-8", newline=""))
                n = write_jobs_csv(rows, f)
    except SlurmCommandError as e:
        click.echo(f"error: reading accounting failed (is slurmdbd up?): {e}", err=True)
        raise SystemExit(EXIT_FAIL) from None
    except OSError as e:
        click.echo(f"error: {e.filename}: {e.strerror}", err=True)
        raise SystemExit(EXIT_FAIL) from None
    for line in errors[:5]:
        click.echo(f"warning: {line}", err=True)
    if len(errors) > 5:
        click.echo(f"warning: {len(errors) - 5} more unreadable lines", err=True)
    if str(out) != "-":
        click.echo(f"wrote {out}: {n} GPU jobs", err=True)
