"""``slurmpool sim init|show|reset``: simulated GPU nodes for tests and the sandbox."""

from __future__ import annotations

import click

from slurmpool.catalogue import CatalogueError
from slurmpool.cli.common import EXIT_FAIL, echo_json, json_option, usage_error
from slurmpool.sim.node import SimGpuSpec, create_node, node_summary, reset_gpu
from slurmpool.sim.state import SimError

state_option = click.option(
    "--state",
    "state_dir",
    required=True,
    type=click.Path(file_okay=False),
    help="State directory of the simulated node.",
)


@click.group()
def sim() -> None:
    """Simulated GPU nodes: the NVML simulator's state, device files and resets."""


@sim.command()
@state_option
@click.option(
    "--device-root",
    required=True,
    type=click.Path(file_okay=False),
    help="Where to create nvidiaN, nvidiactl and nvidia-caps/ (a /dev stand-in).",
)
@click.option(
    "--gpu",
    "gpus",
    multiple=True,
    required=True,
    metavar="MODEL[:mig]",
    help="A GPU (catalogue name); ':mig' starts it in MIG mode.  Repeat per GPU.",
)
@click.option(
    "--proc-root",
    type=click.Path(file_okay=False),
    help="Where driver/nvidia-caps/mig-minors goes (default: STATE/proc).",
)
@click.option("--node-name", help="Node name recorded in the state (default: the hostname).")
@click.option(
    "--modify-device-files",
    type=click.Choice(["0", "1"]),
    default="1",
    show_default=True,
    help="The driver's NVreg_ModifyDeviceFiles: 1 lets nvidia-modprobe -f reset capability nodes.",
)
@click.option("--force", is_flag=True, help="Replace an existing simulated node.")
def init(
    state_dir: str,
    device_root: str,
    gpus: tuple[str, ...],
    proc_root: str | None,
    node_name: str | None,
    modify_device_files: str,
    force: bool,
) -> None:
    """Create a simulated node.

    Example: ``slurmpool sim init --state /tmp/n1 --device-root /tmp/n1/dev
    --gpu A100-SXM4-80GB:mig --gpu A100-SXM4-80GB``
    """
    try:
        specs = [SimGpuSpec.parse(g) for g in gpus]
        node = create_node(
            state_dir,
            device_root,
            specs,
            force=force,
            proc_root=proc_root,
            node_name=node_name,
            modify_device_files=modify_device_files == "1",
        )
    except (SimError, CatalogueError) as e:
        usage_error(str(e))
    click.echo(f"created simulated node with {len(specs)} GPU(s): backend {node.backend_spec}")
    click.echo(f"device root {node.device_root}, mig-minors {node.mig_minors_path}")


@sim.command()
@state_option
@json_option("the node")
def show(state_dir: str, as_json: bool) -> None:
    """Show a simulated node: GPUs, MIG instances and registered processes.

    Example: ``slurmpool sim show --state /tmp/n1 --json``
    """
    try:
        summary = node_summary(state_dir)
    except SimError as e:
        usage_error(str(e))
    if as_json:
        echo_json(summary)
        return
    click.echo(f"node {summary['node_name']}  driver {summary['driver_version']}")
    for g in summary["gpus"]:
        mig = "MIG n/a"
        if g["mig_capable"]:
            mig = f"MIG {'on' if g['mig_current'] else 'off'}"
            if g["mig_pending"] != g["mig_current"]:
                mig += f" (pending {'on' if g['mig_pending'] else 'off'})"
        click.echo(f"GPU {g['index']}  {g['model']}  {g['uuid']}  {mig}  NUMA {g['numa_node']}")
        for i in g["instances"]:
            start, size = i["placement"]
            cis = ", ".join(f"CI {c['ci_id']} {c['uuid']}" for c in i["cis"]) or "no CI"
            click.echo(f"    GI {i['gi_id']:<2} {i['profile']:<12} {start}:{size}  {cis}")
        for p in g["processes"]:
            where = "" if p["gi"] is None else f" on GI {p['gi']} CI {p['ci']}"
            click.echo(f"    pid {p['pid']}{where}: {p['used_mib']} MiB, {p['util']}%")


@sim.command()
@state_option
@click.option("--gpu", "index", type=int, help="GPU index (default: all GPUs).")
def reset(state_dir: str, index: int | None) -> None:
    """Simulate a GPU reset: apply a pending MIG mode, drop MIG instances.

    Example: ``slurmpool sim reset --state /tmp/n1 --gpu 0``
    """
    try:
        done = reset_gpu(state_dir, index)
    except SimError as e:
        click.echo(f"error: {e}", err=True)
        raise SystemExit(EXIT_FAIL) from None
    click.echo(f"reset GPU(s) {', '.join(map(str, done))}")


@sim.command()
@state_option
@click.option(
    "-f",
    "access_file",
    required=True,
    type=click.Path(dir_okay=False),
    help="A capability's access file (PROC/driver/nvidia/capabilities/.../access).",
)
def modprobe(state_dir: str, access_file: str) -> None:
    """Do what ``nvidia-modprobe -f ACCESS_FILE`` does on a real node: make the
    capability's device node root's, in the mode its access file advertises,
    where the driver may modify device files.

    Example: ``slurmpool sim modprobe --state /tmp/n1 -f
    /tmp/n1/proc/driver/nvidia/capabilities/gpu0/mig/gi1/access``
    """
    from slurmpool.sim.capabilities import reset_node
    from slurmpool.sim.state import StateStore

    try:
        device_root = StateStore(state_dir).read()["device_root"]
        outcome = reset_node(access_file, device_root)
    except (SimError, OSError, ValueError) as e:
        click.echo(f"error: {e}", err=True)
        raise SystemExit(EXIT_FAIL) from None
    click.echo(outcome)
