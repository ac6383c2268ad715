"""``slurmpool monitord``: the node's GPU monitor daemon."""

from __future__ import annotations

import signal
import sys
import threading
import time
from pathlib import Path
from types import FrameType

import click

from slurmpool.cli.common import EXIT_FAIL, echo_json, slurm_runner, usage_error
from slurmpool.cli.nodeopts import node_context, node_options, settle_option, settle_seconds

TYPE_CHECKING = False
if TYPE_CHECKING:
    from slurmpool.state.samples import DeviceSample


def _log(message: str) -> None:
    stamp = time.strftime("%Y-%m-%dT%H:%M:%S")
    click.echo(f"{stamp} slurmpool-monitord: {message}", err=True)


@click.command()
@node_options
@click.option("--backend", default=None, help="GPU backend spec [the node config's gpu_backend].")
@click.option(
    "--interval",
    "interval_s",
    type=float,
    default=None,
    help="Seconds between passes [node config monitor.interval_s, else 10].",
)
@click.option(
    "--address",
    default=None,
    help="Metrics listen address [node config monitor.address, else 127.0.0.1].",
)
@click.option(
    "--port",
    type=int,
    default=None,
    help="Metrics port, 0 picks a free one [node config monitor.port, else 9810].",
)
@click.option("--no-metrics", is_flag=True, help="Serve no Prometheus endpoint.")
@click.option("--no-push", is_flag=True, help="Do not push the accounting outbox.")
@click.option(
    "--retention-hours",
    type=float,
    default=None,
    help="Keep raw samples this long [node config monitor.retention_hours, else 48].",
)
@click.option(
    "--repair-interval",
    "repair_s",
    type=float,
    default=None,
    help="Seconds between repairs of the vgpufit counts slurmctld has of a MIG-pooled "
    "node, 0 for none [node config monitor.repair_interval_s, else 30].",
)
@settle_option
@click.option("--once", is_flag=True, help="One sampling pass (and one push), then exit.")
@click.option("--json", "as_json", is_flag=True, help="With --once: print the pass as JSON.")
def monitord(
    node_config: Path,
    node: str,
    state_db: Path | None,
    backend: str | None,
    interval_s: float | None,
    address: str | None,
    port: int | None,
    no_metrics: bool,
    no_push: bool,
    retention_hours: float | None,
    settle_s: float | None,
    repair_s: float | None,
    once: bool,
    as_json: bool,
) -> None:
    """Sample this node's GPUs, attribute them to jobs, export and store them.

    Every interval: per GPU utilisation, memory and power; per MIG instance
    memory and (Hopper and later) SM utilisation; processes attributed to
    Slurm jobs.  Samples go to the node state store; Prometheus metrics are
    served on --address:--port (/metrics, and /jobs/<id> for jobstats); the
    accounting outbox is pushed with backoff.  On a node that pools MIG GPUs
    in compute slices, the vgpufit counts slurmctld has of the node are
    repaired at start and every --repair-interval: a slurmd registration, a
    slurmctld restart and `scontrol reconfigure` put gres.conf's back.  Stop
    it with SIGTERM.

    Example: ``slurmpool monitord --node-config /etc/slurm/node-config.json --once``
    """
    from slurmpool.gpu.backend import GpuBackendError
    from slurmpool.gpu.select import open_backend
    from slurmpool.monitor import pidfile
    from slurmpool.monitor.attribution import PidResolver
    from slurmpool.monitor.daemon import (
        DEFAULT_ADDRESS,
        DEFAULT_INTERVAL_S,
        DEFAULT_PORT,
        Monitor,
        MonitorSettings,
    )
    from slurmpool.monitor.repair import DEFAULT_REPAIR_S, FAILED, FitRepair
    from slurmpool.monitor.sampler import Sampler
    from slurmpool.state.samples import Retention

    ctx = node_context(node_config, node, state_db)
    conf = ctx.monitor_settings()
    interval = (
        interval_s if interval_s is not None else float(conf.get("interval_s", DEFAULT_INTERVAL_S))
    )
    if interval <= 0:
        usage_error(f"--interval must be positive, got {interval:g}")
    hours = (
        retention_hours if retention_hours is not None else float(conf.get("retention_hours", 48))
    )
    repair_every = (
        repair_s if repair_s is not None else float(conf.get("repair_interval_s", DEFAULT_REPAIR_S))
    )
    if repair_every < 0:
        usage_error(f"--repair-interval must be 0 (none) or positive, got {repair_every:g}")
    settings = MonitorSettings(
        interval_s=interval,
        address=address or str(conf.get("address", DEFAULT_ADDRESS)),
        port=None
        if no_metrics or once
        else (port if port is not None else int(conf.get("port", DEFAULT_PORT))),
        retention=Retention(max_age_s=hours * 3600.0),
        push=not no_push,
        settle_s=settle_seconds(ctx, settle_s),
        missed_every_s=MonitorSettings.missed_every_s if ctx.config.accounting else None,
        repair_every_s=repair_every,
    )
    try:
        gpu = open_backend(backend or ctx.config.gpu_backend)
    except GpuBackendError as e:
        click.echo(f"error: {e}", err=True)
        raise SystemExit(EXIT_FAIL) from None
    proc_root = ctx.config.path("proc_root")
    sampler = Sampler(gpu, ctx.node, modes=ctx.gpu_modes(), pids=PidResolver(proc_root))
    runner = slurm_runner()
    repair = None
    cls = ctx.config.node_class(ctx.node)
    if repair_every > 0 and cls is not None and cls.publishes_fit:
        spec, minors = backend or ctx.config.gpu_backend, ctx.config.path("mig_minors")
        repair = FitRepair(
            node=ctx.node,
            config=ctx.config,
            cls=cls,
            open_backend=lambda: open_backend(spec, mig_minors_path=minors),
            runner=runner,
            log=_log,
        )
    monitor = Monitor(
        node=ctx.node,
        store_path=ctx.store_path,
        sampler=sampler,
        settings=settings,
        runner=runner,
        log=_log,
        repair=repair,
    )
    if once:
        try:
            sampler.prime()
            time.sleep(0.15)
            snap = monitor.pass_once()
            results = monitor.push_once() if not no_push else []
            fit = monitor.repair_once()
        finally:
            monitor.close()
            gpu.close()
        if as_json:
            echo_json(
                {
                    "node": ctx.node,
                    "t": snap.t,
                    "duration_s": snap.duration_s,
                    "errors": snap.errors,
                    "samples": [_sample_json(s) for s in snap.samples],
                    "pushed": [r.job_id for r in results if r.stored],
                    "push_failed": {r.job_id: r.error for r in results if not r.stored},
                    "fit_repair": fit,
                }
            )
        else:
            for s in snap.samples:
                dev = f"GPU {s.gpu_index}" + (
                    f" gi{s.gi_id} {s.profile}" if s.gi_id is not None else ""
                )
                util = "n/a" if s.util is None else f"{s.util:.0f}%"
                click.echo(
                    f"{dev:<22} job={s.job_id or '-':<8} util={util:<5} "
                    f"mem={s.mem_used_mib}/{s.mem_total_mib} MiB procs={s.nprocs}"
                )
            if fit is not None:
                click.echo(f"vgpufit counts in slurmctld: {fit}")
        raise SystemExit(EXIT_FAIL if snap.errors or fit == FAILED else 0)

    stop = threading.Event()

    def _stop(signum: int, frame: FrameType | None) -> None:
        _log(f"signal {signum}: stopping")
        stop.set()

    signal.signal(signal.SIGTERM, _stop)
    signal.signal(signal.SIGINT, _stop)
    if hasattr(signal, "SIGHUP"):
        signal.signal(signal.SIGHUP, signal.SIG_IGN)
    try:
        monitor.start_server()
    except OSError as e:
        monitor.close()
        click.echo(f"error: cannot listen on {settings.address}:{settings.port}: {e}", err=True)
        raise SystemExit(EXIT_FAIL) from None
    _log(f"node {ctx.node}: sampling {gpu.name} every {interval:g} s into {ctx.store_path}")
    if repair is not None:
        _log(f"node {ctx.node}: repairing its vgpufit counts in slurmctld every {repair_every:g} s")
    run_dir = ctx.config.path("run_dir")
    try:
        pidfile.claim(run_dir)
    except OSError as e:  # doctor cannot tell that it runs; it runs all the same
        _log(f"cannot write {pidfile.PID_FILE} in {run_dir}: {e}")
    try:
        monitor.run(stop)
    finally:
        gpu.close()
        pidfile.release(run_dir)
    _log("stopped")
    sys.stdout.flush()


def _sample_json(s: DeviceSample) -> dict[str, object]:
    from slurmpool.records import asdict

    return asdict(s)
