"""``slurmpool simulate``: replay a trace of GPU jobs under each pooling policy."""

from __future__ import annotations

import sys

import click

from slurmpool.cli.common import (
    EXIT_FAIL,
    echo_json,
    json_option,
    load_policy_or_exit,
    usage_error,
    var_option,
)

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Mapping

    from slurmpool.simulate.pools import NodeShape


def _hours(seconds: float) -> str:
    return f"{seconds / 3600:.2f} h"


@click.command()
@click.option(
    "--trace",
    "trace_path",
    required=True,
    type=click.Path(dir_okay=False, exists=True),
    help="The jobs: an openb pod list (Alibaba cluster-trace-gpu-v2023), or a site's own "
    "from `slurmpool report --jobs-csv`.",
)
@click.option("--nodes", type=click.IntRange(min=1), help="Nodes in the pool.")
@click.option("--gpus-per-node", type=click.IntRange(min=1), help="GPUs of each node.")
@click.option("--model", help="The GPU model (`slurmpool models`), with MIG.")
@click.option(
    "--policy",
    "policy_path",
    type=click.Path(dir_okay=False, exists=True),
    help="Model the pool as a site's policy has it: every node and GPU of its node "
    "groups (instead of --nodes, --gpus-per-node and --model).",
)
@var_option
@click.option(
    "--compare",
    "policies",
    default="whole,mig,fluid",
    show_default=True,
    help="Policies to replay the trace under, comma-separated: whole, mig, mig-blind, "
    "fluid, mig-static:LAYOUT (3g+2g+2g on every GPU; 7g/3g+2g+2g: a layout per GPU, the last "
    "repeating) and shared:SHARES (time-sliced shares per GPU).",
)
@click.option(
    "--scheduler",
    type=click.Choice(["fifo", "backfill"]),
    default="fifo",
    show_default=True,
    help="How waiting tasks start (see the README).",
)
@click.option(
    "--limit-factor",
    type=click.FloatRange(min=1),
    default=1.0,
    show_default=True,
    help="backfill: a task's time limit is its duration times this.",
)
@click.option(
    "--requeue-delay",
    type=click.IntRange(min=0),
    default=120,
    show_default=True,
    help="Seconds before a task the prolog requeued may start again (Slurm's credential "
    "lifetime, 120 s unless AuthInfo=cred_expire sets another).",
)
@click.option(
    "--watts",
    "watts",
    multiple=True,
    metavar="[MODEL=]IDLE/BUSY",
    help="A GPU's power at idle and at full load, for the energy figures (repeatable; "
    "without MODEL, for every model).  Default: the datasheet maximum, and 15%% of it "
    "as an idle estimate.",
)
@click.option(
    "--html",
    "html_path",
    type=click.Path(dir_okay=False),
    help="Also write the comparison as an HTML page with charts: the queue's length over "
    "time, the mean wait by request size and the use of the pool, per policy.",
)
@json_option("the figures")
def simulate(
    trace_path: str,
    nodes: int | None,
    gpus_per_node: int | None,
    model: str | None,
    policy_path: str | None,
    variables: Mapping[str, str],
    policies: str,
    scheduler: str,
    limit_factor: float,
    requeue_delay: int,
    watts: tuple[str, ...],
    html_path: str | None,
    as_json: bool,
) -> None:
    """Replay a trace's GPU tasks on a modelled pool under each pooling policy and
    print how long they waited and how much of the pool they used.

    ``whole`` gives every task whole GPUs; ``mig`` is slurmpool (Slurm counts vgpu
    units and the instances each node publishes that it can carve, and the prolog
    carves with the production placement); ``mig-blind`` the same with vgpu units
    alone, so the prolog requeues a task whose node is too fragmented; ``fluid``
    slices with no geometry; ``mig-static:LAYOUT`` fixed MIG instances;
    ``shared:SHARES`` time-sliced shares.
    A task a policy cannot run at all (no instance of a static layout holds it) is
    counted as refused.

    Example: ``slurmpool simulate --trace openb_pod_list_default.csv --nodes 6
    --gpus-per-node 8 --model A100-SXM4-80GB --compare whole,mig,fluid``
    """
    from slurmpool.catalogue import CatalogueError
    from slurmpool.simulate.energy import WattsError, parse_watts, power_for
    from slurmpool.simulate.pools import PoolError, make_pool, policy_words
    from slurmpool.simulate.replay import WAIT_REASONS, compare
    from slurmpool.simulate.trace import TraceError, read_trace

    wanted = [p.strip() for p in policies.split(",") if p.strip()]
    if not wanted:
        usage_error(f"--compare {policies!r}: no policy; expected some of {policy_words()}")
    try:
        shapes = _shapes(nodes, gpus_per_node, model, policy_path, variables)
        for policy in wanted:  # a wrong policy fails before the trace is read
            make_pool(policy, shapes)
        every, named = parse_watts(watts)
        power = power_for(shapes, every, named)
        tasks = read_trace(trace_path)
        progress = _show_progress if sys.stderr.isatty() else None
        results = compare(
            tasks, wanted, shapes, scheduler, limit_factor, requeue_delay, power, progress
        )
    except (CatalogueError, TraceError, PoolError, WattsError) as e:
        usage_error(str(e))
    pool = _describe(shapes)
    where = ", ".join(f"{p['nodes']} nodes x {p['gpus']} {p['model']}" for p in pool)
    heading = f"{len(tasks)} GPU tasks on {where}, scheduler {scheduler}"
    if html_path is not None:
        from slurmpool.simulate.html import write_html

        try:
            write_html(results, f"{trace_path}: {heading}", html_path)
        except OSError as e:
            click.echo(f"error: {html_path}: {e.strerror}", err=True)
            raise SystemExit(EXIT_FAIL) from None
        click.echo(f"wrote {html_path}", err=True)
    if as_json:
        echo_json(
            {
                "trace": trace_path,
                "pool": pool,
                "scheduler": scheduler,
                "limit_factor": limit_factor,
                "requeue_delay_s": requeue_delay,
                "power": {m: None if w is None else w.to_json() for m, w in power.items()},
                "results": [r.to_json() for r in results],
            }
        )
        return
    click.echo(heading)
    refused = any(r.refused for r in results)
    head: tuple[str, ...] = (
        *("policy", "tasks", "wait mean", "wait p95", "1-GPU mean", "multi mean"),
        *("asked slice-h", "held slice-h", "util", "frag requeues"),
        *(("refused",) if refused else ()),
    )
    rows = [
        (
            r.policy,
            str(r.tasks),
            _hours(r.wait_mean_s),
            _hours(r.wait_p95_s),
            _hours(r.wait_mean_single_s),
            _hours(r.wait_mean_multi_s),
            f"{r.requested_slice_h:.0f}",
            f"{r.allocated_slice_h:.0f}",
            f"{r.util:.1%}",
            str(r.frag_requeues),
            *((str(r.refused),) if refused else ()),
        )
        for r in results
    ]
    _table(head, rows)
    click.echo("")
    for name, w in power.items():
        if w is None:
            click.echo(
                f"energy: no power figures for {name}; give them with --watts {name}=IDLE/BUSY"
            )
        else:
            click.echo(f"energy: {name} {w.idle:g} W idle, {w.busy:g} W busy ({w.source})")
    if all(w is not None for w in power.values()):
        _table(
            ("policy", "energy MWh", "empty GPU-h", "empty MWh"),
            [
                (
                    r.policy,
                    f"{(r.energy_kwh or 0) / 1000:.1f}",
                    f"{r.empty_gpu_h or 0:.0f}",
                    f"{(r.empty_kwh or 0) / 1000:.1f}",
                )
                for r in results
            ],
        )
    click.echo("")
    click.echo("task-hours of waiting, by why the task waited:")
    _table(
        ("policy", *WAIT_REASONS),
        [
            (r.policy, *(f"{r.wait_by_reason_s.get(k, 0) / 3600:.0f}" for k in WAIT_REASONS))
            for r in results
        ],
    )


def _show_progress(policy: str, done: int, total: int) -> None:
    """One line on the terminal, rewritten as the replay goes, cleared when it ends."""
    if done >= total:
        click.echo("\r\033[K", nl=False, err=True)
    else:
        click.echo(f"\r{policy}: {done}/{total} tasks read", nl=False, err=True)


def _table(head: tuple[str, ...], rows: list[tuple[str, ...]]) -> None:
    """Columns padded to their widest cell: the first left-aligned, the rest right."""
    widths = [max(len(row[i]) for row in (head, *rows)) for i in range(len(head))]
    for row in (head, *rows):
        click.echo(
            "  ".join(
                c.ljust(w) if i == 0 else c.rjust(w)
                for i, (c, w) in enumerate(zip(row, widths, strict=True))
            ).rstrip()
        )


def _shapes(
    nodes: int | None,
    gpus_per_node: int | None,
    model: str | None,
    policy_path: str | None,
    variables: Mapping[str, str],
) -> list[NodeShape]:
    """The pool's nodes, from --policy or from --nodes, --gpus-per-node and --model."""
    from slurmpool.catalogue import default_catalogue
    from slurmpool.simulate.pools import uniform
    from slurmpool.simulate.site import site_shapes

    shape = {"--nodes": nodes, "--gpus-per-node": gpus_per_node, "--model": model}
    given = [k for k, v in shape.items() if v is not None]
    if policy_path is not None:
        if given:
            usage_error(f"--policy models the pool; leave out {', '.join(given)}")
        return site_shapes(load_policy_or_exit(policy_path, variables), default_catalogue())
    if nodes is None or gpus_per_node is None or model is None:
        missing = [k for k, v in shape.items() if v is None]
        usage_error(f"the pool: give {', '.join(missing)}, or --policy POLICY")
    return uniform(nodes, gpus_per_node, default_catalogue().get(model))


def _describe(shapes: list[NodeShape]) -> list[dict[str, object]]:
    """The pool as runs of alike nodes, in order."""
    runs: list[tuple[int, int, str]] = []  # (nodes, GPUs each, model)
    for shape in shapes:
        if runs and runs[-1][1:] == (shape.gpus, shape.model.name):
            n, gpus, model = runs[-1]
            runs[-1] = (n + 1, gpus, model)
        else:
            runs.append((1, shape.gpus, shape.model.name))
    return [{"nodes": n, "gpus": gpus, "model": model} for n, gpus, model in runs]
